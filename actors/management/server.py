"""The management listener: RabbitMQ's HTTP API (rabbitmq_management) on `management_port`.

An aiohttp application on its own thread and asyncio loop inside the node process. It holds no
state: each request asks the node's metadata actor over the same ipc:// socket leveretctl uses
(`actors.ctl.ask_node`, run in a thread pool so the loop never blocks) and shapes the answer
with actors/management/api.py. Writes go through the operations AMQP channels and leveretctl
already use, so they are checked, Raft-committed in a cluster and seen by every worker the same
way. HTTP basic auth; the user's tags and vhost permissions apply as rabbit_mgmt_util applies
them, and `loopback_users` log in from loopback only, as over AMQP. Against cross-site
forgery: no 401 asks the browser for credentials, bodies are JSON by their Content-Type only,
and a state-changing request from another origin is refused (docs/security.md).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import os
import resource
import ssl
import threading
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web

from actors.connection import tls
from actors.core.errors import AMQPError
from actors.core.permissions import AuthDB, hashed_auth_call, loopback_refused, pattern_error
from actors.ctl import ask_node
from actors.management import amqp, api, census, prometheus, traces
from actors.node import node_stats
from actors.management.api import ApiError

log = logging.getLogger("leveret.management")

# the methods that change something: a page of another origin may not send them
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WWW = Path(__file__).resolve().parent / "www"  # the web UI's files


class NodeAsk:
    """The metadata actor's operations, answered or raised as ApiError."""

    def __init__(self, run_dir: str, metadata: str):
        self.run_dir, self.metadata = run_dir, metadata

    async def __call__(self, op: str, args: dict | None = None, timeout_ms: int = 15000):
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, ask_node, self.run_dir, self.metadata, op,
                                           args or {}, timeout_ms)
        if reply is None:
            raise ApiError(503, "timeout", "the node did not answer")
        if not reply.ok:
            raise _from_amqp(reply.code, reply.text)
        return reply.result


def _from_amqp(code: int, text: str) -> ApiError:
    """An AMQP refusal as rabbit_mgmt_util answers it."""
    reason = text.split(" - ", 1)[1] if " - " in (text or "") else text
    if code == 403:
        return ApiError(401, "not_authorised", reason)
    if code == 404:
        return api.not_found(reason)
    return api.bad_request(reason)


