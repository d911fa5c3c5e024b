"""Prepare: post-processes raw kernel traces into simulation bundles.

Pulls ``PrepareJob`` items from the ``cascade.jobs.prepare`` work queue, writes
per-kernel features and content-addressed bundles to S3, and publishes
``KernelPrepared`` / ``KernelFailed`` / ``BundleReady`` events.
"""

from __future__ import annotations

from typing import Any

from cascade.runtime import ServiceContext


class PrepareService:
    """The prepare service's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack), so tests can pass their own.
    """

    name = "prepare"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.storage = ctx.storage
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="prepare")
        self.started = False

    async def start(self) -> None:
        """Register this service's consumers/workers (their stops go on ``ctx.stack``)."""
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "prepare", "started": self.started}
