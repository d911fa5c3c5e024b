"""Domain metrics on the api's ``/metrics``: runs and sims by state, sim durations, queue depths.

The api already holds every run and sim record in memory (the ``/v1`` model index
watches the ``cascade-runs`` / ``cascade-sims`` KV buckets), so these figures cover the
whole stack, not just this process:

- ``cascade_runs{state}`` / ``cascade_sims{state}``: records by state;
- ``cascade_traces{state}``: trace records by state;
- ``cascade_sim_duration_seconds`` (histogram) and ``cascade_sim_duration_max_seconds``:
  started -> finished of completed sims;
- ``cascade_prepare_bytes`` / ``cascade_prepare_seconds`` / ``cascade_prepare_mb_per_second``:
  raw bytes prepare has prepared, the seconds it spent on them (both summed over the trace
  records prepare keeps in KV) and their ratio (MB = 10^6 bytes);
- ``cascade_queue_pending{consumer}`` / ``cascade_queue_in_flight{consumer}`` /
  ``cascade_queue_redelivered{consumer}``: JetStream work-queue consumers, refreshed
  (bounded, 1 s) on each scrape.

``/v1`` latency is the histogram ``cascade_http_request_seconds{method, route="/v1/..."}``
(every route is timed by :func:`services.api.http.metrics_middleware`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client.core import (
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from cascade.platform.log import get_logger

log = get_logger("cascade.api.metrics")

RUN_STATES = ("queued", "running", "completed", "partial", "failed", "cancelled")
TRACE_STATES = ("receiving", "preparing", "ready", "incomplete", "failed")
#: Upper bounds (s) of the sim-duration histogram's buckets.
SIM_DURATION_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class DomainCollector(Collector):
    """Prometheus collector over the api's in-memory run/sim records and queue snapshot."""

    def __init__(self, models: Any, bus: Any) -> None:
        self.models = models
        self.bus = bus
        self.queues: dict[str, dict[str, int]] = {}

    async def refresh(self, timeout: float = 1.0) -> None:
        """Read the work-queue depths now (kept from the last scrape on failure)."""
        try:
            self.queues = await asyncio.wait_for(self.bus.queue_depths(), timeout)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail on a slow bus
            log.warning("queue depths unavailable", error=str(exc))

    def collect(self) -> Iterator[Metric]:
        runs = Counter(r.state for r in self.models.run_records())
        sims = Counter(s.state for s in self.models.sim_records())
        for name, counts, what in (("cascade_runs", runs, "Runs"), ("cascade_sims", sims, "Sims")):
            family = GaugeMetricFamily(name, f"{what} by state (whole stack, from KV)",
                                       labels=["state"])
            for state in RUN_STATES:
                family.add_metric([state], counts.get(state, 0))
            yield family
        traces = list(self.models.traces.records.values())
        by_state = Counter(t.state for t in traces)
        family = GaugeMetricFamily("cascade_traces", "Traces by state (whole stack, from KV)",
                                   labels=["state"])
        for state in (*TRACE_STATES, *sorted(set(by_state) - set(TRACE_STATES))):
            family.add_metric([state], by_state.get(state, 0))
        yield family
        prepared = sum(int(getattr(t, "prepared_bytes", 0)) for t in traces)
        spent = sum(float(getattr(t, "prepare_seconds", 0.0)) for t in traces)
        for name, help_text, value in (
            ("cascade_prepare_bytes", "Raw bytes prepared (whole stack, from KV)", prepared),
            ("cascade_prepare_seconds", "Seconds prepare spent on them", spent),
            ("cascade_prepare_mb_per_second", "Prepare throughput: MB (1e6 B) prepared per second spent",
             prepared / 1e6 / spent if spent > 0 else 0.0)):
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], value)
            yield gauge
        durations = sorted(s.finished_at - s.started_at for s in self.models.sim_records()
                           if s.state == "completed" and s.started_at and s.finished_at
                           and s.finished_at >= s.started_at)
        buckets: list[tuple[str, float]] = []
        below = 0
        for bound in SIM_DURATION_BUCKETS:
            while below < len(durations) and durations[below] <= bound:
                below += 1
            buckets.append((repr(bound), below))
        buckets.append(("+Inf", len(durations)))
        histogram = HistogramMetricFamily("cascade_sim_duration_seconds",
                                          "Started-to-finished time of completed sims (whole stack)")
        histogram.add_metric([], buckets, sum_value=sum(durations))
        yield histogram
        longest = GaugeMetricFamily("cascade_sim_duration_max_seconds",
                                    "Longest started-to-finished time of a completed sim")
        longest.add_metric([], max(durations, default=0.0))
        yield longest
        for key, help_text in (("pending", "Messages not yet delivered"),
                               ("in_flight", "Messages delivered, not yet acked"),
                               ("redelivered", "Messages redelivered at least once")):
            family = GaugeMetricFamily(f"cascade_queue_{key}", f"{help_text} per work queue",
                                       labels=["consumer"])
            for consumer, depth in sorted(self.queues.items()):
                family.add_metric([consumer], depth.get(key, 0))
            yield family


DOMAIN_METRICS = web.AppKey("domain_metrics", DomainCollector)


def install(app: web.Application) -> DomainCollector:
    """Register the collector on the app's registry once (idempotent)."""
    if DOMAIN_METRICS in app:
        return app[DOMAIN_METRICS]
    from services.api.appkeys import BUS, REGISTRY
    from services.api.sim_models import install as install_models

    collector = DomainCollector(install_models(app), app[BUS])
    app[REGISTRY].register(collector)
    app[DOMAIN_METRICS] = collector
    return collector
