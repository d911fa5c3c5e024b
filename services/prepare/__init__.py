"""Cascade prepare service (``python -m services.prepare``)."""

from __future__ import annotations

from cascade.platform.runtime import Service, ServiceContext
from services.prepare.service import PrepareService


async def start(ctx: ServiceContext) -> None:
    """Wire the prepare service: the prepare/bundle work queue."""
    await PrepareService(ctx).start()


SERVICE = Service("prepare", start, uses_storage=True)
NAME = SERVICE.name
run = SERVICE.run

__all__ = ["NAME", "SERVICE", "run"]
