"""The metadata actor's runtime definitions: users, vhosts and permissions (rabbit_auth_backend
_internal, rabbit_vhost), policies (rabbit_policy), vhost and user limits (rabbit_vhost_limit),
runtime parameters (rabbit_runtime_parameters), definitions export and import
(rabbit_definitions), and the lists leveretctl reads."""

from __future__ import annotations

import logging

from actors import metadata_ops as ops
from actors.core import limits, policies
from actors.core.errors import ChannelError, amqp_text
from actors.core.permissions import AuthDB
from actors.node import definitions_json
from actors.node.metadata_dispatch import handles
from actors.shovel import params as shovel_params

log = logging.getLogger("actors.node.metadata")


class DefinitionsMixin:
    # --- vhosts, users, permissions (leveretctl) -----------------------------------------------
    @handles(ops.Auth)
    def op_auth(self, rpc, method, args):
        # add_user / change_password arrive as their hashed forms (`_hash_password`)
        allowed = {"add_user_with_hash", "delete_user", "change_password_hash", "set_user_tags",
                   "add_vhost", "delete_vhost", "set_permissions", "clear_permissions",
                   "set_topic_permissions", "clear_topic_permissions"}
        if method not in allowed:
            raise ChannelError(540, amqp_text(540, f"unknown auth method {method}"))
        probe = AuthDB.from_state(self.auth.to_state())
        try:
            getattr(probe, method)(*args)
        except (KeyError, ValueError) as e:
            raise ChannelError(404, amqp_text(404, str(e).strip("'\"")))
        changes = [["auth", method, list(args)]]
        if method == "add_vhost":
            changes.append(["router", "add_vhost", [args[0]]])
        elif method == "delete_vhost":
            for (vhost, name) in list(self.queues):
                if vhost == args[0]:
                    self._delete_queue(vhost, name, None, 0, reason="vhost_deleted")
            changes.append(["router", "remove_vhost", [args[0]]])
            changes.extend(["policy_del", v, n] for (v, n) in self.policies if v == args[0])
            changes.extend(["op_policy_del", v, n] for (v, n) in self.op_policies
                           if v == args[0])
            if ("vhost", args[0]) in self.limits:
                changes.append(["limits_del", "vhost", args[0]])
            changes.extend(["param_del", *key] for key in self.parameters if key[0] == args[0])
        elif method == "delete_user" and ("user", args[0]) in self.limits:
            changes.append(["limits_del", "user", args[0]])
        self._change(*changes)
        return None

    @handles(ops.Policy)
    def op_policy(self, rpc, method, vhost, name, pattern="", definition=None, priority=0,
                  apply_to="all", operator=False):
        """rabbitmqctl set_policy / clear_policy (set_operator_policy / clear_operator_policy
        with ``operator``)."""
        if vhost not in self.auth.list_vhosts():
            raise ChannelError(404, amqp_text(404, f"no vhost '{vhost}'"))
        table, put, delete = ((self.op_policies, "op_policy_put", "op_policy_del") if operator
                              else (self.policies, "policy_put", "policy_del"))
        if method == "set":
            policies.validate(name, pattern, definition, priority, apply_to, operator)
            self._change([put, vhost, name, {
                "vhost": vhost, "name": name, "pattern": pattern, "definition": definition,
                "priority": priority, "apply_to": apply_to}])
            self._remirror()
        elif (vhost, name) in table:
            self._change([delete, vhost, name])
            self._remirror()
        else:
            kind = "operator policy" if operator else "policy"
            raise ChannelError(404, amqp_text(404, f"no {kind} '{name}' in vhost '{vhost}'"))
        return None

    @handles(ops.Limits)
    def op_limits(self, rpc, method, scope, name, value=None):
        """rabbitmqctl set_vhost_limits / clear_vhost_limits / set_user_limits /
        clear_user_limits (rabbit_vhost_limit, rabbit_auth_backend_internal's user limits)."""
        if scope == "vhost":
            if name not in self.auth.list_vhosts():
                raise ChannelError(404, amqp_text(404, f"no vhost '{name}'"))
        elif scope == "user":
            if not self.auth.user_exists(name):
                raise ChannelError(404, amqp_text(404, f"no user '{name}'"))
        else:
            raise ChannelError(406, f"unknown limits scope {scope!r}")
        if method == "set":
            value = limits.validate(scope, value)
            self._change(["limits_put", scope, name, value])
        elif method == "clear":
            if (scope, name) in self.limits:
                self._change(["limits_del", scope, name])
        else:
            raise ChannelError(406, f"unknown limits method {method!r}")
        return None

    @handles(ops.Parameter)
    def op_parameter(self, rpc, method, vhost, component, name, value=None):
        """rabbitmqctl set_parameter / clear_parameter (rabbit_runtime_parameters:set/5,
        clear/4) of the components kept as runtime parameters (`shovel`)."""
        if component not in shovel_params.COMPONENTS:
            raise ChannelError(406, shovel_params.unknown_component(component))
        if vhost not in self.auth.list_vhosts():
            raise ChannelError(404, amqp_text(404, f"no vhost '{vhost}'"))
        if method == "set":
            shovel_params.validate(name, value)
            self._change(["param_put", vhost, component, name, value])
        elif method == "clear":
            if (vhost, component, name) not in self.parameters:
                raise ChannelError(404, "Parameter does not exist")
            self._change(["param_del", vhost, component, name])
        else:
            raise ChannelError(406, f"unknown parameter method {method!r}")
        return None

    # --- definitions export / import (rabbitmqctl export_definitions, import_definitions) ----
    @handles(ops.DefinitionsExport)
    def op_definitions_export(self, rpc):
        return definitions_json.export(self._definitions_state())

    def _definitions_state(self) -> dict:
        """definitions_json's state: every queue, exchange and explicit binding, durable or
        not (RabbitMQ's export lists them all; exclusive queues are left out by the export)."""
        exchanges = [[v, n, x.type, x.durable, x.auto_delete, x.internal, dict(x.arguments)]
                     for (v, n), x in self._all_exchanges() if n and not n.startswith("amq.")]
        return {"auth": self.auth.to_state(), "policies": list(self.policies.values()),
                "op_policies": list(self.op_policies.values()),
                "limits": [[scope, name, value] for (scope, name), value in self.limits.items()],
                "parameters": [[v, c, n, value] for (v, c, n), value in self.parameters.items()],
                "exchanges": exchanges, "bindings": list(self._all_bindings()),
                "queues": [{k: v for k, v in q.items() if k not in ("address", "worker")}
                           for q in self.queues.values()]}

    @handles(ops.DefinitionsImport)
    def op_definitions_import(self, rpc, doc, content_hash=None, skip_if_unchanged=False):
        """Every object of a RabbitMQ definitions document as one change (one Raft entry in a
        cluster), or none of them: a refusal lists every object that failed validation.
        ``content_hash``: remembered (the boot-time load_definitions file's hash) so that an
        unchanged file is skipped next boot when ``skip_if_unchanged``."""
        if skip_if_unchanged and content_hash and content_hash == self.defs.load_hash():
            log.info("definitions unchanged (hash %s): import skipped", content_hash)
            return {"skipped": True, "warnings": [], "changes": 0}
        plan = definitions_json.plan_import(doc, self._definitions_state())
        for w in plan.warnings:
            log.warning("definitions import: %s", w)
        if plan.errors:
            for e in plan.errors:
                log.error("definitions import: %s", e)
            raise ChannelError(406, amqp_text(406, "definitions import failed: " +
                                              "; ".join(plan.errors)))
        changes, placed = [], {}  # placed: worker -> queues placed on it here
        for c in plan.changes:
            if c[0] != "queue_new":
                changes.append(c)
                continue
            q = dict(c[1], exclusive="", address=None, home=self.me, mirrors=[], synced=[])
            q["worker"] = self._place(self.me, placed)
            placed[q["worker"]] = placed.get(q["worker"], 0) + 1
            q["mirrors"] = self._mirrors_for(q)
            changes += [["router", "add_queue", [q["vhost"], q["name"]]], ["queue_put", q]]
        if not self.workers:  # at boot (load_definitions): listen once its queues run too
            self.recovering.update((c[1]["vhost"], c[1]["name"]) for c in changes
                                   if c[0] == "queue_put")
        if changes:
            self._change(*changes)
            if any(c[0] in ("policy_put", "op_policy_put") for c in changes):
                self._remirror()
        if content_hash:
            self.defs.save_hash(content_hash)
        return {"skipped": False, "warnings": plan.warnings, "changes": len(changes)}

    @handles(ops.List)
    def op_list(self, rpc, what, vhost=None, user=None):
        if what == "topic_permissions":
            return self.auth.list_topic_permissions(vhost, user)
        if what == "users":
            return self.auth.to_state().get("users")
        if what == "vhosts":
            return self.auth.list_vhosts()
        if what == "queues":
            return self._list_queues(rpc)
        if what == "policies":
            return list(self.policies.values())
        if what == "operator_policies":
            return list(self.op_policies.values())
        if what == "parameters":
            return [{"vhost": v, "component": c, "name": n, "value": value}
                    for (v, c, n), value in sorted(self.parameters.items())
                    if vhost in (None, v)]
        if what in ("vhost_limits", "user_limits"):
            scope = what[:-7]
            return [{scope: n, "limits": v} for (s, n), v in sorted(self.limits.items())
                    if s == scope and (what == "user_limits" or vhost in (None, n))]
        if what == "exchanges":
            return [[v, n, x.type] for (v, n), x in self._all_exchanges()]
        if what == "bindings":
            return list(self._all_bindings())
        return None

