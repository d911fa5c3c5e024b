"""Cascade orchestrator service (``python -m services.orchestrator``)."""

from __future__ import annotations

import asyncio

from cascade.platform.bus import Bus
from cascade.platform.runtime import ServiceContext, serve
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from services.orchestrator.backends import Backend
from services.orchestrator.service import OrchestratorService

NAME = "orchestrator"


async def run(
    settings: Settings,
    *,
    bus: Bus | None = None,
    storage: Storage | None = None,
    stop: asyncio.Event | None = None,
    backend: Backend | None = None,
) -> None:
    """Run the orchestrator service until ``stop`` is set or SIGTERM/SIGINT arrives.

    ``backend`` replaces the one named by ``settings.orchestrator_backend``.
    """

    async def setup(ctx: ServiceContext) -> None:
        service = OrchestratorService(ctx, backend=backend)
        await service.start()

    await serve(
        NAME, settings, setup, bus=bus, storage=storage, stop=stop, use_storage=False,
        install_signals=stop is None,
    )


__all__ = ["NAME", "run"]
