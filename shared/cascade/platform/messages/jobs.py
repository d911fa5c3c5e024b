"""Work-queue jobs (stream ``CASCADE_JOBS``: ``cascade.jobs.prepare``, ``cascade.jobs.sim``)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from cascade.engine.models import AutoConfig
from cascade.engine.registry import model_name
from cascade.platform.messages.base import Codec, Message
from cascade.platform.messages.run import ConfigRef
from cascade.runs.plan import ModelConfig, ReplayOptions


class PrepareJob(Message, frozen=True, kw_only=True, tag="job.prepare.v1"):
    """Prepare one raw trace object (post-process a kernel trace, parse a timeline...)."""

    trace_id: str
    key: str
    """S3 key of the raw object."""
    etag: str
    """ETag seen when the job was queued (the job id is derived from key + etag)."""
    size: Annotated[int, msgspec.Meta(ge=0)]
    """Object size in bytes."""


class BundleJob(Message, frozen=True, kw_only=True, tag="job.bundle.v1"):
    """Assemble a trace's bundle once every expected kernel is prepared (idempotent)."""

    trace_id: str
    reason: str = ""
    """Why the job was queued (last kernel prepared, seal, reconcile), for logs."""


class SimJob(Message, frozen=True, kw_only=True, tag="job.sim.v2"):
    """Simulate one (configuration, replica) of a run."""

    run_id: str
    sim_id: str
    trace_id: str
    bundle_key: str
    """S3 prefix of the prepared bundle."""
    config: ConfigRef
    """GPU spec id or inline custom spec."""
    replica: Annotated[int, msgspec.Meta(ge=0)] = 0
    model: ModelConfig = AutoConfig()  # type: ignore[valid-type]
    """The kernel model and its settings (tagged by the model's name)."""
    replay: ReplayOptions = ReplayOptions()
    """How the simulator replays the timeline."""

    @property
    def model_name(self) -> str:
        """The kernel model's registered name."""
        return model_name(self.model)


Job = PrepareJob | SimJob | BundleJob
"""Tagged union of every job."""

JOB_CODEC: Codec[Job] = Codec(Job)


def encode_job(job: Job) -> bytes:
    """JSON bytes of a job."""
    return JOB_CODEC.encode(job)


def decode_job(data: bytes) -> Job:
    """Typed job from JSON bytes."""
    return JOB_CODEC.decode(data, what="job")
