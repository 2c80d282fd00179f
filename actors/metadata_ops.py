"""The metadata actor's operations: one frozen record per operation, what `Rpc.op` names and
`Rpc.args` carries.

The exported functions of rabbit_amqqueue, rabbit_exchange, rabbit_binding, rabbit_vhost,
rabbit_policy and rabbit_runtime_parameters that channels and rabbitmqctl call, as records:
a sender builds one and sends it (`rpc`), the node decodes the wire form back into one
(`decode`), and actors/node/metadata_dispatch.py maps each record type to its handler.
Shared by every process that asks the node (workers, leveretctl, the management listener).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from actors import messages as m

# set in `Rpc.args` by a node that forwards an operation to the cluster leader (the declaring
# client's node becomes a new queue's home): an envelope field, not an argument
ORIGIN = "origin"


@dataclass(frozen=True, slots=True)
class Op:
    """One operation's arguments; subclasses name the operation on the wire."""
    NAME: ClassVar[str] = ""
    # any node answers it itself (a read of its own view, its own counts, its own shovels):
    # never forwarded to the cluster leader
    LOCAL: ClassVar[bool] = False
    # carried out twice, it gives the same answer: a leader that loses its leadership before
    # its entry commits cannot tell whether the next leader keeps that entry, so it hands
    # these to the next leader (as Raft's clients retry) and answers the rest 541
    REDO: ClassVar[bool] = False


_RECORDS: list[type[Op]] = []  # every operation record, in the order defined


def operation(cls):
    """An operation record: frozen and slotted, and listed for the table."""
    cls = dataclass(frozen=True, slots=True)(cls)
    _RECORDS.append(cls)
    return cls


class OpError(Exception):
    """A request the node cannot decode: an unknown operation (540) or bad arguments (541)."""

    def __init__(self, reply_code: int, text: str):
        super().__init__(text)
        self.reply_code = reply_code
        self.text = text


# --- workers of this node ------------------------------------------------------------------------
@operation
class WorkerHello(Op):
    NAME = "worker.hello"
    LOCAL = True
    kind: str  # "conn" or "queue"
    index: int  # the worker slot
    endpoint: str  # this incarnation's ZeroMQ endpoint
    control: str  # its control actor's address


@operation
class WorkerReady(Op):
    NAME = "worker.ready"
    LOCAL = True
    kind: str
    index: int


# --- connection and channel tracking (vhost and user limits) ------------------------------------
@operation
class ConnectionOpen(Op):
    NAME = "connection.open"
    LOCAL = True
    conn: str  # the connection's id
    vhost: str
    user: str


@operation
class ChannelOpen(Op):
    NAME = "channel.open"
    LOCAL = True
    conn: str
    number: int


@operation
class ChannelClosed(Op):
    NAME = "channel.closed"
    LOCAL = True
    conn: str
    number: int


@operation
class ConnectionClosed(Op):
    """A connection ended: its exclusive queues go (the leader's), its count here."""
    NAME = "connection.closed"
    owner: str  # the connection id exclusive queues are owned by


# --- queues ---------------------------------------------------------------------------------------
@operation
class QueueDeclare(Op):
    NAME = "queue.declare"
    REDO = True
    vhost: str
    name: str  # "": server-named
    passive: bool
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: dict
    owner: str  # the declaring connection (exclusive queues)
    user: str | None = None  # a client's declare: the node checks what the channel could not


@operation
class QueueDelete(Op):
    NAME = "queue.delete"
    vhost: str
    name: str
    if_unused: bool = False
    if_empty: bool = False
    owner: str = ""


@operation
class QueueDeleteSelf(Op):
    """A queue asks to be deleted: auto-delete, x-expires, exclusive owner gone."""
    NAME = "queue.delete_self"
    vhost: str
    name: str
    reason: str = ""


@operation
class QueueCrashed(Op):
    """A queue worker's supervisor saw a queue crash; `gave_up`: beyond its intensity."""
    NAME = "queue.crashed"
    vhost: str
    name: str
    address: str
    gave_up: bool


@operation
class QueuePurge(Op):
    NAME = "queue.purge"
    vhost: str
    name: str


@operation
class QueueCensus(Op):
    """One queue's census, or every running queue's of `vhost` (None: every vhost)."""
    NAME = "queue.census"
    vhost: str | None = None
    name: str | None = None


@operation
class QueueSync(Op):
    NAME = "queue.sync"
    vhost: str
    name: str
    cancel: bool = False


@operation
class QueueSynced(Op):
    """A mirror, quorum member or stream member holds what its leader held when it joined."""
    NAME = "queue.synced"
    vhost: str
    name: str
    member: str


# --- exchanges and bindings -----------------------------------------------------------------------
@operation
class ExchangeDeclare(Op):
    NAME = "exchange.declare"
    REDO = True
    vhost: str
    name: str
    type: str
    passive: bool
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: dict
    user: str | None = None  # a client's declare: the node checks the alternate exchange


@operation
class ExchangeDelete(Op):
    NAME = "exchange.delete"
    REDO = True
    vhost: str
    name: str
    if_unused: bool


@operation
class Bind(Op):
    NAME = "bind"
    REDO = True
    vhost: str
    source: str
    kind: str  # "queue" or "exchange"
    dest: str
    routing_key: str
    arguments: dict
    owner: str = ""


