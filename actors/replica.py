"""A worker's local copy of the node's metadata: exchanges and bindings (Router), users, vhosts
and permissions (AuthDB), and the queue table (where each queue lives).

Mirrors the ETS/mnesia tables RabbitMQ's channels read directly (rabbit_exchange, rabbit_route,
rabbit_amqqueue): a channel routes and checks permissions without asking anybody. The node is the
only writer; it sends the same change list to every worker (actors/node/metadata.py), in order
with its RPC replies, so a channel that got `queue.declare-ok` already sees the queue.

A change is a list: `["router", method, args]` replays `Router.method(*args)`, `["auth", method,
args]` replays `AuthDB.method(*args)`, `["queue_put", qdef]`, `["queue_del", vhost, name]`,
`["policy_put", vhost, name, policy]`, `["policy_del", vhost, name]`, the same for operator
policies (`op_policy_put`, `op_policy_del`), `["limits_put", scope, name, limits]` and
`["limits_del", scope, name]` (scope "vhost" or "user": rabbitmqctl set_vhost_limits /
set_user_limits), `["param_put", vhost, component, name, value]` and
`["param_del", vhost, component, name]` (runtime parameters kept as they are given:
component "shovel"), and in a cluster
`["member_put", member_id, info]` (actors/node/cluster.py).
"""

from __future__ import annotations

import threading

from actors.core import policies as _policies
from actors.core.permissions import AuthDB
from actors.core.routing import Router


class Replica:
    def __init__(self):
        self.lock = threading.RLock()  # held while applying changes and while routing
        self.router = Router()  # exchanges + bindings of every vhost
        self.auth = AuthDB()  # users, vhosts, permissions
        self.queues: dict[tuple[str, str], dict] = {}  # (vhost, name) -> qdef (with "address")
        self.policies: dict[tuple[str, str], dict] = {}  # (vhost, policy name) -> policy
        self.op_policies: dict[tuple[str, str], dict] = {}  # (vhost, name) -> operator policy
        self.limits: dict[tuple[str, str], dict] = {}  # ("vhost"|"user", name) -> limits
        # (vhost, component, name) -> value: runtime parameters (shovels)
        self.parameters: dict[tuple[str, str, str], dict] = {}
        self.members: dict[str, dict] = {}  # cluster member id -> info (empty when alone)
        self.version = 0  # number of change lists applied

    def load(self, state: dict) -> list:
        """Replace the whole state (a worker's first snapshot, or a resync after the node loaded
        the log's snapshot); returns the changes that take the old state to the new one for
        what hosts act on (`queue_put` of each queue whose definition changed, `queue_del` of
        each queue gone, a `policy_put`/`op_policy_put` or `*_del` per policy that changed),
        so that a resync reaches mirrors and channels as the entries it stands for would have."""
        with self.lock:
            old_queues, old_policies, old_ops = self.queues, self.policies, self.op_policies
            self._load(state)
            changes: list = [["queue_del", *key] for key in old_queues if key not in self.queues]
            changes += [["queue_put", q] for key, q in self.queues.items()
                        if old_queues.get(key) != q]
            for put, drop, old, new in (("policy_put", "policy_del", old_policies, self.policies),
                                        ("op_policy_put", "op_policy_del", old_ops,
                                         self.op_policies)):
                changes += [[drop, *key] for key in old if key not in new]
                changes += [[put, *key, p] for key, p in new.items() if old.get(key) != p]
            return changes

    def _load(self, state: dict) -> None:
        with self.lock:
            self.router = Router.from_state(state["router"])
            self.auth = AuthDB.from_state(state["auth"])
            self.queues = {(q["vhost"], q["name"]): q for q in state["queues"]}
            self.policies = {(p["vhost"], p["name"]): p for p in state.get("policies", [])}
            self.op_policies = {(p["vhost"], p["name"]): p
                                for p in state.get("op_policies", [])}
            self.limits = {(x["scope"], x["name"]): x["value"] for x in state.get("limits", [])}
            self.parameters = parameters_of(state)
            for vhost in self.router.vhosts():
                apply_policy_alternates(self, vhost)
            self.members = dict(state.get("members", {}))
            self.version += 1

    def apply(self, changes: list) -> None:
        with self.lock:
            for change in changes:
                apply_change(self, change)
            touched = {c[1] for c in changes if c[0] in _POLICY_CHANGES}
            touched |= {c[2][0] for c in changes if c[0] == "router" and
                        c[1] == "declare_exchange"}
            for vhost in touched:
                apply_policy_alternates(self, vhost)
            self.version += 1

    # --- reads used on the hot path ---------------------------------------------------------
    def queue(self, vhost: str, name: str) -> dict | None:
        return self.queues.get((vhost, name))

    def route(self, vhost: str, exchange: str, routing_key: str, headers) -> set:
        with self.lock:
            return self.router.route(vhost, exchange, routing_key, headers)


