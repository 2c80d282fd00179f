"""The management listener's dispatch table (actors/management/server.py, routes.py and the
resource modules of actors/management/resources/)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import make_mocked_request

from actors.management import resources, server
from actors.management.routes import Route, Static

RESOURCES_DIR = Path(resources.__file__).parent
REGISTERED = server.API_RESOURCES + server.PROMETHEUS_RESOURCES


def _management():
    config = SimpleNamespace(management_host="127.0.0.1", host="127.0.0.1",
                             management_port=15672, prometheus_host=None, prometheus_port=15692,
                             tls_port=0, port=5672, cluster_address="", loopback_users=[],
                             data_dir="/nonexistent")
    return server.Management(config, "/nonexistent", "metadata")


def _routes(modules):
    return [(module, route) for module in modules for route in module.ROUTES
            if isinstance(route, Route)]


def _sample(path: str) -> str:
    """A URL the route's path matches: each {name} or {name:regex} filled in."""
    fills = {"kind": "q", "side": "source", "path": "report.html"}
    return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: fills.get(m.group(1), "x1"), path)


def test_every_resource_module_is_registered_once():
    names = sorted(p.stem for p in RESOURCES_DIR.glob("*.py") if p.stem != "__init__")
    registered = sorted(m.__name__.rsplit(".", 1)[1] for m in REGISTERED)
    assert registered == names


def test_every_resource_module_says_what_it_mirrors_and_owns():
    for module in REGISTERED:
        doc = module.__doc__ or ""
        assert "rabbit_" in doc or "Leveret's own" in doc, module.__name__
        assert module.ROUTES, module.__name__
        for route in module.ROUTES:
            assert isinstance(route, (Route, Static)), (module.__name__, route)
            if isinstance(route, Route):  # a handler of its own module, never another's
                assert route.handler.__module__ == module.__name__, (module.__name__, route)


def test_no_method_and_path_is_registered_twice():
    seen = {}
    for module, route in _routes(REGISTERED):
        key = (route.method, route.path)
        assert key not in seen, f"{key} in {seen.get(key)} and {module.__name__}"
        seen[key] = module.__name__


@pytest.mark.parametrize("listener", ["api", "prometheus"])
def test_every_route_reaches_its_own_handler(listener):
    """No route shadows another whatever the resources' order, and GET answers HEAD too."""
    mgmt = _management()
    app = mgmt.app() if listener == "api" else mgmt.prometheus_app()
    modules = server.API_RESOURCES if listener == "api" else server.PROMETHEUS_RESOURCES

    async def resolve(method, url):
        return await app.router.resolve(make_mocked_request(method, url, app=app))

    async def check():
        for _, route in _routes(modules):
            url = _sample(route.path)
            for method in (route.method, "HEAD") if route.method == "GET" else (route.method,):
                match = await resolve(method, url)
                assert getattr(match.handler, "__wrapped__", None) is route.handler, \
                    (method, url, match)
                assert match.route.resource.canonical == \
                    re.sub(r"\{(\w+):[^}]*\}", r"{\1}", route.path)  # (aiohttp drops the regex)

    asyncio.run(check())


def test_a_path_without_the_method_is_405_listing_those_it_has():
    app = _management().app()

    async def check():
        match = await app.router.resolve(make_mocked_request("PATCH", "/api/queues/v/q",
                                                             app=app))
        assert match.http_exception.status == 405
        assert set(match.http_exception.allowed_methods) == {"GET", "HEAD", "PUT", "DELETE"}

    asyncio.run(check())
