"""Run events (``cascade.run.requested`` and ``cascade.run.{run_id}.{kind}``)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from cascade.engine.models import AutoConfig
from cascade.platform.messages.base import Codec, Message
from cascade.runs.plan import ModelConfig, ReplayOptions

ConfigRef = str | dict[str, Any]
"""A GPU spec id (``"SM90_H200"``) or a custom spec given inline as a dict."""


class _RunMessage(Message, frozen=True, kw_only=True):
    run_id: str
    """Id of the run this event is about."""


class RunRequested(_RunMessage, frozen=True, kw_only=True, tag="run.requested.v2"):
    """A user asked to simulate a trace on one or more configurations."""

    trace_id: str
    """Trace to simulate."""
    configs: Annotated[list[ConfigRef], msgspec.Meta(min_length=1)]
    """GPU configurations to simulate (spec ids or inline specs)."""
    replicas: Annotated[int, msgspec.Meta(ge=1)] = 1
    """Independent replicas per configuration."""
    model: ModelConfig = AutoConfig()  # type: ignore[valid-type]
    """The kernel model and its settings (tagged by the model's name)."""
    replay: ReplayOptions = ReplayOptions()
    """How simulators replay the timeline."""
    name: str = ""
    """Human label of the run."""


class RunCancelRequested(_RunMessage, frozen=True, kw_only=True, tag="run.cancel.v1"):
    """A user asked to cancel the run."""

    reason: str = ""


class RunStateChanged(_RunMessage, frozen=True, kw_only=True, tag="run.state.v1"):
    """The run moved to a new state (queued, running, completed, failed, cancelled)."""

    state: str
    previous: str | None = None
    reason: str = ""


class RunCompleted(_RunMessage, frozen=True, kw_only=True, tag="run.completed.v1"):
    """Every sim of the run finished (some may have failed)."""

    sims_completed: int = 0
    sims_failed: int = 0
    summary_key: str | None = None
    """S3 key of the run summary, if written."""


class RunFailed(_RunMessage, frozen=True, kw_only=True, tag="run.failed.v1"):
    """The run could not complete."""

    error: str


RunEvent = RunRequested | RunCancelRequested | RunStateChanged | RunCompleted | RunFailed
"""Tagged union of every run event."""

RUN_CODEC: Codec[RunEvent] = Codec(RunEvent)



def decode_run_event(data: bytes) -> RunEvent:
    """Typed run event from JSON bytes."""
    return RUN_CODEC.decode(data, what="run event")
