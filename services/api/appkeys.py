"""Typed ``web.AppKey`` state of the api application (no module globals)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry

from cascade.platform.bus import Bus
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage

SETTINGS = web.AppKey("settings", Settings)
BUS = web.AppKey("bus", Bus)
STORAGE = web.AppKey("storage", Storage)
"""The :class:`cascade.platform.storage.Storage`."""
REGISTRY = web.AppKey("registry", CollectorRegistry)
"""Prometheus registry served at ``/metrics``."""
OPENAPI = web.AppKey("openapi", dict)
"""The generated OpenAPI document (built once by the factory)."""
ROUTE_MODULES = web.AppKey("route_modules", list)
"""Names of the route modules the factory loaded."""
SERVICE_STATUS: web.AppKey[Callable[[], dict[str, Any]]] = web.AppKey("service_status")
"""``() -> dict``: this api instance's own status (from the runtime), if any."""


def get_storage(app: web.Application) -> Any:
    """The app's storage object."""
    return app[STORAGE]


class _Running(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


R = TypeVar("R", bound=_Running)


def install_running(app: web.Application, key: web.AppKey[R], make: Callable[[], R]) -> R:
    """``app[key]``, made by ``make()`` the first time (idempotent; from a route module's sync
    ``setup``): started with the app, stopped at cleanup, in the order installed."""
    if key in app:
        return app[key]
    obj = make()
    app[key] = obj

    async def ctx(_app: web.Application) -> AsyncIterator[None]:
        await obj.start()
        try:
            yield
        finally:
            await obj.stop()

    app.cleanup_ctx.append(ctx)
    return obj
