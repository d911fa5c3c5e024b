"""Cascade ingest service (``python -m services.ingest``)."""

from __future__ import annotations

from cascade.platform.runtime import Service, ServiceContext
from services.ingest.service import IngestService


async def start(ctx: ServiceContext) -> None:
    """Wire the ingest service: S3 upload events and trace events in, KV trace state out."""
    await IngestService(ctx).start()


SERVICE = Service("ingest", start, uses_storage=True)
NAME = SERVICE.name
run = SERVICE.run

__all__ = ["NAME", "SERVICE", "run"]
