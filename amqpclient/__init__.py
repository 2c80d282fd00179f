"""A lean, blocking AMQP 0-9-1 client on Leveret's own codec (protocol/): the management API's
way to act as a client of its own node (actors/management/amqp.py), and the load generator's
connection in bench/. Not a general-purpose client: what those two need, and no more."""
