"""Ingest: turns raw trace objects landing in S3 into trace events and prepare jobs.

Consumes S3 notifications (``cascade.s3.events``), api upload callbacks and periodic
reconcile listings; publishes ``FileReceived`` / ``TraceSealed`` events and
``PrepareJob`` work items, idempotently (de-duplicated by key + ETag).
"""

from __future__ import annotations

from typing import Any

from cascade.runtime import ServiceContext


class IngestService:
    """The ingest service's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack), so tests can pass their own.
    """

    name = "ingest"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.storage = ctx.storage
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="ingest")
        self.started = False

    async def start(self) -> None:
        """Register this service's consumers/workers (their stops go on ``ctx.stack``)."""
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "ingest", "started": self.started}
