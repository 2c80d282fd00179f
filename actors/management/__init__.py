"""RabbitMQ's management HTTP API on `management_port` (docs/management.md)."""
