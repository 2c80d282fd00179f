"""Sans-IO broker logic (no pykka, zmq or socket here).

RabbitMQ-mirroring modules: errors (reply codes and texts), routing (exchanges, bindings,
routing), queue_args (declare argument checks and equivalence), dead_letter (x-death),
permissions (users, vhosts, permissions, SASL responses).
"""
