"""The metadata actor's exchanges and bindings (rabbit_exchange, rabbit_binding): declare, delete,
bind, unbind, and auto-delete exchanges that lost their last binding."""

from __future__ import annotations

import logging

from actors import metadata_ops as ops
from actors.core import queue_args
from actors.core.errors import ChannelError, amqp_text
from actors.core.routing import (INTERNAL_USER, check_exchange_deletion, check_exchange_type,
                                 validate_binding)
from actors.node.metadata_dispatch import handles

log = logging.getLogger("actors.node.metadata")


class ExchangesMixin:
    # --- exchanges --------------------------------------------------------------------------------
    @handles(ops.ExchangeDeclare)
    def op_exchange_declare(self, rpc, vhost, name, type, passive, durable, auto_delete,
                            internal, arguments, user=None):
        x = self.router.exchange(vhost, name)
        if passive:
            if x is None:
                raise ChannelError(404, amqp_text(404, f"no exchange '{name}' in vhost '{vhost}'"))
            return None
        if name.startswith("amq.") and x is None:
            raise ChannelError(403, amqp_text(
                403, f"exchange name '{name}' contains reserved prefix 'amq.*'"))
        check_exchange_type(type)
        if x is not None:
            queue_args.assert_exchange_equivalent(
                x, dict(type=type, durable=durable, auto_delete=auto_delete, internal=internal,
                        arguments=arguments), name, vhost)
            return None
        if user is not None:  # a client's declare (the channel checked configure): the AE
            self.auth.check_new_exchange(user, vhost, name, arguments)
        self._change(["router", "declare_exchange",
                      [vhost, name, type, durable, auto_delete, internal, arguments,
                       user or INTERNAL_USER]])
        return None

    @handles(ops.ExchangeDelete)
    def op_exchange_delete(self, rpc, vhost, name, if_unused):
        check_exchange_deletion(vhost, name)
        if self.router.exchange(vhost, name) is None:
            return None
        if if_unused and self.router.has_bindings_from(vhost, name):
            raise ChannelError(406, amqp_text(
                406, f"exchange '{name}' in vhost '{vhost}' in use"))
        self._change(["router", "delete_exchange", [vhost, name]])
        self._auto_delete_exchanges(vhost)
        return None

    def _auto_delete_exchanges(self, vhost) -> None:
        """RabbitMQ deletes an auto-delete exchange once its last binding as source is gone."""
        while True:
            victims = [n for n, x in self.router.exchanges(vhost).items()
                       if x.auto_delete and (vhost, n) in self.had_bindings
                       and not self.router.has_bindings_from(vhost, n)]
            if not victims:
                return
            for n in victims:
                self.had_bindings.discard((vhost, n))
                self._change(["router", "delete_exchange", [vhost, n]])

    def _binding_ends(self, vhost, source, kind, dest):
        if self.router.exchange(vhost, source) is None:
            raise ChannelError(404, amqp_text(404, f"no exchange '{source}' in vhost '{vhost}'"))
        if kind == "queue":
            if (vhost, dest) not in self.queues:
                raise ChannelError(404, amqp_text(404, f"no queue '{dest}' in vhost '{vhost}'"))
        elif self.router.exchange(vhost, dest) is None:
            raise ChannelError(404, amqp_text(404, f"no exchange '{dest}' in vhost '{vhost}'"))
        if source == "" or (kind == "exchange" and dest == ""):
            raise ChannelError(403, amqp_text(403, "operation not permitted on the default "
                                                   "exchange"))

    @handles(ops.Bind)
    def op_bind(self, rpc, vhost, source, kind, dest, routing_key, arguments, owner=""):
        self._binding_ends(vhost, source, kind, dest)
        self._check_exclusive(vhost, dest, owner, kind)
        # rabbit_binding:add -> the source type's validate_binding (headers: x-match)
        validate_binding(self.router.exchange(vhost, source).type, arguments)
        self.had_bindings.add((vhost, source))
        self._change(["router", "bind", [vhost, source, kind, dest, routing_key, arguments]])
        return None

    @handles(ops.Unbind)
    def op_unbind(self, rpc, vhost, source, kind, dest, routing_key, arguments, owner=""):
        if source == "" or (kind == "exchange" and dest == ""):
            raise ChannelError(403, amqp_text(403, "operation not permitted on the default "
                                                   "exchange"))
        # RabbitMQ 3.10 answers unbind-ok when the binding, its queue or an exchange is missing
        # (rabbit_binding:remove/3 of a binding that does not exist is ok)
        if self.router.exchange(vhost, source) is None or \
                (kind == "queue" and (vhost, dest) not in self.queues) or \
                (kind == "exchange" and self.router.exchange(vhost, dest) is None):
            return None
        # rabbit_channel:binding_action checks exclusive access for unbind as for bind
        self._check_exclusive(vhost, dest, owner, kind)
        self._change(["router", "unbind", [vhost, source, kind, dest, routing_key, arguments]])
        self._auto_delete_exchanges(vhost)
        return None

