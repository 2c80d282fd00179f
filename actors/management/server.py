"""The management listener: RabbitMQ's HTTP API (rabbitmq_management) on `management_port`.

Mirrors the part of rabbitmq_management that is not a resource: the listener
(``rabbit_mgmt_app``), the dispatch table's wiring (``rabbit_mgmt_dispatcher``, here
`API_RESOURCES` installed by routes.py) and the login every resource shares
(``rabbit_mgmt_util:is_authorized*``). Each resource family is a module of resources/ with
its own routes (rabbit_mgmt_wm_*).

An aiohttp application on its own thread and asyncio loop inside the node process. It holds no
state: each request asks the node's metadata actor over the same ipc:// socket leveretctl uses
(`actors.ctl.commands.ask_node`, run in a thread pool so the loop never blocks) and shapes the answer
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
import logging
import ssl
import threading
from urllib.parse import urlsplit

from aiohttp import web

from actors import metadata_ops as ops
from actors.connection import tls
from actors.core.errors import AMQPError
from actors.core.permissions import hashed_auth_call, loopback_refused
from actors.ctl.commands import ask_node
from actors.management import amqp, api, routes
from actors.management.api import ApiError
from actors.management.resources import api_analyses
from actors.management.resources import api_bindings
from actors.management.resources import api_census
from actors.management.resources import api_connections
from actors.management.resources import api_definitions
from actors.management.resources import api_exchanges
from actors.management.resources import api_health
from actors.management.resources import api_limits
from actors.management.resources import api_message_traces
from actors.management.resources import api_metrics
from actors.management.resources import api_overview
from actors.management.resources import api_parameters
from actors.management.resources import api_permissions
from actors.management.resources import api_policies
from actors.management.resources import api_queues
from actors.management.resources import api_shovels
from actors.management.resources import api_ui
from actors.management.resources import api_users
from actors.management.resources import api_vhosts
from actors.management.resources import api_whoami

log = logging.getLogger("leveret.management")

# --- the dispatch table: which resource modules each listener serves -------------------------
# Registering a resource: write its module under resources/ (a docstring naming the RabbitMQ
# module it mirrors, `ROUTES` of routes.Route with `async def handler(mgmt, request)`), then
# one line importing it above and one line adding it here; the order does not matter, no two
# routes match one request (docs/management.md, "Where the code is").
API_RESOURCES = (
    api_ui,  # / and /static: the web UI
    api_whoami,  # /api/whoami, /api/extensions
    api_overview,  # /api/overview, /api/cluster-name, /api/nodes
    api_health,  # /api/health/checks/*, /api/aliveness-test
    api_connections,  # /api/connections, /api/channels, /api/consumers
    api_exchanges,  # /api/exchanges (and publish)
    api_queues,  # /api/queues (and purge, get, actions)
    api_census,  # /api/leveret/census: a queue_census event on demand
    api_bindings,  # /api/bindings, an exchange's or a queue's bindings
    api_vhosts,  # /api/vhosts
    api_limits,  # /api/vhost-limits, /api/user-limits
    api_users,  # /api/users
    api_permissions,  # /api/permissions, /api/topic-permissions
    api_policies,  # /api/policies, /api/operator-policies
    api_parameters,  # /api/parameters, /api/global-parameters
    api_shovels,  # /api/shovels (rabbitmq_shovel_management)
    api_definitions,  # /api/definitions
    api_analyses,  # /api/leveret/analyses, /analyses (the lifecycle traces)
    api_message_traces,  # /api/traces: find a message in an analysis, follow its path
)
PROMETHEUS_RESOURCES = (
    api_metrics,  # /metrics, /metrics/per-object, /metrics/detailed
)

# the methods that change something: a page of another origin may not send them
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class NodeAsk:
    """The metadata actor's operations, answered or raised as ApiError."""

    def __init__(self, run_dir: str, metadata: str):
        self.run_dir, self.metadata = run_dir, metadata

    async def __call__(self, op: ops.Op, timeout_ms: int = 15000):
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, ask_node, self.run_dir, self.metadata, op,
                                           timeout_ms)
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
    """The two listeners and what every resource's handler is given as `mgmt`."""

    def __init__(self, config, run_dir: str, metadata: str):
        self.config = config  # the node's settings (listeners, loopback_users, data_dir)
        self.ask = NodeAsk(run_dir, metadata)  # the metadata actor's operations
        self.host = config.management_host or config.host  # the API's listener
        self.port = config.management_port
        self.prometheus_host = config.prometheus_host or config.host  # /metrics' listener
        self.prometheus_port = config.prometheus_port
        self.loop: asyncio.AbstractEventLoop | None = None  # the listeners' own loop
        self.runners: list[web.AppRunner] = []  # one per listener, cleaned up at stop
        self.thread: threading.Thread | None = None  # runs `loop`
        self.started = threading.Event()  # set once both listen, or failed to
        self.error: BaseException | None = None  # why they could not listen

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

    # --- the applications ---------------------------------------------------------------------
    def app(self) -> web.Application:
        """The management API and UI: every route of API_RESOURCES."""
        app = web.Application(middlewares=[self._errors, self._same_origin])
        routes.install(app, API_RESOURCES, self)
        return app

    def prometheus_app(self) -> web.Application:
        """rabbitmq_prometheus: no authentication, as RabbitMQ's."""
        app = web.Application(middlewares=[self._errors])
        routes.install(app, PROMETHEUS_RESOURCES, self)
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

    # --- who asks (rabbit_mgmt_util:is_authorized*): every resource's first step --------------
    async def login(self, request) -> tuple[str, list]:
        """(user, tags) of the request's basic auth: 401 unless the password is right, the
        user may log in from where it is, and it is tagged for management."""
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            raise ApiError(401, "not_authorised", "Not_Authorized")
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, "not_authorised", "Not_Authorized") from None
        try:
            tags = await self.ask(ops.MgmtLogin(user=user, password=password))
        except ApiError as e:
            if e.status >= 500:
                raise  # (the node did not answer: no verdict on the password, no 401)
            raise ApiError(401, "not_authorised", "Login failed") from None
        if loopback_refused(user, request.remote or "", self.config.loopback_users):
            log.warning("HTTP access denied: user '%s' can only log in via localhost (from %s)",
                        user, request.remote)
            raise ApiError(401, "not_authorised", "User can only log in via localhost")
        if not api.is_management(tags):
            raise ApiError(401, "not_authorised", "Not management user")
        return user, tags

    async def state(self, request, need=None):
        """(user, tags, definitions, vhosts the user may see); `need` a tag test."""
        user, tags = await self.login(request)
        if need is not None and not need(tags):
            raise ApiError(401, "not_authorised", "Not administrator user"
                           if need is api.is_admin else "Not monitor user"
                           if need is api.is_monitor else "Not policymaker user")
        state = await self.ask(ops.MgmtState())
        return user, tags, state, api.visible_vhosts(state, user, tags)

    # --- what several resources do ------------------------------------------------------------
    async def auth(self, method: str, args: list):
        """A users / vhosts / permissions change, as leveretctl sends it (a password hashed
        here: it never travels)."""
        method, args = hashed_auth_call(method, args)
        await self.ask(ops.Auth(method=method, args=args))

    async def offload(self, fn, *args):
        """fn(*args) on the thread pool: file reads never block the loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def target(self, request, vhost) -> tuple:
        """(host, port, user, password, vhost) to log in to this node over AMQP as the HTTP
        user (actors/management/amqp.py)."""
        user, _, password = base64.b64decode(request.headers["Authorization"][6:]) \
            .decode().partition(":")
        host = self.config.host if self.config.host not in ("0.0.0.0", "::", "") else \
            "127.0.0.1"
        return (host, self.config.port, user, password, vhost)

    async def amqp(self, fn, *args):
        """fn(*args) of actors/management/amqp.py on the thread pool, its AMQP refusal
        answered as rabbit_mgmt_util answers it."""
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


def _origin(url: str, scheme: str = "") -> tuple:
    """(host, port) of an Origin, a Referer or (as //host:port) a Host header, the port the
    scheme's default when none is given; () when there is none (Origin "null")."""
    try:
        parts = urlsplit(url, scheme=scheme)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return ()
    return (parts.hostname, port) if parts.hostname else ()
