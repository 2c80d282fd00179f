"""Light actors: many pykka actors on a few scheduler threads, as the BEAM runs Erlang processes.

`LightActor` is a pykka `Actor` whose inbox, futures and loop are this package's (pykka's own
extension points `_create_actor_inbox`, `_create_future`, `_start_actor_loop`). See
actors/runtime/scheduler.py for how actors share a thread, eventloop.py for the loop a
scheduler, the sockets and ZeroMQ of a process may share.
"""

from actors.runtime.eventloop import EventLoop
from actors.runtime.scheduler import (ActorDown, LightActor, LightFuture, Mailbox, Scheduler,
                                      attach, configure, current_scheduler, live_actors,
                                      monitor, scheduler, shutdown, stop_all, thread_count)

__all__ = ["ActorDown", "EventLoop", "LightActor", "LightFuture", "Mailbox", "Scheduler",
           "attach", "configure", "current_scheduler", "live_actors", "monitor", "scheduler",
           "shutdown", "stop_all", "thread_count"]
