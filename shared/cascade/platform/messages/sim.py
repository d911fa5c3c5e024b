"""Simulation events (``cascade.sim.{sim_id}.{kind}``)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from cascade.platform.messages.base import Codec, Message

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class _SimMessage(Message, frozen=True, kw_only=True):
    sim_id: str
    """Id of the simulation (one configuration x replica of a run)."""
    run_id: str
    """Run the sim belongs to."""


class SimQueued(_SimMessage, frozen=True, kw_only=True, tag="sim.queued.v1"):
    """The orchestrator queued the sim's job."""

    config: str = ""
    """GPU spec id (or custom spec name)."""
    replica: int = 0


class SimStarted(_SimMessage, frozen=True, kw_only=True, tag="sim.started.v1"):
    """A simulator picked the job up."""

    attempt: Annotated[int, msgspec.Meta(ge=1)] = 1
    """Delivery attempt (1 = first)."""
    worker: str = ""
    """Identity of the simulator process / pod."""
    kernels_total: NonNegative = 0


class KernelSimulated(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel a cycle-level simulator (Accel-Sim) just finished, as it reported it."""

    name: str
    """Kernel (function) name."""
    uid: int = 0
    """Launch uid in the simulation (1-based)."""
    kernel_id: int | None = None
    """N of the trace's ``kernel-N`` file."""
    cycles: int = 0
    """Core cycles simulated (``gpu_sim_cycle``)."""
    instructions: int = 0
    """Instructions simulated (``gpu_sim_insn``)."""
    ipc: float = 0.0
    """Instructions per cycle (``gpu_ipc``)."""
    sim_rate_ips: float = 0.0
    """Simulation rate, instructions per wall second (``gpu_total_sim_rate``)."""
    duration_ns: float = 0.0
    """``cycles`` at the configuration's core clock."""
    occupancy_pct: float | None = None
    """Achieved occupancy, percent (``gpu_occupancy``), when printed."""


class SimProgress(_SimMessage, frozen=True, kw_only=True, tag="sim.progress.v1"):
    """Periodic progress of a running sim."""

    kernels_done: NonNegative
    kernels_total: NonNegative
    percent: Annotated[float, msgspec.Meta(ge=0, le=100)]
    simulated_ns: float = 0.0
    """Simulated GPU time so far, in nanoseconds."""
    eta_s: float | None = None
    """Estimated seconds to completion, when known."""
    attempt: Annotated[int, msgspec.Meta(ge=1)] = 1
    kernel: KernelSimulated | None = None
    """The kernel whose completion this event reports (cycle-level simulators only)."""


class SimCompleted(_SimMessage, frozen=True, kw_only=True, tag="sim.completed.v1"):
    """The sim finished; its result is in S3."""

    result_key: str
    """S3 key of the result (``results/{run}/{sim}/...``)."""
    simulated_ns: float = 0.0
    """Total simulated GPU time."""
    wall_s: float = 0.0
    """Wall-clock seconds the simulation took."""
    attempt: Annotated[int, msgspec.Meta(ge=1)] = 1
    predicted_e2e_ns: float | None = None
    """Predicted end-to-end time of the traced workload on this configuration."""
    model: str = ""
    """Kernel model the simulation used."""


class SimFailed(_SimMessage, frozen=True, kw_only=True, tag="sim.failed.v1"):
    """The sim failed for good (after its last attempt)."""

    error: str
    attempts: NonNegative = 1


class SimCancelled(_SimMessage, frozen=True, kw_only=True, tag="sim.cancelled.v1"):
    """The sim was cancelled on request."""

    reason: str = ""


SimEvent = SimQueued | SimStarted | SimProgress | SimCompleted | SimFailed | SimCancelled
"""Tagged union of every sim event."""

SIM_CODEC: Codec[SimEvent] = Codec(SimEvent)



def decode_sim_event(data: bytes) -> SimEvent:
    """Typed sim event from JSON bytes."""
    return SIM_CODEC.decode(data, what="sim event")
