"""Cascade prepare service (``python -m services.prepare``)."""

from __future__ import annotations

import asyncio

from cascade.platform.bus import Bus
from cascade.platform.runtime import ServiceContext, serve
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from services.prepare.service import PrepareService

NAME = "prepare"


async def run(
    settings: Settings,
    *,
    bus: Bus | None = None,
    storage: Storage | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the prepare service until ``stop`` is set or SIGTERM/SIGINT arrives."""

    async def setup(ctx: ServiceContext) -> None:
        service = PrepareService(ctx)
        await service.start()

    await serve(
        NAME, settings, setup, bus=bus, storage=storage, stop=stop, use_storage=True,
        install_signals=stop is None,
    )


__all__ = ["NAME", "run"]
