"""Dynamic shovels (RabbitMQ's rabbitmq_shovel plugin): runtime parameters of component
"shovel" that move messages from a source queue to a destination over AMQP 0-9-1.
Pure parts: `params` (validation, parsing), `uri` (amqp/amqps URIs), `acks` (ack-mode
bookkeeping), `countdown` (src-delete-after), `backoff` (reconnects), `placement` (which
node runs a shovel), `status` (what /api/shovels shows). I/O: `runner` (one shovel, one
thread), `supervisor` (the node's shovels)."""
