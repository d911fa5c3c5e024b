"""Cascade api service (``python -m services.api``): REST, progress streams, /v1, web UI."""

from __future__ import annotations

from aiohttp import web

from cascade.platform.runtime import Service, ServiceContext
from services.api.app import create_app

NAME = "api"


async def start_http(ctx: ServiceContext, app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve ``app`` on ``host:port``; the site is cleaned up first when the stack closes."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=ctx.settings.drain_timeout_s)
    await runner.setup()
    ctx.stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, host, port).start()
    return runner


async def start(ctx: ServiceContext) -> None:
    """Wire the api: the HTTP application (REST, progress streams, /v1, web UI)."""
    settings = ctx.settings
    app = create_app(
        settings, bus=ctx.bus, storage=ctx.require_storage(), registry=ctx.registry,
        service_status=ctx.status,
    )
    await start_http(ctx, app, settings.http_host, settings.http_port)
    if not settings.api_tokens:
        ctx.log.warning("CASCADE_API_TOKENS is empty: write requests are not authenticated")
    ctx.log.info("api listening", url=f"http://{settings.http_host}:{settings.http_port}")


SERVICE = Service(NAME, start, uses_storage=True)
run = SERVICE.run


__all__ = ["NAME", "SERVICE", "create_app", "run", "start_http"]