class Management:
    def __init__(self, config, run_dir: str, metadata: str):
        self.config = config
        self.ask = NodeAsk(run_dir, metadata)
        self.host = config.management_host or config.host
        self.port = config.management_port
        self.prometheus_host = config.prometheus_host or config.host
        self.prometheus_port = config.prometheus_port
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runners: list[web.AppRunner] = []
        self.thread: threading.Thread | None = None
        self.started = threading.Event()
        self.error: BaseException | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Listen on management_port and prometheus_port, those not 0 (SystemExit when one
        cannot be bound)."""
        self.thread = threading.Thread(target=self._run, name="management", daemon=True)
        self.thread.start()
        self.started.wait(30)
        if self.error is not None:
            raise SystemExit(f"leveret-server: cannot listen for management/Prometheus: "
                             f"{self.error}")
        if self.port:
            log.info("management API on http://%s:%d/api/", self.host, self.port)
        if self.prometheus_port:
            log.info("Prometheus metrics on http://%s:%d/metrics", self.prometheus_host,
                     self.prometheus_port)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            ssl_context = self._ssl_context()
            for app, host, port in ((self.app, self.host, self.port),
                                    (self.prometheus_app, self.prometheus_host,
                                     self.prometheus_port)):
                if not port:
                    continue
                runner = web.AppRunner(app(), access_log=None)
                self.runners.append(runner)
                self.loop.run_until_complete(runner.setup())
                try:
                    site = web.TCPSite(runner, host, port, reuse_address=True,
                                       ssl_context=ssl_context)
                    self.loop.run_until_complete(site.start())
                except OSError as e:
                    raise OSError(f"{host}:{port}: {e.strerror or e}") from None
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self.error = e
            self._cleanup()
            self.started.set()
            return
        self.started.set()
        self.loop.run_forever()
        self._cleanup()

    def _ssl_context(self):
        """With AMQPS configured (tls_port and the ssl_* settings) both listeners speak HTTPS
        only, with the same certificate and TLS versions. Client certificates are not asked
        for: HTTP basic auth authenticates (ssl_verify applies to AMQPS)."""
        if not self.config.tls_port:
            return None
        ctx = tls.server_context(self.config)
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _cleanup(self) -> None:
        for runner in self.runners:
            self.loop.run_until_complete(runner.cleanup())
        self.loop.close()

    def stop(self) -> None:
        if self.loop is not None and self.thread is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    # --- Prometheus (rabbitmq_prometheus): no authentication, as RabbitMQ's ------------------
    def prometheus_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors])
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/metrics/per-object", self.metrics)
        app.router.add_get("/metrics/detailed", self.metrics)
        return app

    async def metrics(self, request):
        state, status, counters = await asyncio.gather(
            self.ask("mgmt_state"), self.ask("status"), self.ask("mgmt_counters"))
        rows = state["queue_rows"]  # the queues' samples: no queue is asked per scrape
        only = vhosts = None
        path = request.path
        if path == "/metrics/detailed":
            names = set()
            for family in request.query.getall("family", []):
                if family not in prometheus.FAMILIES:
                    raise api.bad_request(f"unknown family {family!r}; known: "
                                          f"{', '.join(sorted(prometheus.FAMILIES))}")
                names.update(prometheus.FAMILIES[family])
            only = names
            vhosts = set(request.query.getall("vhost", [])) or None
        body = prometheus.render(prometheus.metrics(
            state["node"], self._cluster_name(state), rows, _stats(state), status,
            per_object=path != "/metrics", only=only, vhosts=vhosts, counters=counters,
            processes=self._processes(counters)))
        return web.Response(body=body, headers={"Content-Type": prometheus.CONTENT_TYPE})

    def _processes(self, counters) -> dict:
        """rabbitmq_process_*: file descriptors open in the node process and its workers (the
        kernel's count, /proc), the limit (RLIMIT_NOFILE, the same for all: inherited), and
        TCP sockets: client connections and the listeners."""
        pids = [os.getpid()]
        try:
            for task in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children") as f:
                    pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
        open_fds = node_stats.fds_open(pids)
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        listeners = 1 + bool(self.config.tls_port) + bool(self.port) + \
            bool(self.prometheus_port)
        return {"open_fds": open_fds, "max_fds": limit, "max_tcp_sockets": limit,
                "open_tcp_sockets": counters.get("now", {}).get("connections", 0) + listeners}

    # --- the application --------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._same_origin])
        r = app.router
        get, put, delete, post = r.add_get, r.add_put, r.add_delete, r.add_post
        get("/", self.index)  # the web UI (actors/management/www/)
        r.add_static("/static", WWW, follow_symlinks=False)
        get("/api/overview", self.overview)
        get("/api/whoami", self.whoami)
        get("/api/cluster-name", self.cluster_name)
        get("/api/nodes", self.nodes)
        get("/api/nodes/{node}", self.node)
        get("/api/vhosts", self.vhosts)
        get("/api/vhosts/{vhost}", self.vhost)
        put("/api/vhosts/{vhost}", self.put_vhost)
        delete("/api/vhosts/{vhost}", self.delete_vhost)
        get("/api/users", self.users)
        get("/api/users/{user}", self.user)
        put("/api/users/{user}", self.put_user)
        delete("/api/users/{user}", self.delete_user)
        get("/api/permissions", self.permissions)
        get("/api/vhosts/{vhost}/permissions", self.permissions)
        get("/api/users/{user}/permissions", self.permissions)
        get("/api/exchanges/{vhost}/{name}/bindings/{side:source|destination}",
            self.exchange_bindings)
        get("/api/extensions", self.extensions)
        get("/api/permissions/{vhost}/{user}", self.permission)
        put("/api/permissions/{vhost}/{user}", self.put_permission)
        delete("/api/permissions/{vhost}/{user}", self.delete_permission)
        get("/api/exchanges", self.exchanges)
        get("/api/exchanges/{vhost}", self.exchanges)
        get("/api/exchanges/{vhost}/{name}", self.exchange)
        put("/api/exchanges/{vhost}/{name}", self.put_exchange)
        delete("/api/exchanges/{vhost}/{name}", self.delete_exchange)
        post("/api/exchanges/{vhost}/{name}/publish", self.publish)
        get("/api/queues", self.queues)
        get("/api/queues/{vhost}", self.queues)
        get("/api/queues/{vhost}/{name}", self.queue)
        put("/api/queues/{vhost}/{name}", self.put_queue)
        delete("/api/queues/{vhost}/{name}", self.delete_queue)
        get("/api/queues/{vhost}/{name}/bindings", self.queue_bindings)
        delete("/api/queues/{vhost}/{name}/contents", self.purge)
        post("/api/queues/{vhost}/{name}/get", self.get)
        post("/api/queues/{vhost}/{name}/actions", self.queue_action)
        get("/api/aliveness-test/{vhost}", self.aliveness)
        get("/api/bindings", self.bindings)
        get("/api/bindings/{vhost}", self.bindings)
        get("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{dest}", self.binding_list)
        post("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{dest}", self.post_binding)
        get("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{dest}/{props}", self.binding)
        delete("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{dest}/{props}",
               self.delete_binding)
        for base in ("/api/policies", "/api/operator-policies"):
            get(base, self.policies)
            get(base + "/{vhost}", self.policies)
            get(base + "/{vhost}/{name}", self.policy)
            put(base + "/{vhost}/{name}", self.put_policy)
            delete(base + "/{vhost}/{name}", self.delete_policy)
        for base in ("/api/vhost-limits", "/api/user-limits"):
            get(base, self.limits)
            get(base + "/{name}", self.limits)
            put(base + "/{name}/{limit}", self.put_limit)
            delete(base + "/{name}/{limit}", self.delete_limit)
        get("/api/connections", self.connections)
        get("/api/vhosts/{vhost}/connections", self.connections)
        get("/api/connections/{conn}", self.connection)
        delete("/api/connections/{conn}", self.delete_connection)
        get("/api/connections/{conn}/channels", self.channels)
        get("/api/channels", self.channels)
        get("/api/vhosts/{vhost}/channels", self.channels)
        get("/api/channels/{channel}", self.channel)
        get("/api/consumers", self.consumers)
        get("/api/consumers/{vhost}", self.consumers)
        get("/api/health/checks/alarms", self.check_alarms)
        get("/api/health/checks/local-alarms", self.check_alarms)
        get("/api/health/checks/port-listener/{port}", self.check_port)
        get("/api/health/checks/protocol-listener/{protocol}", self.check_protocol)
        get("/api/health/checks/virtual-hosts", self.check_vhosts)
        get("/api/health/checks/node-is-quorum-critical", self.check_quorum)
        census.register(r, self)  # POST /api/leveret/census/{vhost}[/{name}]
        get("/api/leveret/analyses", self.analyses)
        get("/api/leveret/analyses/{analysis}/messages", self.analysis_messages)
        get("/api/leveret/analyses/{analysis}/messages/{ref}", self.analysis_message)
        get("/analyses/{analysis}/{path:.*}", self.analysis_file)
        get("/api/topic-permissions", self.topic_permissions)
        get("/api/topic-permissions/{vhost}/{user}", self.topic_permissions)
        put("/api/topic-permissions/{vhost}/{user}", self.put_topic_permission)
        delete("/api/topic-permissions/{vhost}/{user}", self.delete_topic_permission)
        delete("/api/topic-permissions/{vhost}/{user}/{exchange}",
               self.delete_topic_permission)
        get("/api/vhosts/{vhost}/topic-permissions", self.topic_permissions)
        get("/api/users/{user}/topic-permissions", self.topic_permissions)
        get("/api/definitions", self.definitions)
        post("/api/definitions", self.post_definitions)
        get("/api/definitions/{vhost}", self.definitions)
        post("/api/definitions/{vhost}", self.post_definitions)
        get("/api/parameters", self.parameters)
        get("/api/parameters/{component}", self.parameters)
        get("/api/parameters/{component}/{vhost}", self.parameters)
        get("/api/parameters/{component}/{vhost}/{name}", self.parameter)
        put("/api/parameters/{component}/{vhost}/{name}", self.put_parameter)
        delete("/api/parameters/{component}/{vhost}/{name}", self.delete_parameter)
        get("/api/global-parameters", self.global_parameters)
        get("/api/global-parameters/{name}", self.global_parameter)
        put("/api/global-parameters/{name}", self.put_global_parameter)
        delete("/api/global-parameters/{name}", self.put_global_parameter)
        return app

    @web.middleware
    async def _errors(self, request, handler):
        try:
            return await handler(request)
        except ApiError as e:
            # a 401 never carries WWW-Authenticate: a browser that cached credentials from its
            # own login dialog would send them with any page's forged requests
            return web.json_response(e.body(), status=e.status)
        except AMQPError as e:
            e = _from_amqp(e.reply_code, e.text)
            return web.json_response(e.body(), status=e.status)

    @web.middleware
    async def _same_origin(self, request, handler):
        """403 before anything is done for a state-changing request that a page of another
        origin sent (its Origin, or without one its Referer, names another host:port)."""
        source = request.headers.get("Origin") or request.headers.get("Referer")
        if request.method in STATE_CHANGING and source is not None:
            ours = _origin("//" + request.host, request.scheme)
            if not ours or _origin(source) != ours:
                raise ApiError(403, "forbidden", f"cross-origin request refused: {source} is "
                                                 f"not this server ({request.host})")
        return await handler(request)

    async def index(self, request):
        return web.FileResponse(WWW / "index.html")

    # --- who asks ---------------------------------------------------------------------------
    async def _login(self, request) -> tuple[str, list]:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            raise ApiError(401, "not_authorised", "Not_Authorized")
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, "not_authorised", "Not_Authorized") from None
        try:
            tags = await self.ask("mgmt_login", {"user": user, "password": password})
        except ApiError:
            raise ApiError(401, "not_authorised", "Login failed") from None
        if loopback_refused(user, request.remote or "", self.config.loopback_users):
            log.warning("HTTP access denied: user '%s' can only log in via localhost (from %s)",
                        user, request.remote)
            raise ApiError(401, "not_authorised", "User can only log in via localhost")
        if not api.is_management(tags):
            raise ApiError(401, "not_authorised", "Not management user")
        return user, tags

    async def _state(self, request, need=None):
        """(user, tags, definitions, vhosts the user may see); `need` a tag test."""
        user, tags = await self._login(request)
        if need is not None and not need(tags):
            raise ApiError(401, "not_authorised", "Not administrator user"
                           if need is api.is_admin else "Not monitor user"
                           if need is api.is_monitor else "Not policymaker user")
        state = await self.ask("mgmt_state")
        return user, tags, state, api.visible_vhosts(state, user, tags)

    @staticmethod
    def _vhost(request, state, visible) -> str | None:
        vhost = request.match_info.get("vhost")
        if vhost is None:
            return None
        if vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
            raise api.not_found()
        if vhost not in visible:
            raise ApiError(401, "not_authorised", "Access refused.")
        return vhost

    @staticmethod
    def _reply(request, items):
        return web.json_response(api.list_query(items, request.query))

    @staticmethod
    async def _body(request) -> dict:
        """The JSON object of a request; only an application/json one is read, so a page of
        another site cannot make a browser send one (an HTML form cannot set that type)."""
        if not request.can_read_body:
            return {}
        _require_type(request, "application/json")
        try:
            body = await request.json()
        except json.JSONDecodeError as e:
            raise api.bad_request(f"could not parse JSON document: {e}") from None
        if not isinstance(body, dict):
            raise api.bad_request("not_json_object")
        return body

    @staticmethod
    def _queue_rows(state) -> dict:
        """(vhost, name) -> the queue's row: its node, mirrors, state and the depth,
        consumers, head message timestamp and disk counts of its last sample (the metadata
        actor's `_sampled_queue_rows`). Every list, the overview, the vhosts and a single
        queue answer from the statistics the queues emit every collect_statistics_interval,
        as RabbitMQ's management database does: nothing is asked of the queues per request
        (`leveretctl list_queues` asks them, as rabbitmqctl does)."""
        return {(r["vhost"], r["name"]): r for r in state["queue_rows"]}

    # --- overview and node --------------------------------------------------------------------
    async def overview(self, request):
        user, tags, state, visible = await self._state(request)
        rows = [r for k, r in self._queue_rows(state).items() if k[0] in visible]
        listeners = [{"node": state["node"], "protocol": "amqp", "ip_address": self.config.host,
                      "port": self.config.port}]
        if self.config.tls_port:
            listeners.append({"node": state["node"], "protocol": "amqp/ssl",
                              "ip_address": self.config.host, "port": self.config.tls_port})
        listeners.append({"node": state["node"], "protocol": "http",
                          "ip_address": self.host, "port": self.port})
        return web.json_response(api.overview_json(
            dict(state, exchanges=[x for x in state["exchanges"] if x["vhost"] in visible],
                 connections=[c for c in state.get("connections", ())
                              if api.is_monitor(tags) or c["user"] == user]),
            rows, listeners, self.port, self._cluster_name(state),
            api.vhost_message_stats([s for (v, _), s in _stats(state).items()
                                     if v in visible], _counts(state), visible,
                                    [d for (v, _), d in _disk(state).items() if v in visible]),
            [d for (v, _), d in _depth(state).items() if v in visible], _counts(state)))

    @staticmethod
    def _cluster_name(state) -> str:
        return state["members"][0]["name"] if state["members"] else state["node"]

    async def whoami(self, request):
        user, tags = await self._login(request)
        return web.json_response({"name": user, "tags": tags})

    async def cluster_name(self, request):
        _, _, state, _ = await self._state(request)
        return web.json_response({"name": self._cluster_name(state)})

    @staticmethod
    def _nodes(state) -> list:
        """Every member with the figures of its own last sample (its memory, disk, alarms...:
        each node measures itself and sends its sample to every node up)."""
        rows = state.get("node_rows") or {}
        return [api.node_json(mbr, rows.get(mbr["name"])) for mbr in state["members"]]

    async def nodes(self, request):
        _, _, state, _ = await self._state(request, api.is_monitor)
        return self._reply(request, self._nodes(state))

    async def node(self, request):
        """GET /api/nodes/{name}: one member, as /api/nodes lists it (404 for another name)."""
        _, _, state, _ = await self._state(request, api.is_monitor)
        for row in self._nodes(state):
            if row["name"] == request.match_info["node"]:
                return web.json_response(row)
        raise api.not_found()

    async def check_alarms(self, request):
        """/alarms: every member's alarms (each from its own last sample, this node's as it
        is now); /local-alarms: this node's (rabbit_mgmt_wm_health_check_[local_]alarms)."""
        _, _, state, _ = await self._state(request, api.is_monitor)
        alarms = [(state["node"], a) for a in state["alarms"]]
        if not request.path.endswith("/local-alarms"):
            for mbr in self._nodes(state):
                if mbr["name"] != state["node"]:
                    alarms += [(mbr["name"], a) for a, key in (("memory", "mem_alarm"),
                                                              ("disk", "disk_free_alarm"))
                               if mbr.get(key)]
        if alarms:
            where = "on the node" if request.path.endswith("/local-alarms") else \
                "in the cluster"
            return web.json_response({"status": "failed",
                                      "reason": f"There are alarms in effect {where}",
                                      "alarms": [api.alarm_json(node, a)
                                                 for node, a in alarms]}, status=503)
        return web.json_response({"status": "ok"})

    # --- connections, channels, consumers (the workers' samples) -----------------------------
    def _connections(self, request, user, tags, state, visible) -> list:
        """Those the user may see: all for monitoring, else its own (rabbit_mgmt_util)."""
        vhost = self._vhost(request, state, visible)
        return [c for c in state.get("connections", ())
                if (api.is_monitor(tags) or c["user"] == user) and
                (vhost is None or c["vhost"] == vhost)]

    async def connections(self, request):
        user, tags, state, visible = await self._state(request)
        return self._reply(request, [api.connection_json(c, details=False) for c in
                                     self._connections(request, user, tags, state, visible)])

    def _find_connection(self, request, user, tags, state, visible) -> dict:
        name = request.match_info["conn"]
        for c in self._connections(request, user, tags, state, visible):
            if c["name"] == name:
                return c
        raise api.not_found()

    async def connection(self, request):
        user, tags, state, visible = await self._state(request)
        return web.json_response(api.connection_json(
            self._find_connection(request, user, tags, state, visible)))

    async def delete_connection(self, request):
        user, tags, state, visible = await self._state(request)
        c = self._find_connection(request, user, tags, state, visible)
        reason = request.headers.get("X-Reason", "Closed via management plugin")
        await self.ask("mgmt_close_connection", {"name": c["name"], "reason": reason})
        return web.Response(status=204)

    async def channels(self, request):
        user, tags, state, visible = await self._state(request)
        conns = self._connections(request, user, tags, state, visible)
        if "conn" in request.match_info:
            conns = [self._find_connection(request, user, tags, state, visible)]
        return self._reply(request, [api.channel_json(ch) for c in conns
                                     for ch in c["channel_list"]])

    async def channel(self, request):
        user, tags, state, visible = await self._state(request)
        name = request.match_info["channel"]
        for c in self._connections(request, user, tags, state, visible):
            for ch in c["channel_list"]:
                if ch["name"] == name:
                    return web.json_response(api.channel_json(ch, details=True))
        raise api.not_found()

    async def consumers(self, request):
        user, tags, state, visible = await self._state(request)
        return self._reply(request, [cons for c in self._connections(request, user, tags,
                                                                     state, visible)
                                     for ch in c["channel_list"] for cons in ch["consumers"]])

    # --- health checks (rabbit_mgmt_wm_health_check_*) ----------------------------------------
    def _listeners(self, node: str) -> list:
        out = [{"node": node, "protocol": "amqp", "ip_address": self.config.host,
                "port": self.config.port}]
        if self.config.tls_port:
            out.append({"node": node, "protocol": "amqp/ssl", "ip_address": self.config.host,
                        "port": self.config.tls_port})
        if self.port:
            out.append({"node": node, "protocol": "http", "ip_address": self.host,
                        "port": self.port})
        if self.prometheus_port:
            out.append({"node": node, "protocol": "http/prometheus",
                        "ip_address": self.prometheus_host, "port": self.prometheus_port})
        if self.config.cluster_address:  # the Raft link's (RabbitMQ's Erlang distribution's)
            host, _, port = self.config.cluster_address.rpartition(":")
            out.append({"node": node, "protocol": "clustering", "ip_address": host,
                        "port": int(port)})
        return out

    @staticmethod
    def _failed(reason: str, **more):
        return web.json_response({"status": "failed", "reason": reason, **more}, status=503)

    async def check_port(self, request):
        _, _, state, _ = await self._state(request, api.is_monitor)
        try:
            port = int(request.match_info["port"])
        except ValueError:
            raise api.bad_request("Invalid port") from None
        ports = [x["port"] for x in self._listeners(state["node"])]
        if port not in ports:
            return self._failed("No active listener", missing=port, ports=ports)
        return web.json_response({"status": "ok", "port": port})

    async def check_protocol(self, request):
        _, _, state, _ = await self._state(request, api.is_monitor)
        protocol = api.normalize_protocol(request.match_info["protocol"])
        protocols = [x["protocol"] for x in self._listeners(state["node"])]
        if protocol not in protocols:
            return self._failed("No active listener", missing=protocol, protocols=protocols)
        return web.json_response({"status": "ok", "protocol": protocol})

    async def check_vhosts(self, request):
        await self._state(request, api.is_monitor)
        return web.json_response({"status": "ok"})  # a vhost has no process of its own to fail

    async def check_quorum(self, request):
        """Would stopping this node cost a quorum queue its majority (RabbitMQ's question,
        rabbit_quorum_queue:list_with_minimum_quorum_for_cli), or the cluster its Raft
        majority (the definitions could no longer change: Leveret's metadata is a Raft log
        too)?"""
        _, _, state, _ = await self._state(request, api.is_monitor)
        members = state["members"]
        if len(members) <= 1:
            return web.json_response({"status": "ok", "reason": "single node cluster"})
        up = {x["name"] for x in members if x["up"]}
        critical = api.quorum_critical(state["queues"], state["node"], up,
                                       {x["member"]: x["name"] for x in members
                                        if "member" in x})
        if critical:
            return self._failed("There are quorum queues that would lose their quorum if "
                                "the target node is shut down", queues=critical)
        if len(up) - 1 < len(members) // 2 + 1:
            return self._failed("stopping this node would leave the cluster's metadata "
                                "without a majority", up=len(up), members=len(members))
        return web.json_response({"status": "ok"})

    # --- lifecycle traces of `make analyze` (actors/management/traces.py) ----------------------
    async def _offload(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def analyses(self, request):
        await self._state(request, api.is_monitor)
        return self._reply(request, await self._offload(traces.analyses,
                                                        self.config.data_dir))

    async def analysis_messages(self, request):
        await self._state(request, api.is_monitor)
        path = traces.folder(self.config.data_dir, request.match_info["analysis"])
        return self._reply(request, await self._offload(traces.messages, path))

    async def analysis_message(self, request):
        await self._state(request, api.is_monitor)
        path = traces.folder(self.config.data_dir, request.match_info["analysis"])
        return web.json_response(await self._offload(traces.lifecycle, path,
                                                     request.match_info["ref"]))

    async def analysis_file(self, request):
        """The job's report.html and its plots (monitoring users; basic auth as the API)."""
        await self._state(request, api.is_monitor)
        base = traces.folder(self.config.data_dir, request.match_info["analysis"]).resolve()
        target = (base / request.match_info["path"]).resolve()
        if base not in target.parents or not target.is_file():
            raise api.not_found()
        return web.FileResponse(target)

    # --- topic permissions (rabbit_mgmt_wm_topic_permission[s][_vhost|_user]) ---------------
    async def topic_permissions(self, request):
        """/api/topic-permissions, /api/vhosts/{vhost}/topic-permissions,
        /api/users/{user}/topic-permissions (404 for an unknown vhost or user) and
        /api/topic-permissions/{vhost}/{user} (404 also when it has none)."""
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost, user = request.match_info.get("vhost"), request.match_info.get("user")
        if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
            raise api.not_found()
        if user is not None and user not in {u["name"] for u in state["auth"]["users"]}:
            raise api.not_found()
        rows = [{"user": p["user"], "vhost": p["vhost"], "exchange": p["exchange"],
                 "write": p["write"], "read": p["read"]}
                for p in state["auth"]["topic_permissions"]
                if vhost in (None, p["vhost"]) and user in (None, p["user"])]
        if vhost is not None and user is not None and not rows:
            raise api.not_found()
        rows.sort(key=lambda r: (r["vhost"], r["user"]))
        return self._reply(request, rows)

    def _user_and_vhost(self, request, state) -> tuple:
        """A topic permission's user and vhost; 400 vhost_or_user_not_found, as RabbitMQ."""
        vhost, user = request.match_info["vhost"], request.match_info["user"]
        if vhost not in {v["name"] for v in state["auth"]["vhosts"]} or \
                user not in {u["name"] for u in state["auth"]["users"]}:
            raise api.bad_request("vhost_or_user_not_found")
        return user, vhost

    async def put_topic_permission(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        user, vhost = self._user_and_vhost(request, state)
        body = await self._body(request)
        missing = [k for k in ("exchange", "write", "read") if k not in body]
        if missing:
            raise api.bad_request(f"key_missing: {missing[0]}")
        _refuse_bad_patterns(body["write"], body["read"])
        existed = any(p["vhost"] == vhost and p["user"] == user and
                      p["exchange"] == body["exchange"]
                      for p in state["auth"]["topic_permissions"])
        await self._auth("set_topic_permissions", [user, vhost, body["exchange"],
                                                   body["write"], body["read"]])
        return web.Response(status=204 if existed else 201)

    async def delete_topic_permission(self, request):
        """DELETE .../{vhost}/{user}: all of the user's in the vhost; .../{exchange}: one."""
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost, user = request.match_info["vhost"], request.match_info["user"]
        exchange = request.match_info.get("exchange")
        if not any(p["vhost"] == vhost and p["user"] == user and
                   exchange in (None, p["exchange"])
                   for p in state["auth"]["topic_permissions"]):
            raise api.not_found()
        await self._auth("clear_topic_permissions", [user, vhost] +
                         ([exchange] if exchange is not None else []))
        return web.Response(status=204)

    # --- definitions (rabbit_mgmt_wm_definitions): administrator only, as RabbitMQ ----------
    async def definitions(self, request):
        """GET: the definitions JSON (actors/node/definitions_json.py's export, the same as
        `leveretctl export_definitions`); `?download=NAME` makes it an attachment."""
        _, _, state, visible = await self._state(request, api.is_admin)
        vhost = request.match_info.get("vhost")
        if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
            raise api.bad_request("vhost_not_found")
        doc = await self.ask("definitions.export")
        if vhost is not None:
            doc = api.vhost_definitions(doc, vhost)
        headers = {"Cache-Control": "no-cache"}
        download = request.query.get("download")
        if download:
            if not all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in download):
                raise api.bad_request("download must be a file name (an HTTP token)")
            headers["Content-Disposition"] = f"attachment; filename={download}"
        return web.json_response(doc, headers=headers)

    async def post_definitions(self, request):
        """POST: import a definitions document (JSON body, or the UI's multipart form with
        a `file` part), as `leveretctl import_definitions`: all of it or, when any object is
        refused, nothing. Per vhost: its parameters, policies, queues, exchanges and bindings
        go into that vhost (rabbit_definitions:apply_defs/3)."""
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost = request.match_info.get("vhost")
        if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
            raise api.not_found("vhost_not_found")
        doc = await self._definitions_body(request)
        if vhost is not None:
            doc = api.into_vhost(doc, vhost)
        await self.ask("definitions.import", {"doc": doc}, timeout_ms=60000)
        return web.Response(status=204)

    async def _definitions_body(self, request) -> dict:
        """JSON, or the file of a multipart form (RabbitMQ's UI; cross-origin ones are
        refused by `_same_origin`), as rabbit_mgmt_wm_definitions accepts them."""
        if request.can_read_body:
            _require_type(request, "application/json", "multipart/form-data")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            part = form.get("file")
            if part is None:
                raise api.bad_request("failed_to_parse_json")
            raw = part.file.read() if hasattr(part, "file") else str(part).encode()
        else:
            raw = await request.read()
        if not raw.strip():
            return {}
        try:
            doc = json.loads(raw.decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise api.bad_request("failed_to_parse_json") from None
        if not isinstance(doc, dict):
            raise api.bad_request("failed_to_parse_json")
        return doc

    # --- runtime parameters (rabbit_mgmt_wm_parameter[s], rabbit_mgmt_wm_global_parameter[s])
    async def parameters(self, request):
        _, _, state, visible = await self._state(request, api.is_policymaker)
        component = request.match_info.get("component")
        vhost = self._vhost(request, state, visible)
        rows = [p for p in api.parameters(state) if p["vhost"] in visible and
                (vhost is None or p["vhost"] == vhost)]
        if component is None:  # rabbit_runtime_parameters:list/0 leaves policies out
            rows = [p for p in rows if p["component"] != "policy"]
        else:
            rows = [p for p in rows if p["component"] == component]
        return self._reply(request, rows)

    async def parameter(self, request):
        _, _, state, visible = await self._state(request, api.is_policymaker)
        vhost = self._vhost(request, state, visible)
        key = (vhost, request.match_info["component"], request.match_info["name"])
        for p in api.parameters(state):
            if (p["vhost"], p["component"], p["name"]) == key:
                return web.json_response(p)
        raise api.not_found()

    async def put_parameter(self, request):
        """operator_policy and vhost-limits are set through the operations their own
        endpoints use; policies are refused as rabbit_runtime_parameters:set/5 refuses
        them, and a component Leveret does not have (federation-upstream, shovel...) as
        RabbitMQ refuses one no plugin registered."""
        _, tags, state, visible = await self._state(request, api.is_policymaker)
        vhost = self._vhost(request, state, visible)
        component, name = request.match_info["component"], request.match_info["name"]
        body = await self._body(request)
        if component == "policy":
            raise api.bad_request("policies may not be set using this method")
        if component not in api.COMPONENTS:
            raise api.unknown_component(component)
        if "value" not in body:
            raise api.bad_request("key_missing: value")
        value = body["value"]
        if not isinstance(value, dict):
            raise api.bad_request(f"Validation failed\n\n{value!r} is not a JSON object\n")
        if not api.is_admin(tags):  # (operator policies and limits are the administrator's)
            raise ApiError(401, "not_authorised", "Not administrator user")
        if component == "operator_policy":
            missing = [k for k in ("pattern", "definition") if k not in value]
            if missing:
                raise api.bad_request(f"Validation failed\n\nKey \"{missing[0]}\" not "
                                      "found in operator_policy\n")
            existed = any(p["vhost"] == vhost and p["name"] == name
                          for p in state["operator_policies"])
            await self.ask("policy", {"method": "set", "vhost": vhost, "name": name,
                                      "pattern": value["pattern"],
                                      "definition": value["definition"],
                                      "priority": int(value.get("priority", 0)),
                                      "apply_to": value.get("apply-to", "all"),
                                      "operator": True})
            return web.Response(status=204 if existed else 201)
        if name != "limits":
            raise api.bad_request("Validation failed\n\nvhost-limits has one parameter, "
                                  f"named limits, not {name!r}\n")
        existed = any(s == "vhost" and n == vhost for s, n, _ in state["limits"])
        await self.ask("limits", {"method": "set", "scope": "vhost", "name": vhost,
                                  "value": value})
        return web.Response(status=204 if existed else 201)

    async def delete_parameter(self, request):
        _, tags, state, visible = await self._state(request, api.is_policymaker)
        vhost = self._vhost(request, state, visible)
        component, name = request.match_info["component"], request.match_info["name"]
        if component == "policy":
            raise api.bad_request("policies may not be cleared using this method")
        if not any((p["vhost"], p["component"], p["name"]) == (vhost, component, name)
                   for p in api.parameters(state)):
            raise api.not_found()
        if not api.is_admin(tags):
            raise ApiError(401, "not_authorised", "Not administrator user")
        if component == "operator_policy":
            await self.ask("policy", {"method": "clear", "vhost": vhost, "name": name,
                                      "operator": True})
        else:
            await self.ask("limits", {"method": "clear", "scope": "vhost", "name": vhost})
        return web.Response(status=204)

    async def global_parameters(self, request):
        _, _, state, _ = await self._state(request, api.is_policymaker)
        return self._reply(request, api.global_parameters(self._cluster_name(state)))

    async def global_parameter(self, request):
        _, _, state, _ = await self._state(request, api.is_policymaker)
        for p in api.global_parameters(self._cluster_name(state)):
            if p["name"] == request.match_info["name"]:
                return web.json_response(p)
        raise api.not_found()

    async def put_global_parameter(self, request):
        """Refused: Leveret's cluster name is its first node's name (node_name), not a
        parameter, and it has no other global parameter."""
        await self._state(request, api.is_admin)
        raise api.bad_request("global parameters cannot be set on Leveret: cluster_name is "
                              "the first node's node_name setting")

    # --- vhosts, users, permissions -----------------------------------------------------------
    async def vhosts(self, request):
        _, _, state, visible = await self._state(request)
        sums = self._vhost_sums(state)
        return self._reply(request, [api.vhost_json(v, state["members"], sums(v["name"]))
                                     for v in state["auth"]["vhosts"]
                                     if v["name"] in visible])

    async def vhost(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        sums = self._vhost_sums(state)
        return web.json_response(api.vhost_json(
            next(v for v in state["auth"]["vhosts"] if v["name"] == vhost), state["members"],
            sums(vhost)))

    def _vhost_sums(self, state):
        """vhost -> its totals (api.vhost_sums)."""
        rows = list(self._queue_rows(state).values())
        stats, depth = _stats(state), _depth(state)
        conns = state.get("connections", ())
        counts = _counts(state)
        return lambda vhost: api.vhost_sums(
            vhost, [r for r in rows if r["vhost"] == vhost],
            [s for (v, _), s in stats.items() if v == vhost],
            [d for (v, _), d in depth.items() if v == vhost], conns, counts)

    async def _auth(self, method: str, args: list):
        method, args = hashed_auth_call(method, args)
        await self.ask("auth", {"method": method, "args": args})

    async def put_vhost(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost = request.match_info["vhost"]
        await self._body(request)
        if any(v["name"] == vhost for v in state["auth"]["vhosts"]):
            return web.Response(status=204)
        await self._auth("add_vhost", [vhost])
        return web.Response(status=201)

    async def delete_vhost(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost = request.match_info["vhost"]
        if not any(v["name"] == vhost for v in state["auth"]["vhosts"]):
            raise api.not_found()
        await self._auth("delete_vhost", [vhost])
        return web.Response(status=204)

    async def users(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        return self._reply(request, [api.user_json(u, state) for u in state["auth"]["users"]])

    async def user(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        name = request.match_info["user"]
        for u in state["auth"]["users"]:
            if u["name"] == name:
                return web.json_response(api.user_json(u, state))
        raise api.not_found()

    async def put_user(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        name = request.match_info["user"]
        body = await self._body(request)
        tags = body.get("tags", "")
        # "administrator, monitoring": each tag stripped, as rabbit_auth_backend_internal's
        # tag_list_from (the web UI's and rabbitmqadmin's comma-separated string)
        tags = [t.strip() for t in (tags.split(",") if isinstance(tags, str) else tags)
                if t.strip()]
        exists = any(u["name"] == name for u in state["auth"]["users"])
        if "password" in body:
            if exists:
                await self._auth("change_password", [name, body["password"]])
            else:
                await self._auth("add_user", [name, body["password"], tags])
        elif "password_hash" in body:
            algo = body.get("hashing_algorithm", "rabbit_password_hashing_sha256")
            if exists:
                await self._auth("change_password_hash", [name, body["password_hash"], algo])
            else:
                await self._auth("add_user_with_hash", [name, body["password_hash"], algo,
                                                        tags])
        elif not exists:
            raise api.bad_request("password or password_hash is required")
        if exists:
            await self._auth("set_user_tags", [name, tags])
        return web.Response(status=204 if exists else 201)

    async def delete_user(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        name = request.match_info["user"]
        if not any(u["name"] == name for u in state["auth"]["users"]):
            raise api.not_found()
        await self._auth("delete_user", [name])
        return web.Response(status=204)

    async def permissions(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost, user = request.match_info.get("vhost"), request.match_info.get("user")
        if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
            raise api.not_found()
        if user is not None and user not in {u["name"] for u in state["auth"]["users"]}:
            raise api.not_found()
        return self._reply(request, [api.permission_json(p)
                                     for p in state["auth"]["permissions"]
                                     if vhost in (None, p["vhost"]) and
                                     user in (None, p["user"])])

    async def extensions(self, request):
        await self._login(request)
        return web.json_response([])  # no management plugins beside the API itself

    async def exchange_bindings(self, request):
        """Bindings whose source (or destination) is this exchange."""
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = _exchange_name(request.match_info["name"])
        if not any(x["vhost"] == vhost and x["name"] == name for x in state["exchanges"]):
            raise api.not_found()
        if request.match_info["side"] == "source":
            rows = [b for b in _bindings(state) if b[0] == vhost and b[1] == name]
        else:
            rows = [b for b in _bindings(state) if b[0] == vhost and b[2] == "exchange" and
                    b[3] == name]
        return self._reply(request, [api.binding_json(b) for b in rows])

    async def permission(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost, user = request.match_info["vhost"], request.match_info["user"]
        for p in state["auth"]["permissions"]:
            if p["vhost"] == vhost and p["user"] == user:
                return web.json_response(api.permission_json(p))
        raise api.not_found()

    async def put_permission(self, request):
        _, _, state, _ = await self._state(request, api.is_admin)
        vhost, user = request.match_info["vhost"], request.match_info["user"]
        body = await self._body(request)
        missing = [k for k in ("configure", "write", "read") if k not in body]
        if missing:
            raise api.bad_request(f"{missing[0]} is required")
        _refuse_bad_patterns(body["configure"], body["write"], body["read"])
        existed = any(p["vhost"] == vhost and p["user"] == user
                      for p in state["auth"]["permissions"])
        await self._auth("set_permissions", [user, vhost, body["configure"], body["write"],
                                             body["read"]])
        return web.Response(status=204 if existed else 201)

    async def delete_permission(self, request):
        await self._state(request, api.is_admin)
        await self._auth("clear_permissions", [request.match_info["user"],
                                               request.match_info["vhost"]])
        return web.Response(status=204)

    # --- exchanges ----------------------------------------------------------------------------
    async def exchanges(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        counts = _counts(state)
        return self._reply(request, [api.exchange_json(x, state["policies"], counts,
                                                       details=False)
                                     for x in state["exchanges"] if x["vhost"] in visible and
                                     (vhost is None or x["vhost"] == vhost)])

    async def exchange(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = _exchange_name(request.match_info["name"])
        for x in state["exchanges"]:
            if x["vhost"] == vhost and x["name"] == name:
                return web.json_response(api.exchange_json(x, state["policies"],
                                                           _counts(state)))
        raise api.not_found()

    async def put_exchange(self, request):
        user, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = _exchange_name(request.match_info["name"])
        body = await self._body(request)
        if "type" not in body:
            raise api.bad_request("key_missing: type")
        AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "exchange", name)
        existed = any(x["vhost"] == vhost and x["name"] == name for x in state["exchanges"])
        await self.ask("exchange.declare", {
            "vhost": vhost, "name": name, "type": body["type"], "passive": False,
            "durable": _flag(body, "durable", True),
            "auto_delete": _flag(body, "auto_delete", False),
            "internal": _flag(body, "internal", False),
            "arguments": body.get("arguments") or {}, "user": user})
        return web.Response(status=204 if existed else 201)

    async def delete_exchange(self, request):
        user, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = _exchange_name(request.match_info["name"])
        if not any(x["vhost"] == vhost and x["name"] == name for x in state["exchanges"]):
            raise api.not_found()
        AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "exchange", name)
        await self.ask("exchange.delete", {"vhost": vhost, "name": name,
                                           "if_unused": request.query.get("if-unused") ==
                                           "true"})
        return web.Response(status=204)

    # --- as an AMQP client of this node (actors/management/amqp.py) ----------------------------
    def _target(self, request, vhost) -> tuple:
        """(host, port, user, password, vhost) to log in as the HTTP user."""
        user, _, password = base64.b64decode(request.headers["Authorization"][6:]) \
            .decode().partition(":")
        host = self.config.host if self.config.host not in ("0.0.0.0", "::", "") else \
            "127.0.0.1"
        return (host, self.config.port, user, password, vhost)

    async def _amqp(self, fn, *args):
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, fn, *args)
        except amqp.AMQPClosed as e:
            reason = str(e).split(": ", 1)[-1]
            reason = reason.split(" (class", 1)[0]
            if e.reply_code == 404:
                raise api.not_found(reason) from None
            if e.reply_code in (403, 530):
                raise ApiError(401, "not_authorised", reason) from None
            raise api.bad_request(reason) from None
        except (OSError, TimeoutError) as e:
            raise ApiError(503, "unavailable", f"the AMQP listener did not answer: {e}") \
                from None

    async def publish(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        body = await self._body(request)
        for key in ("routing_key", "payload", "payload_encoding", "properties"):
            if key not in body:
                raise api.bad_request(f"key_missing: {key}")
        encoding = body["payload_encoding"]
        if encoding == "string":
            payload = str(body["payload"]).encode()
        elif encoding == "base64":
            try:
                payload = base64.b64decode(body["payload"], validate=True)
            except (binascii.Error, ValueError):
                raise api.bad_request("payload is not valid base64") from None
        else:
            raise api.bad_request(f"payload_encoding must be string or base64, not "
                                  f"{encoding!r}")
        try:
            props = amqp.properties_from_json(body["properties"] or {})
        except (ValueError, TypeError) as e:
            raise api.bad_request(str(e)) from None
        routed = await self._amqp(amqp.publish, self._target(request, vhost),
                                  _exchange_name(request.match_info["name"]),
                                  body["routing_key"], props, payload)
        return web.json_response({"routed": routed})

    async def get(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        body = await self._body(request)
        ackmode = body.get("ackmode")
        if ackmode not in amqp.ACKMODES:
            raise api.bad_request(f"ackmode must be one of {', '.join(amqp.ACKMODES)}")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise api.bad_request("encoding must be auto or base64")
        try:
            count = int(body.get("count", 1))
            truncate = None if body.get("truncate") in (None, "") else int(body["truncate"])
        except (TypeError, ValueError):
            raise api.bad_request("count and truncate must be integers") from None
        got = await self._amqp(amqp.get, self._target(request, vhost),
                               request.match_info["name"], count, ackmode)
        return web.json_response([amqp.message_json(g, p, b, encoding, truncate)
                                  for g, p, b in got])

    async def purge(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        await self._amqp(amqp.purge, self._target(request, vhost), request.match_info["name"])
        return web.Response(status=204)

    async def queue_action(self, request):
        """rabbit_mgmt_wm_queue_actions (administrator): {"action": "sync"} syncs a
        ha-sync-mode manual queue's mirrors still behind, "cancel_sync" stops a sync under way
        (leveretctl sync_queue / cancel_sync_queue)."""
        _, _, state, visible = await self._state(request, api.is_admin)
        vhost = self._vhost(request, state, visible)
        action = (await self._body(request)).get("action")
        if action not in ("sync", "cancel_sync"):
            raise api.bad_request(f"unknown action {json.dumps(action)}")
        await self.ask("queue.sync", {"vhost": vhost, "name": request.match_info["name"],
                                      "cancel": action == "cancel_sync"})
        return web.Response(status=204)

    async def aliveness(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        await self._amqp(amqp.aliveness, self._target(request, vhost))
        return web.json_response({"status": "ok"})

    # --- queues -------------------------------------------------------------------------------
    async def queues(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        rows = self._queue_rows(state)
        stats = _stats(state)
        consumers = _consumers_by_queue(state)
        depth = _depth(state)
        use = _use(state)
        return self._reply(request, [
            api.queue_json(q, rows.get((q["vhost"], q["name"])), state["policies"],
                           state.get("operator_policies", ()),
                           stats.get((q["vhost"], q["name"])),
                           consumers.get((q["vhost"], q["name"])),
                           depth.get((q["vhost"], q["name"])), use.get((q["vhost"], q["name"])),
                           details=False)
            for q in state["queues"] if q["vhost"] in visible and
            (vhost is None or q["vhost"] == vhost)])

    async def queue(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = request.match_info["name"]
        q = _find_queue(state, vhost, name)
        rows = self._queue_rows(state)  # its last sample, as every list (and RabbitMQ's)
        return web.json_response(api.queue_json(q, rows.get((vhost, name)), state["policies"],
                                                state.get("operator_policies", ()),
                                                _stats(state).get((vhost, name)),
                                                _consumers_by_queue(state).get((vhost, name)),
                                                _depth(state).get((vhost, name)),
                                                _use(state).get((vhost, name))))

    async def put_queue(self, request):
        user, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = request.match_info["name"]
        body = await self._body(request)
        AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "queue", name)
        existed = any(q["vhost"] == vhost and q["name"] == name for q in state["queues"])
        await self.ask("queue.declare", {
            "vhost": vhost, "name": name, "passive": False,
            "durable": _flag(body, "durable", True), "exclusive": False,
            "auto_delete": _flag(body, "auto_delete", False),
            "arguments": body.get("arguments") or {}, "owner": "", "user": user})
        return web.Response(status=204 if existed else 201)

    async def delete_queue(self, request):
        user, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = request.match_info["name"]
        _find_queue(state, vhost, name)
        AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "queue", name)
        await self.ask("queue.delete", {"vhost": vhost, "name": name,
                                        "if_unused": request.query.get("if-unused") == "true",
                                        "if_empty": request.query.get("if-empty") == "true",
                                        "owner": ""})
        return web.Response(status=204)

    async def queue_bindings(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        name = request.match_info["name"]
        _find_queue(state, vhost, name)
        return self._reply(request, [
            api.binding_json(b) for b in _bindings(state)
            if b[0] == vhost and b[2] == "queue" and b[3] == name])

    # --- bindings -----------------------------------------------------------------------------
    async def bindings(self, request):
        _, _, state, visible = await self._state(request)
        vhost = self._vhost(request, state, visible)
        return self._reply(request, [api.binding_json(b) for b in _bindings(state)
                                     if b[0] in visible and (vhost is None or b[0] == vhost)])

    def _ends(self, request, state, visible):
        vhost = self._vhost(request, state, visible)
        kind = "queue" if request.match_info["kind"] == "q" else "exchange"
        return (vhost, _exchange_name(request.match_info["source"]), kind,
                request.match_info["dest"])

    async def binding_list(self, request):
        _, _, state, visible = await self._state(request)
        vhost, source, kind, dest = self._ends(request, state, visible)
        return self._reply(request, [api.binding_json(b) for b in _bindings(state)
                                     if b[:4] == [vhost, source, kind, dest]])

    async def post_binding(self, request):
        user, _, state, visible = await self._state(request)
        vhost, source, kind, dest = self._ends(request, state, visible)
        body = await self._body(request)
        auth = AuthDB.from_state(state["auth"])
        auth.require(user, vhost, "write", kind, dest)
        auth.require(user, vhost, "read", "exchange", source)
        rk = body.get("routing_key", "")
        args = body.get("arguments") or {}
        await self.ask("bind", {"vhost": vhost, "source": source, "kind": kind, "dest": dest,
                                "routing_key": rk, "arguments": args, "owner": ""})
        location = (f"{request.path}/{api.properties_key(rk, args)}")
        return web.Response(status=201, headers={"Location": location})

    def _find_binding(self, request, state, visible):
        vhost, source, kind, dest = self._ends(request, state, visible)
        # the path arrives unquoted once: RabbitMQ's UI and rabbitmqadmin quote the properties
        # key ("ui.%23" sent as "ui.%2523"), which then is the key itself; a client that sent
        # the key as it is ("ui.%23") is unquoted to the routing key's characters ("ui.#")
        given = request.match_info["props"]
        ends = [b for b in _bindings(state) if b[:4] == [vhost, source, kind, dest]]
        for wanted in (given, quote(given, safe="~")):  # RabbitMQ's form first
            for b in ends:
                if api.properties_key(b[4], b[5]) == wanted:
                    return b
        raise api.not_found()

    async def binding(self, request):
        _, _, state, visible = await self._state(request)
        return web.json_response(api.binding_json(self._find_binding(request, state, visible)))

    async def delete_binding(self, request):
        user, _, state, visible = await self._state(request)
        b = self._find_binding(request, state, visible)
        vhost, source, kind, dest, rk, args = b
        auth = AuthDB.from_state(state["auth"])
        auth.require(user, vhost, "write", kind, dest)
        auth.require(user, vhost, "read", "exchange", source)
        await self.ask("unbind", {"vhost": vhost, "source": source, "kind": kind,
                                  "dest": dest, "routing_key": rk, "arguments": args,
                                  "owner": ""})
        return web.Response(status=204)

    # --- policies -----------------------------------------------------------------------------
    @staticmethod
    def _operator(request) -> bool:
        """/api/operator-policies (administrator) or /api/policies (policymaker)."""
        return request.path.startswith("/api/operator-policies")

    def _policy_rights(self, request):
        return api.is_admin if self._operator(request) else api.is_policymaker

    def _policy_table(self, request, state) -> list:
        return state["operator_policies" if self._operator(request) else "policies"]

    async def policies(self, request):
        need = api.is_admin if self._operator(request) else None
        _, _, state, visible = await self._state(request, need)
        vhost = self._vhost(request, state, visible)
        return self._reply(request, [api.policy_json(p)
                                     for p in self._policy_table(request, state)
                                     if p["vhost"] in visible and
                                     (vhost is None or p["vhost"] == vhost)])

    async def policy(self, request):
        need = api.is_admin if self._operator(request) else None
        _, _, state, visible = await self._state(request, need)
        vhost = self._vhost(request, state, visible)
        for p in self._policy_table(request, state):
            if p["vhost"] == vhost and p["name"] == request.match_info["name"]:
                return web.json_response(api.policy_json(p))
        raise api.not_found()

    async def put_policy(self, request):
        _, _, state, visible = await self._state(request, self._policy_rights(request))
        vhost = self._vhost(request, state, visible)
        name = request.match_info["name"]
        body = await self._body(request)
        for key in ("pattern", "definition"):
            if key not in body:
                raise api.bad_request(f"key_missing: {key}")
        existed = any(p["vhost"] == vhost and p["name"] == name
                      for p in self._policy_table(request, state))
        await self.ask("policy", {"method": "set", "vhost": vhost, "name": name,
                                  "pattern": body["pattern"],
                                  "definition": body["definition"],
                                  "priority": int(body.get("priority", 0)),
                                  "apply_to": body.get("apply-to", "all"),
                                  "operator": self._operator(request)})
        return web.Response(status=204 if existed else 201)

    async def delete_policy(self, request):
        _, _, state, visible = await self._state(request, self._policy_rights(request))
        vhost = self._vhost(request, state, visible)
        name = request.match_info["name"]
        if not any(p["vhost"] == vhost and p["name"] == name
                   for p in self._policy_table(request, state)):
            raise api.not_found()
        await self.ask("policy", {"method": "clear", "vhost": vhost, "name": name,
                                  "operator": self._operator(request)})
        return web.Response(status=204)

    # --- vhost and user limits (rabbit_mgmt_wm_limit[s], rabbit_mgmt_wm_user_limit[s]) --------
    @staticmethod
    def _limit_scope(request) -> str:
        return "vhost" if request.path.startswith("/api/vhost-limits") else "user"

    @staticmethod
    def _known(state, scope: str, name: str) -> bool:
        table = state["auth"]["vhosts" if scope == "vhost" else "users"]
        return name in {x["name"] for x in table}

    async def limits(self, request):
        """A list of {vhost|user, value}; a vhost's or user's own (404 if it does not
        exist) is [] without limits, as RabbitMQ's."""
        scope = self._limit_scope(request)
        need = api.is_admin if scope == "user" else None
        _, _, state, visible = await self._state(request, need)
        name = request.match_info.get("name")
        if name is not None and not self._known(state, scope, name):
            raise api.not_found()
        rows = [{scope: n, "value": v} for s, n, v in state["limits"]
                if s == scope and v and (name is None or n == name) and
                (scope == "user" or n in visible)]
        return self._reply(request, rows)

    async def put_limit(self, request):
        scope = self._limit_scope(request)
        _, _, state, _ = await self._state(request, api.is_admin)
        name, key = request.match_info["name"], request.match_info["limit"]
        if not self._known(state, scope, name):
            raise api.not_found(f"{scope}_not_found")
        body = await self._body(request)
        if "value" not in body:
            raise api.bad_request("key_missing: value")
        current = next((v for s, n, v in state["limits"] if s == scope and n == name), {})
        await self.ask("limits", {"method": "set", "scope": scope, "name": name,
                                  "value": dict(current, **{key: body["value"]})})
        return web.Response(status=204)

    async def delete_limit(self, request):
        """Clears one limit; one that is not set: nothing to do, 204 as RabbitMQ's
        clear_limit answers."""
        scope = self._limit_scope(request)
        _, _, state, _ = await self._state(request, api.is_admin)
        name, key = request.match_info["name"], request.match_info["limit"]
        current = next((v for s, n, v in state["limits"] if s == scope and n == name), None)
        if current is None or key not in current:
            return web.Response(status=204)
        rest = {k: v for k, v in current.items() if k != key}
        await self.ask("limits", {"method": "set" if rest else "clear", "scope": scope,
                                  "name": name, **({"value": rest} if rest else {})})
        return web.Response(status=204)


def _require_type(request, *accepted: str) -> None:
    """415, as cowboy_rest answers a body of a type the resource does not accept."""
    if request.content_type not in accepted:
        given = request.headers.get("Content-Type", "no Content-Type")
        raise ApiError(415, "unsupported_media_type",
                       f"the body must be {' or '.join(accepted)}, not {given}")


def _origin(url: str, scheme: str = "") -> tuple:
    """(host, port) of an Origin, a Referer or (as //host:port) a Host header, the port the
    scheme's default when none is given; () when there is none (Origin "null")."""
    try:
        parts = urlsplit(url, scheme=scheme)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return ()
    return (parts.hostname, port) if parts.hostname else ()


def _flag(body: dict, key: str, default: bool) -> bool:
    """A boolean field: JSON true/false, or "true"/"false" as rabbitmqadmin sends them."""
    value = body.get(key, default)
    if value in (True, "true"):
        return True
    if value in (False, "false"):
        return False
    raise api.bad_request(f"{key} must be true or false, not {value!r}")


def _exchange_name(name: str) -> str:
    """The default exchange is `amq.default` in the API's paths."""
    return "" if name == "amq.default" else name


def _find_queue(state, vhost, name) -> dict:
    for q in state["queues"]:
        if q["vhost"] == vhost and q["name"] == name:
            return q
    raise api.not_found()


def _stats(state) -> dict:
    """(vhost, queue) -> message_stats, from the node's statistics table."""
    return {(v, n): s for v, n, s in state.get("queue_stats", ())}


def _depth(state) -> dict:
    """(vhost, queue) -> the rates of change of its depth (queue_stats.depth_rates)."""
    return {(v, n): d for v, n, d in state.get("queue_depth_rates", ())}


def _disk(state) -> dict:
    """(vhost, queue) -> disk_reads / disk_writes with their rates (queue_stats.disk_stats)."""
    return {(v, n): d for v, n, d in state.get("queue_disk", ())}


def _counts(state) -> dict:
    """The cluster's counts: path tuple -> (count, rate) (metadata `_cluster_counts`)."""
    return {tuple(path): (n, rate) for path, n, rate in state.get("counts", ())}


def _use(state) -> dict:
    """(vhost, queue) -> consumer_capacity, consumer_utilisation and idle_since (ms) from its
    last sample (queue_stats.StatsTable.consumer_use, idle_since)."""
    return {(v, n): u for v, n, u in state.get("queue_use", ())}


def _consumers_by_queue(state) -> dict:
    """(vhost, queue) -> its consumers, as /api/consumers lists them."""
    out: dict = {}
    for c in state.get("connections", ()):
        for ch in c["channel_list"]:
            for cons in ch["consumers"]:
                out.setdefault((cons["queue"]["vhost"], cons["queue"]["name"]), []).append(cons)
    return out


def _bindings(state) -> list:
    return api.default_bindings(state["queues"]) + [list(b) for b in state["bindings"]]


def _refuse_bad_patterns(*patterns) -> None:
    """400, as RabbitMQ's management answers a permission whose regex does not compile (the
    metadata actor's refusal would come back as 404)."""
    for p in patterns:
        error = pattern_error(p) if isinstance(p, str) else "a permission pattern is a string"
        if error:
            raise api.bad_request(error)
