"""Serving metrics with the names and definitions of ``vllm bench serve``.

- TTFT: first token time minus arrival.
- TPOT: (E2E latency - TTFT) / (output tokens - 1) per request; requests with a
  single output token are left out of the TPOT statistics (and count as 0 for
  goodput, as vLLM does).
- ITL: every gap between consecutive tokens of a request, pooled over requests.
- E2EL: last token time minus arrival.
- Statistics in ms: mean, median, std (population), p90, p95, p99 (linear
  interpolation, numpy's default, as vLLM uses).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Annotated

import msgspec
import numpy as np

from cascade.serving.sim import SimOutcome


class LatencyStats(msgspec.Struct, frozen=True, kw_only=True):
    """Summary of one latency, in milliseconds (NaN-free: empty samples give zeros)."""

    mean: float
    median: float
    std: float
    p90: float
    p95: float
    p99: float
    max: float
    count: int


def latency_stats(values_ms: np.ndarray) -> LatencyStats:
    v = np.asarray(values_ms, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return LatencyStats(mean=0.0, median=0.0, std=0.0, p90=0.0, p95=0.0, p99=0.0, max=0.0,
                            count=0)
    p90, p95, p99, med = np.percentile(v, [90, 95, 99, 50])
    return LatencyStats(mean=float(v.mean()), median=float(med), std=float(v.std()),
                        p90=float(p90), p95=float(p95), p99=float(p99), max=float(v.max()),
                        count=len(v))


_Ms = Annotated[float, msgspec.Meta(gt=0)]


class Slo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Per-request service-level objectives (ms); unset ones are not checked."""

    ttft_ms: _Ms | None = None
    """Time to first token."""
    tpot_ms: _Ms | None = None
    """Time per output token."""
    e2e_ms: _Ms | None = None
    """End-to-end latency."""
    attainment: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.99
    """Fraction of requests that must meet every SLO for a capacity search to pass."""

    def is_empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None


class RequestRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One request's simulated life (times in seconds from the scenario start)."""

    id: int
    replica: int
    arrived_at: float
    prompt_tokens: int
    output_tokens: int
    first_scheduled_at: float
    first_token_at: float
    finished_at: float
    ttft_ms: float
    tpot_ms: float | None
    e2el_ms: float
    queue_ms: float
    preemptions: int
    met_slo: bool | None = None


RECORD_FIELDS = tuple(RequestRecord.__struct_fields__)


def per_request(outcome: SimOutcome) -> dict[str, np.ndarray]:
    """Columnar per-request latencies in ms (tpot NaN for single-token outputs)."""
    arr = outcome.arrival_ns
    ttft = (outcome.first_token_ns - arr) / 1e6
    e2el = (outcome.finished_ns - arr) / 1e6
    out = outcome.output_tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
    queue = (outcome.first_scheduled_ns - arr) / 1e6
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el, "queue_ms": queue}


def slo_mask(lat: dict[str, np.ndarray], slo: Slo) -> np.ndarray:
    """True where a request meets every given SLO (TPOT 0 for single-token outputs)."""
    ok = np.ones(len(lat["ttft_ms"]), dtype=bool)
    if slo.ttft_ms is not None:
        ok &= lat["ttft_ms"] <= slo.ttft_ms
    if slo.tpot_ms is not None:
        ok &= np.nan_to_num(lat["tpot_ms"], nan=0.0) <= slo.tpot_ms
    if slo.e2e_ms is not None:
        ok &= lat["e2el_ms"] <= slo.e2e_ms
    return ok


def records(outcome: SimOutcome, slo: Slo | None = None) -> list[RequestRecord]:
    """Per-request records."""
    lat = per_request(outcome)
    met = slo_mask(lat, slo) if slo is not None and not slo.is_empty() else None
    out: list[RequestRecord] = []
    for i in range(len(outcome.arrival_ns)):
        tp = float(lat["tpot_ms"][i])
        out.append(RequestRecord(
            id=i, replica=int(outcome.replica[i]), arrived_at=float(outcome.arrival_ns[i]) / 1e9,
            prompt_tokens=int(outcome.prompt_tokens[i]),
            output_tokens=int(outcome.output_tokens[i]),
            first_scheduled_at=float(outcome.first_scheduled_ns[i]) / 1e9,
            first_token_at=float(outcome.first_token_ns[i]) / 1e9,
            finished_at=float(outcome.finished_ns[i]) / 1e9,
            ttft_ms=float(lat["ttft_ms"][i]), tpot_ms=None if math.isnan(tp) else tp,
            e2el_ms=float(lat["e2el_ms"][i]), queue_ms=float(lat["queue_ms"][i]),
            preemptions=int(outcome.preemptions[i]),
            met_slo=None if met is None else bool(met[i])))
    return out


def records_csv(recs: list[RequestRecord]) -> str:
    """Records as CSV text with a header row."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RECORD_FIELDS)
    for r in recs:
        w.writerow(["" if getattr(r, f) is None else getattr(r, f) for f in RECORD_FIELDS])
    return buf.getvalue()
