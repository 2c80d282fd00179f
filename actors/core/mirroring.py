"""Classic queue mirroring: what the ha-* keys may say and where a queue's mirrors go.

Mirrors rabbit_mirror_queue_misc:validate_policy/1 (ha-mode, ha-params, ha-sync-mode, with
RabbitMQ's texts) and the suggested_queue_nodes/5 and validate_policy/1 of
rabbit_mirror_queue_mode_all, _exactly and _nodes. Pure: the metadata actor
(actors/node/metadata_cluster.py) gives it the members and their names; policies.py and
queue_args.py render its errors.

Leveret differences (docs/cluster.md):
- a live master never moves: with `ha-mode: nodes` a master on a node the list leaves out stays
  where it is (RabbitMQ does so only while no mirror is synchronised) and the listed nodes hold
  its mirrors;
- `exactly` adds mirrors in cluster order, not in RabbitMQ's random order.

`ha-sync-mode` (automatic, or manual: a new mirror gets only what enters the queue from then on
and is synchronised once the older messages are gone or on `leveretctl sync_queue`) is the
master's (actors/queue/queue_process.py, actors/queue/mirror.py).
"""

from __future__ import annotations

from actors.core.erl_terms import Atom

MODES = ("all", "exactly", "nodes")
NONE = Atom("none")  # what RabbitMQ prints for a key the policy does not set


def _term(v):
    return NONE if v is None else v


def params_error(mode: str, params) -> tuple | None:
    """The ha-params check of `mode`'s module (its validate_policy/1): None when valid, else
    (format with ~p, terms), as RabbitMQ's {error, Fmt, Args}."""
    if mode == "all":
        return None if params is None else ('ha-mode="all" does not take parameters', ())
    if mode == "exactly":
        if isinstance(params, int) and not isinstance(params, bool) and params > 0:
            return None
        return 'ha-mode="exactly" takes an integer, ~p given', (_term(params),)
    if not isinstance(params, list):
        return 'ha-mode="nodes" takes a list, ~p given', (_term(params),)
    if not params:
        return 'ha-mode="nodes" list must be non-empty', ()
    invalid = [x for x in params if not isinstance(x, str)]
    if invalid:
        return 'ha-mode="nodes" takes a list of strings, ~p was not a string', (invalid,)
    return None


def sync_mode_error(sync_mode) -> tuple | None:
    if sync_mode in (None, "automatic", "manual"):
        return None
    return 'ha-sync-mode must be "manual" or "automatic", got ~p', (sync_mode,)


def policy_error(mode, params=None, sync_mode=None) -> tuple | None:
    """rabbit_mirror_queue_misc:validate_policy/1 over the three keys (None: not set)."""
    if mode is None:
        if params is None and sync_mode is None:
            return None
        return ("ha-mode must be specified to specify ha-params, ha-sync-mode or "
                "ha-promote-on-shutdown", ())
    if mode not in MODES:
        return "~p is not a valid ha-mode value", (mode,)
    return params_error(mode, params) or sync_mode_error(sync_mode)


def mirror_members(mode, params, home: str, current: list, up: list, names: dict) -> list:
    """Members that should hold a mirror of a queue whose master is on `home`: `current` its
    mirrors now (oldest first, kept first), `up` the running members in cluster order,
    `names` member -> node name (what ha-mode nodes lists). [] for an invalid mode or
    params, so that one bad definition cannot stop the others being applied."""
    if mode not in MODES or params_error(mode, params) is not None:
        return []
    candidates = [x for x in up if x != home]
    kept = [x for x in current if x in candidates]
    if mode == "exactly":
        return (kept + [x for x in candidates if x not in kept])[:params - 1]
    if mode == "nodes":
        listed = set(params)
        candidates = [x for x in candidates if names.get(x) in listed]
        kept = [x for x in kept if x in candidates]
    return kept + [x for x in candidates if x not in kept]