_POLICY_CHANGES = ("policy_put", "policy_del", "op_policy_put", "op_policy_del")


def apply_policy_alternates(target, vhost: str) -> None:
    """Give the router the alternate-exchange every exchange of `vhost` takes from its
    effective policy (rabbit_policy:get_arg/3 reads it on each publish; Leveret resolves it when
    policies or exchanges change)."""
    if not target.router.has_vhost(vhost):
        return
    ps = {k: p for k, p in target.policies.items() if k[0] == vhost}
    ops = {k: p for k, p in getattr(target, "op_policies", {}).items() if k[0] == vhost}
    alternates = {}
    if ps or ops:
        for name in target.router.exchanges(vhost):
            ae = _policies.effective(ps, vhost, name, "exchanges", ops).get("alternate-exchange")
            if ae is not None:
                alternates[name] = ae
    target.router.set_policy_alternates(vhost, alternates)


def state_lists(target) -> dict:
    """The operator policies, limits and runtime parameters of `target` as msgpack-able
    lists (snapshots, the durable definitions)."""
    return {"op_policies": list(target.op_policies.values()),
            "limits": [{"scope": s, "name": n, "value": v}
                       for (s, n), v in target.limits.items()],
            "parameters": [{"vhost": v, "component": c, "name": n, "value": value}
                           for (v, c, n), value in getattr(target, "parameters", {}).items()]}


def parameters_of(state: dict) -> dict:
    """The runtime parameters table of a state_lists() dict."""
    return {(p["vhost"], p["component"], p["name"]): p["value"]
            for p in state.get("parameters", [])}


def apply_change(target, change) -> None:
    """Apply one change to anything with .router, .auth and .queues (replica or node state)."""
    kind = change[0]
    if kind == "router":
        getattr(target.router, change[1])(*change[2])
    elif kind == "auth":
        getattr(target.auth, change[1])(*change[2])
    elif kind == "queue_put":
        q = change[1]
        target.queues[(q["vhost"], q["name"])] = q
    elif kind == "queue_del":
        target.queues.pop((change[1], change[2]), None)
    elif kind == "policy_put":
        target.policies[(change[1], change[2])] = change[3]
    elif kind == "policy_del":
        target.policies.pop((change[1], change[2]), None)
    elif kind == "op_policy_put":
        target.op_policies[(change[1], change[2])] = change[3]
    elif kind == "op_policy_del":
        target.op_policies.pop((change[1], change[2]), None)
    elif kind == "limits_put":
        target.limits[(change[1], change[2])] = change[3]
    elif kind == "limits_del":
        target.limits.pop((change[1], change[2]), None)
    elif kind == "param_put":
        target.parameters[(change[1], change[2], change[3])] = change[4]
    elif kind == "param_del":
        target.parameters.pop((change[1], change[2], change[3]), None)
    elif kind == "member_put":
        target.members[change[1]] = change[2]
    else:
        raise ValueError(f"unknown metadata change {kind!r}")
