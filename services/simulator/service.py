"""Simulator: runs one (configuration, replica) simulation per job.

Pulls ``SimJob`` items from ``cascade.jobs.sim``, downloads the bundle, runs the
performance model, streams ``SimProgress`` and finishes with ``SimCompleted``
(result in S3) or ``SimFailed``.
"""

from __future__ import annotations

from typing import Any

from cascade.runtime import ServiceContext


class SimulatorService:
    """The simulator service's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack), so tests can pass their own.
    """

    name = "simulator"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.storage = ctx.storage
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="simulator")
        self.started = False

    async def start(self) -> None:
        """Register this service's consumers/workers (their stops go on ``ctx.stack``)."""
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "simulator", "started": self.started}
