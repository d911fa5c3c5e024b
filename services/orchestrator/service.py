"""Orchestrator: turns run requests into simulation jobs and tracks them.

Consumes ``RunRequested`` / ``RunCancelRequested`` and sim events; queues
``SimJob`` work items (``cascade.jobs.sim``) through the configured backend
(local processes, Kubernetes Jobs, or a simulator pool) and keeps run state in KV.
"""

from __future__ import annotations

from typing import Any

from cascade.runtime import ServiceContext


class OrchestratorService:
    """The orchestrator service's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack), so tests can pass their own.
    """

    name = "orchestrator"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.storage = ctx.storage
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="orchestrator")
        self.started = False

    async def start(self) -> None:
        """Register this service's consumers/workers (their stops go on ``ctx.stack``)."""
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "orchestrator", "started": self.started}
