"""What every kernel timeline importer shares: the :class:`Timeline` it returns, step markers,
host synchronisation calls and the last pass over the rows (re-based times, launch order).

Every importer (:mod:`cascade.traces.chrome`, :mod:`cascade.traces.nsys`,
:mod:`cascade.traces.cascadetimeline`; :mod:`cascade.traces.timeline` picks one by the file's
name) returns a :class:`KernelTable` (columns documented in ``README.md`` next to this file),
one row per kernel launch in launch order, ``kernel_id`` 1-based, timestamps in ns since the
first event of the file.

Step markers are ranges (``record_function`` / NVTX) named
``step:<kind>[:tokens=<n>][:context=<n>]`` (e.g. ``step:prefill:tokens=6``)
or PyTorch's ``ProfilerStep#N``; a kernel belongs to the innermost step range
that contains its host launch time (its device start when there is none).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from cascade.kerneltable import KernelTable

_STEP_RE = re.compile(r"^step:(?P<kind>[A-Za-z_]+)(?P<rest>(?::[a-z_]+=\d+)*)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
               "cudaMemcpy", "cuCtxSynchronize", "cuStreamSynchronize")


def is_sync(call: str) -> bool:
    """A runtime/driver call that waits for the device (``cudaMemcpyAsync`` does not)."""
    return call.startswith(_SYNC_CALLS) and "Async" not in call


class StepRange(msgspec.Struct, frozen=True):
    """A step marker range: [start, end) in ns, with its parsed name."""

    start: float
    end: float
    name: str


def parse_step_name(name: str) -> tuple[str, int, int] | None:
    """(kind, tokens, context) of a step marker name, None if it is not one.

    ``step:prefill:tokens=6:context=6`` -> ('prefill', 6, 6);
    ``ProfilerStep#3`` -> ('', -1, -1).
    """
    m = _STEP_RE.match(name)
    if m:
        fields = dict(p.split("=") for p in m.group("rest").split(":") if p)
        return m.group("kind"), int(fields.get("tokens", -1)), int(fields.get("context", -1))
    if _PROFILER_STEP.match(name):
        return "", -1, -1
    return None


def assign_steps(rows: list[dict[str, Any]], steps: list[StepRange]) -> None:
    """Give each row the innermost step range around its host launch (else device start) time:
    ``step`` (the range's index), ``step_kind``, ``step_tokens``, ``step_context``."""
    steps = sorted(steps, key=lambda s: (s.start, -s.end))
    starts = [s.start for s in steps]
    reach: list[float] = []  # reach[j]: the latest end among steps[0..j]
    for s in steps:
        reach.append(max(s.end, reach[-1]) if reach else s.end)
    parsed_names = [parse_step_name(s.name) for s in steps]
    for row in rows:
        t = row.get("host_launch_ns")
        if t is None or (isinstance(t, float) and math.isnan(t)):
            t = row.get("start_ns")
        if t is None or (isinstance(t, float) and math.isnan(t)):
            continue
        # innermost = the latest-starting range that contains t; ranges before j whose
        # reach ends at or before t cannot contain it, which bounds the backward scan
        j = bisect.bisect_right(starts, t) - 1
        best = -1
        while j >= 0 and reach[j] > t:
            if steps[j].start <= t < steps[j].end:
                best = j
                break
            j -= 1
        if best >= 0:
            parsed = parsed_names[best]
            assert parsed is not None
            row["step"] = best
            row["step_kind"], row["step_tokens"], row["step_context"] = parsed


def finish_rows(rows: list[dict[str, Any]], t0: float) -> KernelTable:
    """The rows as a table: times re-based to ``t0``, in launch order, ``kernel_id`` 1-based."""
    for row in rows:
        for key in ("host_launch_ns", "start_ns"):
            if key in row and row[key] is not None and not math.isnan(row[key]):
                row[key] = row[key] - t0
    def order(r: dict[str, Any]) -> tuple[float, float]:
        host = r.get("host_launch_ns", math.nan)
        start = r.get("start_ns", math.nan)
        return (start if math.isnan(host) else host, 0.0 if math.isnan(start) else start)

    rows.sort(key=order)
    for i, row in enumerate(rows, start=1):
        row["kernel_id"] = i
    return KernelTable.from_rows(rows)


def mark_syncs(rows: list[dict[str, Any]], sync_times: list[float]) -> None:
    """``sync_after`` 1 on the last launch before each host synchronisation call, else 0."""
    launches = sorted((r["host_launch_ns"], i) for i, r in enumerate(rows)
                      if not math.isnan(r.get("host_launch_ns", math.nan)))
    for r in rows:
        r.setdefault("sync_after", 0)
    times = [t for t, _ in launches]
    for s in sync_times:
        j = bisect.bisect_right(times, s) - 1
        if j >= 0:
            rows[launches[j][1]]["sync_after"] = 1


@dataclass(frozen=True, slots=True)
class Timeline:
    """An imported timeline: its kernel table and what the file says besides."""

    table: KernelTable
    device: str = ""
    """Name of the GPU the trace was recorded on (``deviceProperties`` in PyTorch traces,
    ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE`` in Nsight exports); '' if not named."""
    device_sm: int = -1
    """Its compute capability as ``major * 10 + minor`` (-1: unknown)."""
    warnings: tuple[str, ...] = ()
    """Things the importer skipped or could not link, one sentence each."""
    origin_ns: float = 0.0
    """The file's own timestamp (ns) that the table's times count from (its first event), so
    timelines of the same clock (the ranks of one server) can be put on one time axis."""


def number(v: Any) -> float | None:
    """``v`` as a finite float; None for anything else (a bool, a string, NaN, infinity)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def integer(v: Any, default: int = -1) -> int:
    """``v`` as an int (:func:`number`, truncated); ``default`` where it is none or beyond 2**62."""
    f = number(v)
    if f is None or abs(f) > 2**62:
        return default
    return int(f)
