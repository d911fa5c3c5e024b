"""The api application factory.

:func:`create_app` builds the aiohttp application: typed ``AppKey`` state,
error/auth/metrics middlewares, and the route modules of :data:`ROUTES`. A route module
defines ``routes: web.RouteTableDef`` (handlers only: bodies in ``services.api.schemas``,
logic in the library or a small module of the api) and, where it needs app state, a sync
``setup(app)``; adding a route module means listing it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from cascade.platform.bus import Bus
from cascade.platform.runtime import new_registry
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from services.api.appkeys import (
    BUS,
    OPENAPI,
    REGISTRY,
    ROUTE_MODULES,
    SERVICE_STATUS,
    SETTINGS,
    STORAGE,
)
from services.api.http import MAX_BODY_BYTES, auth_middleware, error_middleware, metrics_middleware
from services.api.openapi import build_openapi, route_defs_of
from services.api.routes import configs, health, runs, scenarios, signin, traces, ui, v1


@dataclass(frozen=True)
class RouteModule:
    """One route module: its routes and what it installs on the app before they serve."""

    module: ModuleType
    routes: web.RouteTableDef
    setup: Callable[[web.Application], None] | None = None

    @property
    def name(self) -> str:
        """The module's short name: the routes' default OpenAPI tag and operation-id prefix."""
        return self.module.__name__.rsplit(".", 1)[-1]


#: Every route module, in the order its setup runs and its routes are added.
ROUTES: tuple[RouteModule, ...] = (
    RouteModule(configs, configs.routes, configs.setup),
    RouteModule(health, health.routes, health.setup),
    RouteModule(runs, runs.routes, runs.setup),
    RouteModule(scenarios, scenarios.routes, scenarios.setup),
    RouteModule(signin, signin.routes, signin.setup),
    RouteModule(traces, traces.routes, traces.setup),
    RouteModule(ui, ui.routes),
    RouteModule(v1, v1.routes, v1.setup),
)


def route_modules() -> list[ModuleType]:
    """The modules of :data:`ROUTES`, in order."""
    return [r.module for r in ROUTES]


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
    for route in ROUTES:
        app.add_routes(route.routes)
        defs.extend(route_defs_of(route.name, route.routes))
        if route.setup is not None:
            route.setup(app)
    app[ROUTE_MODULES] = [route.name for route in ROUTES]
    app[OPENAPI] = build_openapi(defs, auth_enabled=bool(settings.api_tokens))
    return app
