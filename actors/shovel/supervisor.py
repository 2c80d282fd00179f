"""The node's dynamic shovels (rabbit_shovel_dyn_worker_sup_sup and rabbit_shovel_status):
starts a ShovelRunner for each shovel parameter this node owns, stops those cleared, changed
or moved to another node, and keeps their statuses. Driven by the metadata actor after
every change of the parameters or the members (`sync`), never blocking it: starting and
stopping a runner only start a thread or signal one.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from actors.shovel import params, placement
from actors.shovel.runner import ShovelRunner
from actors.shovel.status import STARTING, ShovelStatus


class Running(NamedTuple):
    """A shovel this node runs."""
    value: Any  # the parameter's value it was started with (a change restarts it)
    runner: Any  # its ShovelRunner (or a test's fake)


class ShovelSupervisor:
    def __init__(self, node: str, cluster_name: str, on_autodelete, runner=ShovelRunner):
        self.runner = runner  # the runner class (ShovelRunner; tests give a fake)
        self.node = node  # this node's node_name (statuses)
        self.cluster_name = cluster_name  # x-shovelled's shovelled-by
        self.on_autodelete = on_autodelete  # fn(vhost, name), any thread: clear the parameter
        self.runners: dict[tuple, Running] = {}  # (vhost, name) -> what runs
        self.lock = threading.Lock()  # guards `statuses` (runners report from their threads)
        self.statuses: dict[tuple, ShovelStatus] = {}  # (vhost, name) -> its latest status

    def sync(self, parameters: dict, me: str, members: dict) -> None:
        """`parameters`: {(vhost, component, name): value}; run exactly the shovels this
        node owns, each with its current value."""
        wanted = {(v, n): value for (v, c, n), value in parameters.items()
                  if c == "shovel" and placement.runs_here(me, members, v, n)}
        for key, running in list(self.runners.items()):
            if wanted.get(key) != running.value:
                self._stop(key)
        for key, value in wanted.items():
            if key not in self.runners:
                self._start(key, value)

    def _start(self, key, value) -> None:
        spec = params.parse(key[0], key[1], value)
        runner = self.runner(spec, self.node, self.cluster_name, self._report,
                             lambda s: self.on_autodelete(s.vhost, s.name))
        self.runners[key] = Running(value, runner)
        self._report(ShovelStatus(key[0], key[1], STARTING, self.node))
        runner.start()

    def _stop(self, key) -> None:
        self.runners.pop(key).runner.stop()
        with self.lock:
            self.statuses.pop(key, None)

    def _report(self, status: ShovelStatus) -> None:
        key = (status.vhost, status.name)
        with self.lock:
            entry = self.runners.get(key)
            if entry is not None and not entry.runner.stopping.is_set():
                self.statuses[key] = status

    def restart(self, key) -> bool:
        """Stop the shovel's runner and start a new one (False: it does not run here)."""
        entry = self.runners.get(key)
        if entry is None:
            return False
        self._stop(key)
        self._start(key, entry.value)
        return True

    def rows(self) -> list[dict]:
        """This node's shovels as GET /api/shovels lists them."""
        with self.lock:
            return [s.row() for _, s in sorted(self.statuses.items())]

    def stop_all(self) -> None:
        for key in list(self.runners):
            self._stop(key)
