"""Capacity search: the highest arrival rate, or the fewest replicas, meeting the SLOs.

A scenario "meets the SLOs" when the fraction of requests meeting every given
SLO is at least ``slo.attainment``. Every probe uses the scenario's seed, so
traffic at a higher rate is the same requests compressed in time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec

from cascade.errors import ValidationError
from cascade.serving.arrivals import rate_of, with_rate
from cascade.serving.kvcache import KVConfig
from cascade.serving.scenario import Scenario, ScenarioResult, resolve, run_scenario
from cascade.serving.stepmodel import StepTimeModel


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """One simulated point of a search."""

    rate: float
    replicas: int
    slo_attainment: float
    ok: bool
    ttft_p99_ms: float
    tpot_p99_ms: float


class CapacityResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of a search; ``found`` False when no probed point met the SLOs."""

    found: bool
    rate: float | None = None
    """Highest rate (req/s) meeting the SLOs (rate search)."""
    replicas: int | None = None
    """Fewest replicas meeting the SLOs (replica search)."""
    result: ScenarioResult | None = None
    """The scenario result at the answer."""
    probes: list[Probe] = []


def _probe(sc: Scenario, m: StepTimeModel, kv: KVConfig) -> tuple[Probe, ScenarioResult]:
    res = run_scenario(sc, m, kv)
    att = res.slo_attainment if res.slo_attainment is not None else 1.0
    rs = resolve(sc)
    return Probe(rate=rate_of(rs.arrival) or res.request_throughput, replicas=sc.replicas,
                 slo_attainment=att, ok=att >= sc.slo.attainment,
                 ttft_p99_ms=res.ttft_ms.p99, tpot_p99_ms=res.tpot_ms.p99), res


def _need_slo(sc: Scenario) -> None:
    if sc.slo.is_empty():
        raise ValidationError("a capacity search needs at least one SLO", field="slo")


def max_rate(scenario: Scenario, step_model: StepTimeModel, kv_config: KVConfig, *,
             rel_tol: float = 0.02, max_probes: int = 30,
             progress: Callable[[Probe], Any] | None = None) -> CapacityResult:
    """Bisect on the arrival rate (starting from the scenario's rate) to within ``rel_tol``."""
    _need_slo(scenario)
    rs = resolve(scenario)
    start = rate_of(rs.arrival)
    if start is None:
        raise ValidationError("the arrival pattern needs a rate (poisson, gamma, constant)",
                              field="arrival")
    probes: list[Probe] = []

    def at(rate: float) -> tuple[Probe, ScenarioResult]:
        sc = msgspec.structs.replace(scenario, arrival=with_rate(rs.arrival, rate))
        p, r = _probe(sc, step_model, kv_config)
        probes.append(p)
        if progress is not None:
            progress(p)
        return p, r

    lo = hi = None
    best: ScenarioResult | None = None
    p, r = at(start)
    if p.ok:
        lo, best = start, r
        rate = start
        while len(probes) < max_probes and math.isfinite(rate * 2):
            rate *= 2
            p, r = at(rate)
            if not p.ok:
                hi = rate
                break
            lo, best = rate, r
    else:
        hi = start
        rate = start
        while len(probes) < max_probes and rate / 2 > 0:
            rate /= 2
            p, r = at(rate)
            if p.ok:
                lo, best = rate, r
                break
            hi = rate
    if lo is None or hi is None:
        return CapacityResult(found=lo is not None, rate=lo, result=best, probes=probes)
    while hi - lo > rel_tol * lo and len(probes) < max_probes:
        mid = 0.5 * (lo + hi)
        p, r = at(mid)
        if p.ok:
            lo, best = mid, r
        else:
            hi = mid
    return CapacityResult(found=True, rate=lo, result=best, probes=probes)


def min_replicas(scenario: Scenario, step_model: StepTimeModel, kv_config: KVConfig, *,
                 max_replicas: int = 1024,
                 progress: Callable[[Probe], Any] | None = None) -> CapacityResult:
    """Fewest replicas meeting the SLOs at the scenario's rate (doubling, then bisection)."""
    _need_slo(scenario)
    resolve(scenario)
    probes: list[Probe] = []
    results: dict[int, ScenarioResult] = {}

    def ok(n: int) -> bool:
        p, r = _probe(msgspec.structs.replace(scenario, replicas=n), step_model, kv_config)
        probes.append(p)
        results[n] = r
        if progress is not None:
            progress(p)
        return p.ok

    n = 1
    while not ok(n):
        if n >= max_replicas:
            return CapacityResult(found=False, probes=probes)
        n = min(n * 2, max_replicas)
    lo, hi = n // 2, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return CapacityResult(found=True, replicas=hi, result=results[hi], probes=probes)