@operation
class Unbind(Op):
    NAME = "unbind"
    REDO = True
    vhost: str
    source: str
    kind: str
    dest: str
    routing_key: str
    arguments: dict
    owner: str = ""


# --- users, vhosts, permissions, policies, limits, parameters, definitions ---------------------
@operation
class Auth(Op):
    """An AuthDB method (add_user_with_hash, add_vhost, set_permissions, ...) and its args."""
    NAME = "auth"
    method: str
    args: list


@operation
class Policy(Op):
    NAME = "policy"
    method: str  # "set" or "clear"
    vhost: str
    name: str
    pattern: str = ""
    definition: dict | None = None
    priority: int = 0
    apply_to: str = "all"
    operator: bool = False  # an operator policy


@operation
class Limits(Op):
    NAME = "limits"
    method: str  # "set" or "clear"
    scope: str  # "vhost" or "user"
    name: str
    value: dict | None = None


@operation
class Parameter(Op):
    NAME = "parameter"
    method: str  # "set" or "clear"
    vhost: str
    component: str
    name: str
    value: dict | None = None


@operation
class DefinitionsExport(Op):
    NAME = "definitions.export"


@operation
class DefinitionsImport(Op):
    NAME = "definitions.import"
    doc: dict
    content_hash: str | None = None  # the boot-time file's, remembered
    skip_if_unchanged: bool = False


@operation
class List(Op):
    NAME = "list"
    LOCAL = True
    what: str  # "queues", "users", "vhosts", "policies", "bindings", ...
    vhost: str | None = None
    user: str | None = None


# --- this node: resources, management, shovels ----------------------------------------------------
@operation
class Status(Op):
    NAME = "status"
    LOCAL = True


@operation
class SetVmMemoryHighWatermark(Op):
    NAME = "set_vm_memory_high_watermark"
    LOCAL = True
    value: str
    absolute: bool = False


@operation
class SetDiskFreeLimit(Op):
    NAME = "set_disk_free_limit"
    LOCAL = True
    value: str
    mem_relative: bool = False


@operation
class MgmtCounters(Op):
    NAME = "mgmt_counters"
    LOCAL = True


@operation
class MgmtState(Op):
    NAME = "mgmt_state"
    LOCAL = True


@operation
class MgmtCloseConnection(Op):
    NAME = "mgmt_close_connection"
    LOCAL = True
    name: str
    reason: str


@operation
class Environment(Op):
    NAME = "environment"
    LOCAL = True


@operation
class MgmtLogin(Op):
    NAME = "mgmt_login"
    LOCAL = True  # a password never leaves the node it reached
    user: str
    password: str


@operation
class ShovelStatus(Op):
    NAME = "shovel.status"
    LOCAL = True
    vhost: str | None = None


@operation
class ShovelRestart(Op):
    NAME = "shovel.restart"
    LOCAL = True
    vhost: str
    name: str


# --- the cluster (a member asks the leader) --------------------------------------------------------
@operation
class ClusterStatus(Op):
    NAME = "cluster.status"
    LOCAL = True


@operation
class ClusterMemberUp(Op):
    NAME = "cluster.member_up"
    member: str
    info: dict


@operation
class ClusterWorkerUp(Op):
    NAME = "cluster.worker_up"
    member: str
    slot: str  # "kind-index"
    endpoint: str


@operation
class ClusterWorkerDown(Op):
    NAME = "cluster.worker_down"
    member: str
    kind: str
    index: int
    endpoint: str


def _table() -> dict[str, type[Op]]:
    """Every operation record by its wire name; two of one name are a programming error."""
    table: dict[str, type[Op]] = {}
    for cls in _RECORDS:
        if not cls.NAME or cls.NAME in table:
            raise TypeError(f"operation record {cls.__name__} has an empty or repeated NAME "
                            f"{cls.NAME!r}")
        table[cls.NAME] = cls
    return table


OPS: dict[str, type[Op]] = _table()  # wire name -> record type
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in OPS.values()}
_REQUIRED = {cls: frozenset(f.name for f in fields(cls)
                            if f.default is MISSING and f.default_factory is MISSING)
             for cls in OPS.values()}


def args_of(op: Op) -> dict[str, Any]:
    """The record's wire form for `Rpc.args` (every field, defaults included)."""
    return {name: getattr(op, name) for name in _FIELDS[type(op)]}


def rpc(reply_to: str, req_id: int, op: Op) -> m.Rpc:
    return m.Rpc(reply_to, req_id, op.NAME, args_of(op))


def decode(name: str, args: Any) -> Op:
    """An Rpc's op and args as their record, or OpError naming what is wrong."""
    cls = OPS.get(name)
    if cls is None:
        raise OpError(540, f"unknown operation {name}")
    if not isinstance(args, dict):
        raise OpError(541, f"bad request {name}: arguments must be a map")
    given = {k: v for k, v in args.items() if k != ORIGIN}
    unexpected = sorted(set(given) - set(_FIELDS[cls]), key=str)
    if unexpected:
        raise OpError(541, f"bad request {name}: unexpected argument {unexpected[0]!r}")
    missing = sorted(_REQUIRED[cls] - set(given))
    if missing:
        raise OpError(541, f"bad request {name}: missing argument {missing[0]!r}")
    return cls(**given)
