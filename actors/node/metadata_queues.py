"""The metadata actor's queues (rabbit_amqqueue's declare, delete and admin calls): declares,
deletes (asked of the queue, finished when it answers), crashes, purge, census, sync, and
list_queues' counts gathered from the running queues."""

from __future__ import annotations

import base64
import logging
import os
import threading

import pykka

from actors import events
from actors import messages as m
from actors import metadata_ops as ops
from actors.core import limits, policies, queue_args, quorum, stream, stream_replication
from actors.core.errors import ChannelError, amqp_text
from actors.messages import StatsTimeout
from actors.node.metadata_dispatch import DEFERRED, handles

log = logging.getLogger("actors.node.metadata")


class QueuesMixin:
    # --- queues -----------------------------------------------------------------------------------
    @handles(ops.QueueDeclare)
    def op_queue_declare(self, rpc, vhost, name, passive, durable, exclusive, auto_delete,
                         arguments, owner, user=None):
        generated = name == "" and not passive
        if generated:
            name = "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
            if user is not None:  # the channel checked configure on any other name
                self.auth.require(user, vhost, "configure", "queue", name)
        key = (vhost, name)
        q = self.queues.get(key)
        if not passive:
            self.queue_churn["queues_declared"] += 1
        if q is not None:
            self._check_exclusive(vhost, name, owner)
            if q.get("crashed"):  # (rabbit_amqqueue:priv_absent of a crashed queue)
                raise ChannelError(404, amqp_text(404, f"queue '{name}' in vhost '{vhost}' "
                                                       "has crashed and failed to restart"))
            if not passive:
                queue_args.assert_flags_equivalent(
                    {"durable": q["durable"], "exclusive": bool(q["exclusive"]),
                     "auto_delete": q["auto_delete"]},
                    {"durable": durable, "exclusive": exclusive, "auto_delete": auto_delete},
                    name, vhost)
                queue_args.assert_equivalent(q["arguments"], arguments, name, vhost)
            if q.get("address") is None:
                self._check_home_up(q)
                # it holds what it recovered: the declarer asks it for its count once it runs
                self.pending_start.setdefault(key, []).append((rpc.reply_to, rpc.req_id, None))
                return DEFERRED
            # the channel asks the queue itself, so that the count it gets comes after every
            # message it sent the queue before (Erlang's per-pair ordering, which
            # rabbit_channel's stat call relies on)
            return {"queue_at": q["address"]}
        if passive:
            raise ChannelError(404, amqp_text(404, f"no queue '{name}' in vhost '{vhost}'"))
        if name.startswith("amq.") and not generated:
            raise ChannelError(403, amqp_text(
                403, f"queue name '{name}' contains reserved prefix 'amq.*'"))
        if user is not None:  # a client's declare (the channel checked configure): the DLX
            self.auth.check_new_queue(user, vhost, name, arguments)
        queue_args.validate(arguments, name, vhost, {"durable": durable, "exclusive": exclusive,
                                                     "auto_delete": auto_delete})
        # rabbit_queue_type:declare's check_vhost_queue_limit: the definitions are the cluster's
        vlimits = self.limits.get(("vhost", vhost))
        if vlimits:
            limits.check_queue_limit(vlimits, sum(1 for (v, _) in self.queues if v == vhost),
                                     name, vhost)
        home = rpc.args.get(ops.ORIGIN) or self.me  # the declaring client's node, as RabbitMQ
        q = {"vhost": vhost, "name": name, "durable": bool(durable),
             "exclusive": owner if exclusive else "", "auto_delete": bool(auto_delete),
             "arguments": arguments, "worker": self._place(home), "address": None,
             "home": home, "mirrors": [], "synced": []}
        if self.cluster is not None and stream.is_stream(arguments):
            # "initial": the members a stream is declared with stay its members' count
            q["stream_size"] = stream_replication.cluster_size(
                arguments, len(self.config.cluster_nodes), policies.effective(
                    self.policies, vhost, name, "queues", self.op_policies))
        q["mirrors"] = self._mirrors_for(q)
        self.queue_churn["queues_created"] += 1
        self.pending_start.setdefault(key, []).append((rpc.reply_to, rpc.req_id, [name, 0, 0]))
        self._change(["router", "add_queue", [vhost, name]], ["queue_put", q])  # starts it
        return DEFERRED

    def _check_home_up(self, q) -> None:
        """A queue whose home node is down cannot be used (RabbitMQ's 404 for it)."""
        home = q.get("home")
        if home and home != self.me and not self.members.get(home, {}).get("up"):
            node = self.members.get(home, {}).get("name", home)
            raise ChannelError(404, amqp_text(
                404, f"home node '{node}' of durable queue '{q['name']}' in vhost "
                     f"'{q['vhost']}' is down or inaccessible"))

    @handles(ops.QueueDelete)
    def op_queue_delete(self, rpc, vhost, name, if_unused=False, if_empty=False, owner=""):
        q = self.queues.get((vhost, name))
        if q is None:
            return 0
        self._check_exclusive(vhost, name, owner)
        if quorum.is_quorum(q["arguments"]):
            quorum.check_delete(if_unused, if_empty, name, vhost)
        self._delete_queue(vhost, name, rpc, 0, if_unused=if_unused, if_empty=if_empty)
        return DEFERRED

    @handles(ops.QueueDeleteSelf)
    def op_queue_delete_self(self, rpc, vhost, name, reason=""):
        """A queue asks to be deleted: auto-delete, x-expires, exclusive owner gone."""
        if (vhost, name) in self.queues:
            log.info("deleting queue '%s' in vhost '%s': %s", name, vhost, reason)
            # the event log's reason: "x-expires", "auto-delete" (the text before the colon)
            self._delete_queue(vhost, name, None, 0, reason=reason.partition(":")[0] or "self")
        return None

    @handles(ops.QueueCrashed)
    def op_queue_crashed(self, rpc, vhost, name, address, gave_up):
        """A queue worker's supervisor saw a queue crash (actors/queue/queue_host.py): every channel
        of the cluster hears QueueDown (nacks, basic.cancel); a queue it gave up on is marked
        crashed (declares get 404, the management API says "crashed") until it is deleted."""
        self._queue_down(m.QueueDown(address, vhost, name))
        for info in self.members.values():
            if info.get("up") and info.get("metadata") and info.get("metadata") != self.address:
                self.transport.send(info["metadata"], m.QueueDown(address, vhost, name))
        q = self.queues.get((vhost, name))
        if gave_up and q is not None and q.get("address") in (address, None):
            self._change(["queue_put", dict(q, address=None, crashed=True)])
        return None

    def _queue_down(self, down: m.QueueDown) -> None:
        """To every connection worker of this node (their channels)."""
        for (kind, _), w in self.workers.items():
            if kind == "conn":
                self.transport.send(w.control, down)

    @handles(ops.ConnectionClosed)
    def op_connection_closed(self, rpc, owner):
        for q in list(self.queues.values()):
            if q["exclusive"] == owner:
                self._delete_queue(q["vhost"], q["name"], None, 0, reason="exclusive")
        return None

    def _delete_queue(self, vhost, name, rpc, _unused, if_unused=False, if_empty=False,
                      reason="delete"):
        q = self.queues[(vhost, name)]
        req = self.next_req
        self.next_req += 1
        self.pending_ops[req] = (rpc, vhost, name)
        if q.get("address") is None:
            if events.enabled():  # no queue process to say it: the copies it kept on disk go
                events.emit("queue_deleted", None, actor="node", vhost=vhost, queue=name,
                            reason=reason)
            self._finish_delete(req, m.RpcReply(req, True, 0))
            return
        self.transport.send(q["address"], m.QueueOp(
            self.address, req, "delete", {"if_unused": if_unused, "if_empty": if_empty,
                                          "reason": reason}))

    @handles(ops.QueuePurge)
    def op_queue_purge(self, rpc, vhost, name):
        """rabbitmqctl purge_queue: the queue drops its ready messages and answers how many."""
        return self._ask_queue(rpc, self._running_queue(vhost, name), "purge")

    @handles(ops.QueueCensus)
    def op_queue_census(self, rpc, vhost=None, name=None):
        """leveretctl census: the queue's backing queue writes a `queue_census` event (what it
        holds) and the queue answers its depth; without a name every running queue of the
        vhost (every vhost: None) writes one, and the answer is their names."""
        if name is not None:
            return self._ask_queue(rpc, self._running_queue(vhost, name), "census")
        running = [((v, n), q) for (v, n), q in sorted(self.queues.items())
                   if (vhost is None or v == vhost) and q.get("address") is not None]
        if not running:
            return []
        # answered once every queue has taken its census, so a stop that follows the answer
        # finds each census in its queue's log
        gather = Gather(rpc, [[v, n] for (v, n), _ in running])
        for _, q in running:
            req = self._ask_id()
            self.pending_asks[req] = gather
            self.transport.send(q["address"], m.QueueOp(self.address, req, "census", {}))
        return DEFERRED

    @handles(ops.QueueSync)
    def op_queue_sync(self, rpc, vhost, name, cancel=False):
        """rabbitmqctl sync_queue / cancel_sync_queue (rabbit_mirror_queue_misc:sync_queue,
        cancel_sync_queue): the master syncs its manual-sync mirrors still behind eagerly
        (answers how many), or stops the sync under way (answers whether one was)."""
        q = self._running_queue(vhost, name)
        if quorum.is_quorum(q.get("arguments")):
            raise ChannelError(406, amqp_text(406, "quorum_queue_not_supported"))
        return self._ask_queue(rpc, q, "cancel_sync" if cancel else "sync")

    def _running_queue(self, vhost, name) -> dict:
        q = self.queues.get((vhost, name))
        if q is None:
            raise ChannelError(404, amqp_text(404, f"no queue '{name}' in vhost '{vhost}'"))
        if q.get("address") is None:
            raise ChannelError(404, amqp_text(404, f"queue '{name}' in vhost '{vhost}' is "
                                                   "not running (its node is down)"))
        return q

    def _ask_id(self) -> int:
        req = self.next_req
        self.next_req += 1
        return req

    def _ask_queue(self, rpc, q, op):
        """An admin QueueOp to the running queue `q`; its answer is relayed to the asker."""
        req = self._ask_id()
        self.pending_asks[req] = rpc
        self.transport.send(q["address"], m.QueueOp(self.address, req, op, {}))
        return DEFERRED

    def _queue_reply(self, reply: m.RpcReply) -> None:
        if reply.req_id in self.pending_asks:
            asker = self.pending_asks.pop(reply.req_id)
            if isinstance(asker, Gather):
                asker.left -= 1
                if asker.left:
                    return
                rpc, reply = asker.rpc, m.RpcReply(0, True, asker.result)
            else:
                rpc = asker
            self._send_reply(rpc.reply_to, m.RpcReply(rpc.req_id, reply.ok, reply.result,
                                                         reply.code, reply.text))
        elif reply.req_id in self.pending_ops:
            self._finish_delete(reply.req_id, reply)

    def _finish_delete(self, req, reply) -> None:
        rpc, vhost, name = self.pending_ops.pop(req)
        self._recovered((vhost, name))
        if reply.ok and (vhost, name) in self.queues:
            sources = {b.source for b in self.router.list_bindings(vhost)
                       if b.dest_kind == "queue" and b.dest == name}
            self._change(["router", "remove_queue", [vhost, name]], ["queue_del", vhost, name])
            self.queue_churn["queues_deleted"] += 1
            if any(self.router.exchange(vhost, s) for s in sources):
                self._auto_delete_exchanges(vhost)
        if rpc is not None:
            self._send_reply(rpc.reply_to, m.RpcReply(rpc.req_id, reply.ok, reply.result,
                                                         reply.code, reply.text))


    def _check_exclusive(self, vhost, name, owner, kind="queue"):
        if kind != "queue":
            return
        q = self.queues.get((vhost, name))
        if q and q["exclusive"] and q["exclusive"] != owner:
            raise ChannelError(405, amqp_text(405, locked_text(name, vhost)))


    def _list_queues(self, rpc):
        """Queue definitions plus each live queue's counts (asked of the queue; a queue that does
        not answer within STATS_TIMEOUT_S is listed without counts)."""
        rows = {}
        for (vhost, name), q in self.queues.items():
            rows[(vhost, name)] = {
                "vhost": vhost, "name": name, "durable": q["durable"],
                "auto_delete": q["auto_delete"], "exclusive": bool(q["exclusive"]),
                "arguments": q["arguments"], "worker": q.get("worker"),
                "node": self._member_name(q.get("home")),
                "mirrors": [self._member_name(x) for x in q.get("mirrors") or []],
                "synchronised_mirrors": [self._member_name(x) for x in q.get("synced") or []]}
        gather = {"rpc": rpc, "rows": rows, "waiting": set()}
        for key, q in self.queues.items():
            if q.get("address"):
                req = self.next_req
                self.next_req += 1
                gather["waiting"].add(req)
                self.pending_stats[req] = (gather, key)
                self.transport.send(q["address"], m.QueueOp(self.address, req, "stats", {}))
        if not gather["waiting"]:
            return list(rows.values())
        timer = threading.Timer(STATS_TIMEOUT_S, self._stats_timeout, (gather,))
        timer.daemon = True  # never keeps a stopping node alive
        gather["timer"] = timer
        timer.start()
        return DEFERRED

    def _stats_reply(self, reply: m.RpcReply) -> None:
        gather, key = self.pending_stats.pop(reply.req_id)
        gather["waiting"].discard(reply.req_id)
        if reply.ok and isinstance(reply.result, dict):
            gather["rows"][key].update(reply.result)
        if not gather["waiting"]:
            self._finish_stats(gather)

    def _stats_timeout(self, gather) -> None:
        try:
            self.actor_ref.tell(StatsTimeout(gather))
        except pykka.ActorDeadError:
            pass  # the node is stopping

    def _finish_stats(self, gather) -> None:
        if gather["rpc"] is None:
            return  # answered already (time-out)
        if gather.get("timer") is not None:
            gather["timer"].cancel()
        for req in gather["waiting"]:
            self.pending_stats.pop(req, None)
        self._reply(gather["rpc"], True, list(gather["rows"].values()))
        gather["rpc"] = None


def locked_text(name, vhost) -> str:
    return (f"cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost}'. "
            "It could be originally declared on another connection or the exclusive property "
            "value does not match that of the original declaration.")


STATS_TIMEOUT_S = 5.0  # list_queues: how long to wait for a queue's counts
class Gather:
    """One rpc answered once several queues have answered (a vhost's census); its result is
    fixed when asked, the queues' answers only count down."""

    __slots__ = ("rpc", "result", "left")

    def __init__(self, rpc, result):
        self.rpc = rpc
        self.result = result
        self.left = len(result)


