"""Trace events (subjects ``cascade.trace.{trace_id}.{kind}``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from cascade.platform.messages.base import Codec, Message

TraceKind = Literal["instructions", "timeline", "both"]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class _TraceMessage(Message, frozen=True, kw_only=True):
    trace_id: str
    """Id of the trace this event is about."""


class TraceCreated(_TraceMessage, frozen=True, kw_only=True, tag="trace.created.v1"):
    """A new trace was registered (upload session opened)."""

    name: str
    """Human name of the trace."""
    source_gpu: str
    """GPU spec id the trace was captured on."""
    kind: TraceKind = "instructions"
    """What the trace holds: instruction traces, a kernel timeline, or both."""
    workload: str = ""
    """Free-form workload description (model, batch, command line)."""
    expected_files: list[str] = msgspec.field(default_factory=list)
    """Files the profiler announced, when known up front."""
    expected_kernels: int | None = None
    """Kernel count the profiler announced, when known up front."""


class FileReceived(_TraceMessage, frozen=True, kw_only=True, tag="trace.file.v1"):
    """One raw file of the trace landed in S3 (``traces/{trace}/raw/...``)."""

    key: str
    """Full S3 object key."""
    etag: str
    """Object ETag (content identity for de-duplication)."""
    size: NonNegative
    """Object size in bytes."""
    file: str = ""
    """Path of the file relative to the trace's raw/ prefix."""
    kernel_index: int | None = None
    """Kernel number when the file is a per-kernel trace (kernel-N.trace[g][.xz])."""


class KernelPrepared(_TraceMessage, frozen=True, kw_only=True, tag="trace.kernel.v1"):
    """Prepare finished one kernel's features."""

    kernel_index: NonNegative
    """Kernel number within the trace."""
    name: str = ""
    """Kernel (function) name."""
    features_key: str | None = None
    """S3 key of the kernel's feature record, if stored separately."""
    instructions: NonNegative = 0
    """Dynamic warp instructions seen in the kernel trace."""
    bytes: NonNegative = 0
    """Size of the raw object prepared."""
    seconds: float = 0.0
    """Time prepare spent on it (read, parse, store)."""


class KernelFailed(_TraceMessage, frozen=True, kw_only=True, tag="trace.kernel-failed.v1"):
    """Prepare could not process one kernel file."""

    kernel_index: int | None = None
    """Kernel number, when known."""
    file: str = ""
    """File that failed (relative to raw/)."""
    error: str
    """What was wrong (names the file, line and expectation)."""


class TraceSealed(_TraceMessage, frozen=True, kw_only=True, tag="trace.sealed.v1"):
    """The profiler declared the upload complete."""

    expected_files: list[str] = msgspec.field(default_factory=list)
    """Every file that makes up the trace."""
    expected_kernels: int | None = None
    """Number of kernels traced."""


class BundleReady(_TraceMessage, frozen=True, kw_only=True, tag="trace.bundle.v1"):
    """A content-addressed simulation bundle was written (``bundles/{trace}/{hash}/``)."""

    bundle_key: str
    """S3 prefix of the bundle."""
    bundle_hash: str
    """Content hash of the bundle."""
    kernels: NonNegative = 0
    """Kernels in the bundle."""


class TraceStateChanged(_TraceMessage, frozen=True, kw_only=True, tag="trace.state.v1"):
    """The trace moved to a new state (receiving, preparing, ready, incomplete, failed)."""

    state: str
    """New state."""
    previous: str | None = None
    """Previous state, if any."""
    reason: str = ""
    """Why, for humans."""


class TraceFailed(_TraceMessage, frozen=True, kw_only=True, tag="trace.failed.v1"):
    """The trace cannot be prepared."""

    error: str
    """Main reason."""
    details: list[str] = msgspec.field(default_factory=list)
    """Further errors (per file / kernel)."""


class TraceDeleted(_TraceMessage, frozen=True, kw_only=True, tag="trace.deleted.v1"):
    """The trace and its objects were deleted."""


class UploadReported(_TraceMessage, frozen=True, kw_only=True, tag="trace.uploaded.v1"):
    """A client reported a finished upload to the api (checked there with a HEAD request)."""

    key: str
    """Full S3 object key."""
    etag: str
    """Object ETag as S3 reported it."""
    size: NonNegative
    """Object size in bytes."""
    file: str = ""
    """Path of the file relative to the trace's raw/ prefix."""


TraceEvent = (
    TraceCreated
    | FileReceived
    | KernelPrepared
    | KernelFailed
    | TraceSealed
    | BundleReady
    | TraceStateChanged
    | TraceFailed
    | TraceDeleted
    | UploadReported
)
"""Tagged union of every trace event."""

TRACE_CODEC: Codec[TraceEvent] = Codec(TraceEvent)



