"""The baseline: real, unprofiled timings of the workload, uploaded as ``baseline.json``.

Ingest copies :meth:`Baseline.record_values` into the trace record's ``baseline``
(``e2e_ms`` is what a run's predictions are compared against).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated

import msgspec

from cascade.errors import ValidationError
from cascade.traces.files import BASELINE_NAME

__all__ = ["BASELINE_NAME", "Baseline", "read_baseline", "steps_from_marks", "write_baseline"]


class Baseline(msgspec.Struct, frozen=True, kw_only=True):
    """Measured end-to-end and per-step timings of repeated unprofiled runs."""

    format: str = "cascade-baseline/1"
    """Format tag of this file."""
    workload: str = ""
    """What ran (the command line or the recipe's description)."""
    device: str = ""
    """Device the timings were measured on (driver name, or ``cpu``)."""
    warmup: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Runs done first and not counted."""
    e2e_ms: list[float] = []
    """End-to-end time of every counted run, in milliseconds."""
    step_ms: list[list[float]] = []
    """Per counted run, the time of each step in milliseconds (empty when no steps were marked)."""
    tokens: int = 0
    """Tokens generated per run (recipes that generate text)."""

    def summary(self) -> dict[str, float]:
        """mean / p50 / min of e2e and the mean step time (ms)."""
        if not self.e2e_ms:
            return {}
        out = {
            "e2e_ms": statistics.fmean(self.e2e_ms),
            "e2e_ms_p50": statistics.median(self.e2e_ms),
            "e2e_ms_min": min(self.e2e_ms),
            "repeats": float(len(self.e2e_ms)),
        }
        steps = [s for run in self.step_ms for s in run]
        if steps:
            out["step_mean_ms"] = statistics.fmean(steps)
            out["steps_per_run"] = len(steps) / len(self.step_ms)
        return out

    def record_values(self) -> dict[str, float]:
        """The values a trace record's ``baseline`` gets (``e2e_ms`` and friends)."""
        return self.summary()


def write_baseline(path: Path, baseline: Baseline) -> Path:
    """Write ``baseline`` as JSON (atomically)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(baseline), indent=2))
    tmp.replace(path)
    return path


def read_baseline(data: bytes, source: str = BASELINE_NAME) -> Baseline:
    """Decode a baseline file; :class:`ValidationError` names ``source`` and what is wrong."""
    try:
        return msgspec.json.decode(data, type=Baseline)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"{source} is not a Cascade baseline: {exc}", field=source) from None
    except msgspec.DecodeError as exc:
        raise ValidationError(f"{source} is not JSON: {exc}", field=source) from None


def steps_from_marks(start_ns: int, marks_ns: list[int]) -> list[float]:
    """Step times (ms) from the monotonic time a run started and its :func:`step` marks."""
    out = []
    prev = start_ns
    for t in marks_ns:
        out.append((t - prev) / 1e6)
        prev = t
    return out
