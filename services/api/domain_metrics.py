"""Domain metrics on the api's ``/metrics``: runs and sims by state, sim durations, queue depths.

The api already holds every run and sim record in memory (the ``/v1`` model index
watches the ``cascade-runs`` / ``cascade-sims`` KV buckets), so these figures cover the
whole stack, not just this process:

- ``cascade_runs{state}`` / ``cascade_sims{state}``: records by state;
- ``cascade_sim_duration_seconds`` (summary: count, sum) and
  ``cascade_sim_duration_max_seconds``: started -> finished of completed sims;
- ``cascade_queue_pending{consumer}`` / ``cascade_queue_in_flight{consumer}`` /
  ``cascade_queue_redelivered{consumer}``: JetStream work-queue consumers, refreshed
  (bounded, 1 s) on each scrape.

``/v1`` latency is ``cascade_http_request_seconds{route="/v1/..."}`` (every route is timed).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from cascade.platform.log import get_logger

log = get_logger("cascade.api.metrics")

RUN_STATES = ("queued", "running", "completed", "failed", "cancelled")


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
        runs = Counter(r.state for r in list(self.models._runs.values()))
        sims = Counter(s.state for s in list(self.models._sims.values()))
        for name, counts, what in (("cascade_runs", runs, "Runs"), ("cascade_sims", sims, "Sims")):
            family = GaugeMetricFamily(name, f"{what} by state (whole stack, from KV)",
                                       labels=["state"])
            for state in RUN_STATES:
                family.add_metric([state], counts.get(state, 0))
            yield family
        durations = [s.finished_at - s.started_at for s in list(self.models._sims.values())
                     if s.state == "completed" and s.started_at and s.finished_at
                     and s.finished_at >= s.started_at]
        summary = SummaryMetricFamily("cascade_sim_duration_seconds",
                                      "Started-to-finished time of completed sims")
        summary.add_metric([], count_value=len(durations), sum_value=sum(durations))
        yield summary
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
    from services.api.keys import BUS, REGISTRY
    from services.api.sim_models import install as install_models

    collector = DomainCollector(install_models(app), app[BUS])
    app[REGISTRY].register(collector)
    app[DOMAIN_METRICS] = collector
    return collector
