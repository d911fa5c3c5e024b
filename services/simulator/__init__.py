"""Cascade simulator service (``python -m services.simulator``)."""

from __future__ import annotations

import asyncio

from cascade.platform.bus import Bus
from cascade.platform.runtime import ServiceContext, serve
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from services.simulator.service import SimulatorService

NAME = "simulator"


async def run(
    settings: Settings,
    *,
    bus: Bus | None = None,
    storage: Storage | None = None,
    stop: asyncio.Event | None = None,
    once: bool = False,
    idle_timeout_s: float = 60.0,
    worker_label: str = "",
) -> None:
    """Run the simulator until ``stop`` is set or SIGTERM/SIGINT arrives.

    ``once``: take exactly one job (waiting at most ``idle_timeout_s``), then return.
    """

    async def setup(ctx: ServiceContext) -> None:
        service = SimulatorService(ctx, once=once, idle_timeout_s=idle_timeout_s,
                                   worker_label=worker_label)
        await service.start()

    await serve(
        NAME, settings, setup, bus=bus, storage=storage, stop=stop, use_storage=True,
        install_signals=stop is None,
    )


__all__ = ["NAME", "run"]
