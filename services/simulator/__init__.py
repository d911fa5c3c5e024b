"""Cascade simulator service (``python -m services.simulator``)."""

from __future__ import annotations

from cascade.platform.accelsim import MODEL as ACCELSIM
from cascade.platform.runtime import Service, ServiceContext
from services.simulator.accelsim import simulate_accelsim
from services.simulator.service import SimulatorService


async def start(ctx: ServiceContext, *, once: bool = False, idle_timeout_s: float = 60.0,
                worker_label: str = "") -> None:
    """Wire the simulator: the sim-jobs work queue, and the ``accel-sim`` model's own
    simulation path (the real Accel-Sim).

    ``once``: take exactly one job (waiting at most ``idle_timeout_s``), then stop.
    """
    await SimulatorService(ctx, once=once, idle_timeout_s=idle_timeout_s,
                           worker_label=worker_label,
                           paths={ACCELSIM: simulate_accelsim}).start()


SERVICE = Service("simulator", start, uses_storage=True)
NAME = SERVICE.name
run = SERVICE.run

__all__ = ["NAME", "SERVICE", "run"]
