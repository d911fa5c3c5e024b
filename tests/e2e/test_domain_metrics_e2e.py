"""Domain metrics on the api's /metrics after a real run: upload -> ingest -> prepare -> run.

A generated instruction trace goes through ``cascade import``, prepare and a run of three
configurations x two replicas (real simulator processes); then ``/metrics`` is parsed with
Prometheus' own text parser and its domain families are checked against what happened.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from programs.cli.importer import run_import
from tests.e2e.test_pipeline_e2e import CONFIGS, _import_args, _run_to_completion
from tests.support.traces_stack import TracesStack, traces_stack, write_kernels

__all__ = ["traces_stack"]


@pytest.fixture(scope="module")
async def pipeline(traces_stack: TracesStack) -> TracesStack:
    from services.orchestrator import run as run_orchestrator

    await traces_stack.start("orchestrator", run_orchestrator, orchestrator_backend="local",
                             max_local_sims=2)
    return traces_stack


async def test_metrics_after_a_real_run(pipeline: TracesStack, tmp_path: Path) -> None:
    folder = tmp_path / "gen"
    write_kernels(folder, 6, blocks=32, iterations=2)
    raw_bytes = sum(p.stat().st_size for p in folder.rglob("kernel-*"))
    summary = await run_import(_import_args(pipeline, folder, tmp_path / "s.json", "SM80_A100"))
    assert summary["state"] == "ready", summary
    await _run_to_completion(pipeline, summary["trace_id"])
    async with aiohttp.ClientSession() as http:
        await http.post(f"{pipeline.base_url}/v1/completions", json={"model": "nope", "prompt": [1]})
        async with http.get(f"{pipeline.base_url}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(name: str, **labels: str) -> float:
        found = [s.value for f in families.values() for s in f.samples
                 if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        assert found, f"no sample {name}{labels} on /metrics"
        return float(found[0])

    assert families["cascade_runs"].type == "gauge"
    assert value("cascade_runs", state="completed") >= 1
    assert value("cascade_runs", state="running") == 0
    assert value("cascade_sims", state="completed") >= 2 * len(CONFIGS)
    assert value("cascade_traces", state="ready") >= 1
    # every completed sim is in the duration histogram, with monotone cumulative buckets
    hist = families["cascade_sim_duration_seconds"]
    assert hist.type == "histogram"
    count = value("cascade_sim_duration_seconds_count")
    assert count == value("cascade_sims", state="completed")
    buckets = [s.value for s in hist.samples if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == count
    assert value("cascade_sim_duration_seconds_sum") <= count * value("cascade_sim_duration_max_seconds")
    # prepare's throughput: at least this trace's raw bytes, over the time it reported
    prepared = value("cascade_prepare_bytes")
    assert prepared >= raw_bytes > 0
    seconds = value("cascade_prepare_seconds")
    assert seconds > 0
    assert value("cascade_prepare_mb_per_second") == pytest.approx(prepared / 1e6 / seconds)
    # JetStream work-queue consumers: nothing left behind after the run
    for consumer in ("prepare", "sim"):
        pending = [s for s in families["cascade_queue_pending"].samples
                   if consumer in s.labels["consumer"]]
        assert pending, f"no queue depth for a {consumer} consumer: {families['cascade_queue_pending']}"
        assert all(s.value == 0 for s in pending)
    assert {"cascade_queue_in_flight", "cascade_queue_redelivered"} <= set(families)
    # /v1 latency by route
    v1 = [s for s in families["cascade_http_request_seconds"].samples
          if s.name.endswith("_count") and s.labels.get("route") == "/v1/completions"]
    assert v1 and v1[0].value >= 1
