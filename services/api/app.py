"""The api application factory.

:func:`create_app` builds the aiohttp application: typed ``AppKey`` state,
error/auth/metrics middlewares, and every route module found in
``services/api/routes/``. A route module defines ``routes: web.RouteTableDef``
and optionally ``setup(app)`` (sync: called now; async: run at startup; async
generator: added to ``cleanup_ctx``) and ``openapi: list[dict]`` extra
operations. Adding an endpoint means adding a module, never editing this file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

import services.api.routes as routes_pkg
from cascade.platform.bus import Bus
from cascade.platform.runtime import new_registry
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from services.api.http import MAX_BODY_BYTES, auth_middleware, error_middleware, metrics_middleware
from services.api.keys import (
    BUS,
    OPENAPI,
    REGISTRY,
    ROUTE_MODULES,
    SERVICE_STATUS,
    SETTINGS,
    STORAGE,
)
from services.api.openapi import build_openapi, route_defs_of


def route_modules() -> list[ModuleType]:
    """Every module of ``services.api.routes`` that defines ``routes`` (sorted by name)."""
    found = []
    for info in sorted(pkgutil.iter_modules(routes_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{routes_pkg.__name__}.{info.name}")
        if isinstance(getattr(module, "routes", None), web.RouteTableDef):
            found.append(module)
    return found


def create_app(
    settings: Settings,
    *,
    bus: Bus,
    storage: Storage,
    registry: CollectorRegistry | None = None,
    service_status: Callable[[], dict[str, Any]] | None = None,
    client_max_size: int = MAX_BODY_BYTES,
) -> web.Application:
    """Build the api application around the given collaborators.

    ``storage`` needs an ``async ping()`` for ``/readyz`` (normally a
    :class:`cascade.platform.storage.Storage`). ``registry`` is the Prometheus registry
    served at ``/metrics`` (a fresh one with the bus collector if omitted).
    """
    registry = registry if registry is not None else new_registry(bus, service="api")
    app = web.Application(
        middlewares=[metrics_middleware(registry), error_middleware, auth_middleware],
        client_max_size=client_max_size,
    )
    app[SETTINGS] = settings
    app[BUS] = bus
    app[STORAGE] = storage
    app[REGISTRY] = registry
    if service_status is not None:
        app[SERVICE_STATUS] = service_status

    defs: list[tuple[str, str, Any, str]] = []
    extra: list[dict[str, Any]] = []
    names: list[str] = []
    for module in route_modules():
        short = module.__name__.rsplit(".", 1)[-1]
        table: web.RouteTableDef = module.routes
        app.add_routes(table)
        defs.extend(route_defs_of(short, table))
        extra.extend(getattr(module, "openapi", []) or [])
        names.append(short)
        setup = getattr(module, "setup", None)
        if setup is None:
            continue
        if inspect.isasyncgenfunction(setup):
            app.cleanup_ctx.append(setup)
        elif inspect.iscoroutinefunction(setup):
            app.on_startup.append(setup)
        else:
            setup(app)
    app[ROUTE_MODULES] = names
    app[OPENAPI] = build_openapi(defs, extra, auth_enabled=bool(settings.api_tokens))
    return app
