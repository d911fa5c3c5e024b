"""Timelines of the ranks of one multi-GPU workload (a vLLM server's tensor-parallel
workers, one PyTorch profiler trace each) as one kernel table.

Every rank keeps its own CUDA streams: a kernel's ``stream`` becomes
``rank * stride + stream`` (:func:`rank_stream_stride`), so ``stream // stride`` is the rank
and no two ranks share a stream id. The ranks' times go on one axis (their files share
the host clock), counted from the earliest rank's first event; rows are in launch order
and ``kernel_id`` is renumbered 1..n.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable
from cascade.traces.timelinecore import Timeline

__all__ = ["RANK_STREAM_STRIDE", "merge_rank_timelines", "rank_of_stream", "rank_stream_stride"]

#: The stream-id stride per rank when every rank's stream ids are below it (the usual case:
#: CUDA stream ids in profiler traces are small integers).
RANK_STREAM_STRIDE = 1000


def rank_stream_stride(timelines: Sequence[Timeline]) -> int:
    """The stride that keeps every rank's stream ids apart: :data:`RANK_STREAM_STRIDE`, or
    the next power of ten above the largest stream id when one is not below it."""
    top = 0
    for tl in timelines:
        if len(tl.table):
            top = max(top, int(np.max(tl.table["stream"])))
    stride = RANK_STREAM_STRIDE
    while top >= stride:
        stride *= 10
    return stride


def rank_of_stream(stream: int, stride: int = RANK_STREAM_STRIDE) -> int:
    """The rank a merged table's stream id belongs to."""
    return stream // stride


def merge_rank_timelines(timelines: Sequence[Timeline]) -> tuple[KernelTable, int]:
    """One kernel table of every rank's kernels (``timelines[r]`` is rank ``r``) and the
    stream stride used; see the module docstring."""
    if not timelines:
        raise ValidationError("no rank timelines to merge: the profiler wrote no trace files",
                              field="ranks")
    stride = rank_stream_stride(timelines)
    origin = min(tl.origin_ns for tl in timelines)
    parts: list[KernelTable] = []
    for rank, tl in enumerate(timelines):
        t = tl.table.take(np.arange(len(tl.table)))
        shift = tl.origin_ns - origin
        for col in ("host_launch_ns", "start_ns"):
            if t.has(col):
                t[col] = t[col] + shift
        streams = t["stream"]
        t["stream"] = rank * stride + np.where(streams < 0, 0, streams)
        parts.append(t)
    merged = KernelTable.concat(parts)
    host, start = merged["host_launch_ns"], merged["start_ns"]
    key = np.where(np.isnan(host), start, host)
    order = np.lexsort((np.nan_to_num(start, nan=math.inf), key))
    merged = merged.take(order)
    merged["kernel_id"] = np.arange(1, len(merged) + 1)
    return merged, stride
