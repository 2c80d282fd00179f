"""A shovel's status as rabbit_shovel_status keeps it and rabbit_shovel_mgmt /
`rabbitmqctl shovel_status` show it: `starting`, `running` (with its endpoints) or
`terminated` with the reason, when it last changed, on which node. URIs are shown without
their credentials. Pure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

STARTING, RUNNING, TERMINATED = "starting", "running", "terminated"


@dataclass(frozen=True, slots=True)
class ShovelStatus:
    vhost: str  # the parameter's vhost
    name: str  # the parameter's name
    state: str  # STARTING, RUNNING or TERMINATED
    node: str  # the node it runs on (node_name)
    timestamp: float = field(default_factory=time.time)  # when the state was entered
    reason: str = ""  # TERMINATED: why
    src_uri: str = ""  # RUNNING: the source URI it is connected to, redacted
    dest_uri: str = ""  # RUNNING: the destination URI, redacted
    endpoints: tuple = ()  # RUNNING: (key, value) of src_queue, dest_exchange...

    def row(self) -> dict:
        """rabbit_shovel_mgmt:format/2's fields (GET /api/shovels)."""
        out = {"node": self.node,
               "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.timestamp)),
               "name": self.name, "vhost": self.vhost, "type": "dynamic", "state": self.state}
        if self.state == RUNNING:
            out.update(src_uri=self.src_uri, src_protocol="amqp091", dest_protocol="amqp091",
                       dest_uri=self.dest_uri)
            out.update(dict(self.endpoints))
        elif self.state == TERMINATED:
            out["reason"] = self.reason
        return out


def endpoints(spec) -> tuple:
    """source_endpoint/1 and dest_endpoint/1 of a ShovelSpec."""
    out = []
    if spec.src_queue is not None:
        out.append(("src_queue", spec.src_queue))
    else:
        out += [("src_exchange", spec.src_exchange),
                ("src_exchange_key", spec.src_exchange_key)]
    for key, value in (("dest_exchange", spec.dest_exchange),
                       ("dest_exchange_key", spec.dest_exchange_key),
                       ("dest_queue", spec.dest_queue)):
        if value is not None:
            out.append((key, value))
    return tuple(out)
