"""What a shovel publishes for one source delivery (rabbit_amqp091_shovel:forward/4 with
parse_amqp091_dest/4's fields_fun and props_fun): the exchange and routing key, and the
properties with dest-publish-properties set and, when asked, the `x-shovelled` and
`x-shovelled-timestamp` headers. Pure: properties are a plain dict of AMQP basic properties.
"""

from __future__ import annotations

ROUTING_HEADER = "x-shovelled"
TIMESTAMP_HEADER = "x-shovelled-timestamp"


def target(spec, exchange: str, routing_key: str) -> tuple[str, str]:
    """dest-queue publishes through the default exchange; dest-exchange and
    dest-exchange-key replace the delivery's own exchange and routing key; what is unset keeps
    the delivery's."""
    if spec.dest_queue is not None:
        return "", spec.dest_queue
    return (spec.dest_exchange if spec.dest_exchange is not None else exchange,
            spec.dest_exchange_key if spec.dest_exchange_key is not None else routing_key)


def shovelled_entry(spec, cluster_name: str, src_uri: str, dest_uri: str) -> dict:
    """The table update_headers/5 prepends to `x-shovelled` (URIs without credentials)."""
    entry = {"shovelled-by": cluster_name, "shovel-type": "dynamic",
             "shovel-name": spec.name, "shovel-vhost": spec.vhost,
             "src-uri": src_uri, "dest-uri": dest_uri}
    if spec.src_queue is not None:
        entry["src-queue"] = spec.src_queue
    else:
        entry["src-exchange"] = spec.src_exchange
        entry["src-exchange-key"] = spec.src_exchange_key
    for key, value in (("dest-exchange", spec.dest_exchange),
                       ("dest-exchange-key", spec.dest_exchange_key),
                       ("dest-queue", spec.dest_queue)):
        if value is not None:
            entry[key] = value
    return entry


def properties(spec, props: dict, cluster_name: str, src_uri: str, dest_uri: str,
               now_s: int) -> dict:
    """The destination's properties from the delivery's `props` (not modified)."""
    out = dict(props)
    out.update(spec.publish_properties)
    if spec.forward_headers or spec.timestamp_header:
        headers = dict(out.get("headers") or {})
        if spec.forward_headers:
            before = headers.get(ROUTING_HEADER)
            before = before if isinstance(before, list) else []
            headers[ROUTING_HEADER] = [shovelled_entry(spec, cluster_name, src_uri, dest_uri),
                                       *before]
        if spec.timestamp_header:
            headers[TIMESTAMP_HEADER] = int(now_s)
        out["headers"] = headers
    return out
