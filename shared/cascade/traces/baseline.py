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

__all__ = ["BASELINE_NAME", "Baseline", "ServingLoad", "read_baseline", "steps_from_marks", "write_baseline"]


class ServingLoad(msgspec.Struct, frozen=True, kw_only=True):
    """A closed-loop serving load and what each of its requests measured, client-side."""

    concurrency: Annotated[int, msgspec.Meta(ge=1)]
    """Clients, each sending its next request when its last one finished."""
    prompt_tokens: Annotated[int, msgspec.Meta(ge=1)]
    """Input tokens of every request (ISL)."""
    output_tokens: Annotated[int, msgspec.Meta(ge=1)]
    """Output tokens of every request (OSL; generated to the end, EOS ignored)."""
    requests: Annotated[int, msgspec.Meta(ge=1)]
    """Requests sent (the timed ones; warm-up requests are not counted)."""
    tensor_parallel: Annotated[int, msgspec.Meta(ge=1)] = 1
    """Ranks the server ran its engine on (one trace file each)."""
    ttft_ms: list[float] = []
    """Time to first token of every request, ms."""
    tpot_ms: list[float] = []
    """Time per output token after the first of every request, ms ((e2e - ttft) / (n - 1))."""
    request_ms: list[float] = []
    """End-to-end latency of every request, ms."""
    duration_s: float = 0.0
    """Wall time of the whole load, seconds."""

    def summary(self) -> dict[str, float]:
        """TTFT / TPOT / request latency mean and median (ms), throughput and the load."""
        out: dict[str, float] = {
            "concurrency": float(self.concurrency), "prompt_tokens": float(self.prompt_tokens),
            "output_tokens": float(self.output_tokens), "requests": float(self.requests),
            "tensor_parallel": float(self.tensor_parallel),
        }
        for key, values in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms),
                            ("request_ms", self.request_ms)):
            if values:
                out[key] = statistics.fmean(values)
                out[f"{key}_p50"] = statistics.median(values)
        if self.duration_s > 0 and self.request_ms:
            out["output_tokens_per_s"] = len(self.request_ms) * self.output_tokens / self.duration_s
        return out


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
    serving: ServingLoad | None = None
    """A served workload (``cascade profile vllm``): the load driven and the per-request
    latencies measured client-side (None for a command run end to end)."""

    def summary(self) -> dict[str, float]:
        """mean / p50 / min of e2e and the mean step time (ms); for a served workload, the
        TTFT / TPOT mean and median (ms) and the load."""
        out: dict[str, float] = {}
        if self.e2e_ms:
            out.update({
                "e2e_ms": statistics.fmean(self.e2e_ms),
                "e2e_ms_p50": statistics.median(self.e2e_ms),
                "e2e_ms_min": min(self.e2e_ms),
                "repeats": float(len(self.e2e_ms)),
            })
            steps = [s for run in self.step_ms for s in run]
            if steps:
                out["step_mean_ms"] = statistics.fmean(steps)
                out["steps_per_run"] = len(steps) / len(self.step_ms)
        if self.serving is not None:
            out.update(self.serving.summary())
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
