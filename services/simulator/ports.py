"""The seam between the simulator's job handling and a simulation path (such as Accel-Sim).

:class:`~services.simulator.service.SimulatorService` handles a job up to the loaded inputs,
then hands it to the :data:`SimulationPath` registered for the job's model (the built-in
models' chunked prediction otherwise). A path sees only :class:`SimulationPorts`: storage,
settings, the worker's name, publishing a sim event and asking whether the run was
cancelled. Neither side imports the other; the wiring (``services.simulator.start``) passes
the paths in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cascade.platform.messages.jobs import SimJob
from cascade.platform.state import TraceRecord


class SimulationPorts(Protocol):
    """What a simulation path may use of the service that runs it."""

    @property
    def storage(self) -> Any:
        """The S3 storage results are written to."""

    @property
    def settings(self) -> Any:
        """The service's :class:`~cascade.platform.settings.Settings`."""

    @property
    def worker(self) -> str:
        """This simulator process's name (recorded in results)."""

    async def publish(self, job: SimJob, kind: str, message: Any, msg_id: str | None = None) -> None:
        """Publish a sim event (``started``, ``progress``, ``completed`` ...) for ``job``."""

    async def cancelled(self, job: SimJob) -> bool:
        """True when the job's run (or sim) was cancelled."""


@dataclass(frozen=True)
class SimulationRequest:
    """One job handed to a simulation path."""

    job: SimJob
    trace: TraceRecord
    inputs: Any
    """:class:`services.simulator.engine.SimulationInputs` of the job."""
    attempt: int
    t0: float
    """``time.perf_counter()`` when the service took the job (the sim timeout counts from it)."""
    log: Any


SimulationPath = Callable[[SimulationPorts, SimulationRequest], Awaitable[None]]
"""Simulates one job to its published result (or raises)."""

SimulationPaths = Mapping[str, SimulationPath]
"""Model name -> the path that simulates jobs of that model."""
