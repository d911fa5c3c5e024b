"""Cascade orchestrator service (``python -m services.orchestrator``)."""

from __future__ import annotations

from cascade.platform.runtime import Service, ServiceContext
from services.orchestrator.backends import Backend
from services.orchestrator.service import OrchestratorService


async def start(ctx: ServiceContext, *, backend: Backend | None = None) -> None:
    """Wire the orchestrator: run and sim events in, sim jobs and run state out.

    ``backend`` replaces the one named by ``settings.orchestrator_backend``.
    """
    await OrchestratorService(ctx, backend=backend).start()


SERVICE = Service("orchestrator", start, uses_storage=False)
NAME = SERVICE.name
run = SERVICE.run

__all__ = ["NAME", "SERVICE", "run"]
