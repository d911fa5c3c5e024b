"""Versioned bus messages: one module per family, each a tagged union.

Every message is a frozen, keyword-only msgspec Struct tagged by the ``type``
field (``"trace.created.v1"``...). New fields always get defaults; a change of
meaning gets a new tag. Decode once at the edge with a :class:`Codec`;
handlers receive typed objects and dispatch with ``match``.
"""

from __future__ import annotations

from cascade.platform.messages.base import Codec, Message, codec, encode
from cascade.platform.messages.jobs import Job, PrepareJob, SimJob
from cascade.platform.messages.run import (
    RunCancelRequested,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunRequested,
    RunStateChanged,
)
from cascade.platform.messages.sim import (
    SimCancelled,
    SimCompleted,
    SimEvent,
    SimFailed,
    SimProgress,
    SimQueued,
    SimStarted,
)
from cascade.platform.messages.trace import (
    BundleReady,
    FileReceived,
    KernelFailed,
    KernelPrepared,
    TraceCreated,
    TraceDeleted,
    TraceEvent,
    TraceFailed,
    TraceSealed,
    TraceStateChanged,
)

AnyMessage = TraceEvent | RunEvent | SimEvent | Job
"""Every message type on the bus (tags are unique across families)."""

__all__ = [
    "AnyMessage",
    "BundleReady",
    "Codec",
    "FileReceived",
    "Job",
    "KernelFailed",
    "KernelPrepared",
    "Message",
    "PrepareJob",
    "RunCancelRequested",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunRequested",
    "RunStateChanged",
    "SimCancelled",
    "SimCompleted",
    "SimEvent",
    "SimFailed",
    "SimJob",
    "SimProgress",
    "SimQueued",
    "SimStarted",
    "TraceCreated",
    "TraceDeleted",
    "TraceEvent",
    "TraceFailed",
    "TraceSealed",
    "TraceStateChanged",
    "codec",
    "encode",
]
