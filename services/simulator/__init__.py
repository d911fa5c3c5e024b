"""Cascade simulator service (``python -m services.simulator``)."""

from __future__ import annotations

from cascade.platform.runtime import Service, ServiceContext
from services.simulator.service import SimulatorService


async def start(ctx: ServiceContext, *, once: bool = False, idle_timeout_s: float = 60.0,
                worker_label: str = "") -> None:
    """Wire the simulator: the sim-jobs work queue.

    ``once``: take exactly one job (waiting at most ``idle_timeout_s``), then stop.
    """
    await SimulatorService(ctx, once=once, idle_timeout_s=idle_timeout_s,
                           worker_label=worker_label).start()


SERVICE = Service("simulator", start, uses_storage=True)
NAME = SERVICE.name
run = SERVICE.run

__all__ = ["NAME", "SERVICE", "run"]
