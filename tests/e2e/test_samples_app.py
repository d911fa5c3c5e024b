"""The bundled sample in the app: loaded once at start, absent with the flag, recorded run
refused, synthetic replica runnable end to end (api + orchestrator + simulator in-process)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cascade.platform import subjects
from cascade.platform.bus import Bus, connect
from cascade.platform.samples import (
    RECORDED_RUN_ID,
    RECORDED_TRACE_ID,
    SYNTHETIC_RUN_ID,
    SYNTHETIC_TRACE_ID,
    load_reference,
)
from cascade.platform.settings import Settings
from cascade.platform.state import RunRecord, TraceRecord
from cascade.platform.storage import Storage
from programs.embedded.nats import NatsServer
from services.api.app import create_app
from services.api.samples import load_sample_into_state
from tests.support.fixtures_nats import nats_settings
from tests.support.wait import wait_for_kv

SAMPLE_KEYS = {
    subjects.KV_TRACES: (RECORDED_TRACE_ID, SYNTHETIC_TRACE_ID),
    subjects.KV_RUNS: (RECORDED_RUN_ID, SYNTHETIC_RUN_ID),
}


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A NATS server of this test alone (fresh KV: nothing loaded by other tests)."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings(own_nats: NatsServer, tmp_path: Path) -> Settings:
    return nats_settings(own_nats.url, data_dir=str(tmp_path / "data"), orchestrator_backend="pool",
                         job_ack_wait_s=30.0)


@pytest.fixture
async def own_bus(settings: Settings) -> AsyncIterator[Bus]:
    b = await connect(settings, name="test-samples")
    await b.ensure_streams()
    try:
        yield b
    finally:
        await b.close()


@contextlib.asynccontextmanager
async def api(settings: Settings, bus: Bus, storage: Storage) -> AsyncIterator[TestClient]:
    client = TestClient(TestServer(create_app(settings, bus=bus, storage=storage)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def _revisions(bus: Bus) -> dict[str, int]:
    out = {}
    for bucket, keys in SAMPLE_KEYS.items():
        kv = await bus.kv(bucket)
        for key in keys:
            entry = await kv.raw.get(key)
            out[f"{bucket}/{key}"] = entry.revision
    return out


async def test_loaded_once_across_restarts(settings: Settings, own_bus: Bus, storage: Storage) -> None:
    async with api(settings, own_bus, storage) as client:
        traces = (await (await client.get("/api/traces")).json())["traces"]
        runs = (await (await client.get("/api/runs")).json())["runs"]
    first = await _revisions(own_bus)
    async with api(settings, own_bus, storage) as client:
        traces2 = (await (await client.get("/api/traces")).json())["traces"]
        runs2 = (await (await client.get("/api/runs")).json())["runs"]
    assert await _revisions(own_bus) == first  # create-if-absent: nothing rewritten
    for listing in (traces, traces2):
        ids = [t["id"] for t in listing]
        assert ids.count(RECORDED_TRACE_ID) == 1 and ids.count(SYNTHETIC_TRACE_ID) == 1
    for listing in (runs, runs2):
        assert [r["id"] for r in listing].count(RECORDED_RUN_ID) == 1
    by_id = {t["id"]: t for t in traces2}
    rec, syn = by_id[RECORDED_TRACE_ID], by_id[SYNTHETIC_TRACE_ID]
    ref = load_reference()
    assert rec["provenance"]["badge"] == "Sample" and rec["provenance"]["read_only"] is True
    assert rec["provenance"]["rerun_refusal"] == ref.rerun_refusal and rec["state"] == "ready"
    assert syn["provenance"]["badge"] == "synthetic" and syn["provenance"]["read_only"] is False
    assert syn["state"] == "ready" and syn["baseline"] == {} and syn["bundle_key"]
    assert await storage.exists(syn["bundle_key"] + "manifest.json")
    run = next(r for r in runs2 if r["id"] == RECORDED_RUN_ID)
    assert run["state"] == "completed" and run["model"] == "accel-sim"
    assert run["configs"] == ["SM90_H100", "SM90_H200", "SM80_A100"]
    assert run["provenance"]["badge"] == "Sample"
    # a second loader (another replica, `cascade up`) changes nothing either
    report = await load_sample_into_state(own_bus, storage)
    assert report.created == [] and len(report.existing) == 7
    assert [r["id"] for r in runs].count(SYNTHETIC_RUN_ID) == 1


async def test_first_start_answers_on_the_sample(settings: Settings, own_bus: Bus,
                                                 storage: Storage) -> None:
    """No orchestrator, no simulator: the api alone answers /v1 and /api/scenarios on the
    sample's synthetic replica as soon as it listens."""
    configs = ["SM90_H100", "SM90_H200", "SM80_A100"]
    async with api(settings, own_bus, storage) as client:
        assert (await client.get("/readyz")).status == 200
        models = [m["id"] for m in (await (await client.get("/v1/models")).json())["data"]
                  if m["cascade_source"] == "traced"]  # the described models follow them
        assert models == sorted(f"cascade/{SYNTHETIC_TRACE_ID}/{c}" for c in configs)
        est = await client.post("/v1/completions", json={
            "model": f"cascade/{SYNTHETIC_TRACE_ID}/SM90_H100", "prompt": "Hello, my name is",
            "max_tokens": 32})
        assert est.status == 200, await est.text()
        metrics = (await est.json())["metrics"]
        assert metrics["ttft_ms"] > 0 and metrics["e2e_ms"] > metrics["ttft_ms"]
        sc = await client.post("/api/scenarios", json={
            "model": f"cascade/{SYNTHETIC_TRACE_ID}/SM90_H200",
            "arrival": {"pattern": "poisson", "rate": 2}, "n_requests": 20,
            "lengths": {"prompt": {"kind": "fixed", "tokens": 6}, "output": {"kind": "fixed", "tokens": 32}}})
        assert sc.status == 200, await sc.text()
        assert (await sc.json())["result"]["completed"] == 20
        run = (await (await client.get(f"/api/runs/{SYNTHETIC_RUN_ID}")).json())["run"]
        assert run["state"] == "completed" and run["trace_id"] == SYNTHETIC_TRACE_ID
        assert run["provenance"]["badge"] == "synthetic" and run["provenance"]["read_only"] is False
        res = await (await client.get(f"/api/runs/{SYNTHETIC_RUN_ID}/results")).json()
    by_cfg = {c["config"]: c for c in res["configs"]}
    assert set(by_cfg) == set(configs)
    for cfg in by_cfg.values():
        kinds = [s["kind"] for s in cfg["steps"]]
        assert kinds.count("prefill") == 1 and kinds.count("decode") == 31
    # the A100 is slower than the H100 on the same kernels
    assert by_cfg["SM80_A100"]["predicted_e2e_ms"] > by_cfg["SM90_H100"]["predicted_e2e_ms"]


async def test_absent_with_samples_false(settings: Settings, own_bus: Bus, storage: Storage) -> None:
    async with api(settings.replace(samples=False), own_bus, storage) as client:
        traces = (await (await client.get("/api/traces")).json())["traces"]
        runs = (await (await client.get("/api/runs")).json())["runs"]
        models = (await (await client.get("/v1/models")).json())["data"]
    assert not [t for t in traces if t["id"] in (RECORDED_TRACE_ID, SYNTHETIC_TRACE_ID)]
    assert not [r for r in runs if r["id"] in (RECORDED_RUN_ID, SYNTHETIC_RUN_ID)]
    # nothing simulated at start either: only the described models (no trace) are listed
    assert [m for m in models if m["cascade_source"] != "described"] == []
    kv = await own_bus.kv(subjects.KV_TRACES)
    assert await kv.get(RECORDED_TRACE_ID, TraceRecord) is None


async def test_recorded_run_results_and_rerun_refused(settings: Settings, own_bus: Bus,
                                                      storage: Storage) -> None:
    ref = load_reference()
    async with api(settings, own_bus, storage) as client:
        resp = await client.post("/api/runs", json={"trace_id": RECORDED_TRACE_ID, "configs": ["SM90_H100"]})
        assert resp.status == 409
        assert (await resp.json())["message"] == ref.rerun_refusal
        res = await (await client.get(f"/api/runs/{RECORDED_RUN_ID}/results")).json()
        detail = await (await client.get(f"/api/runs/{RECORDED_RUN_ID}")).json()
    reference = res["reference"]
    assert reference["badge"] == "Sample"
    rows = {c["config"]: c for c in reference["configs"]}
    assert rows["SM90_H100"]["real_e2e_ms"] == 254.45 and rows["SM90_H100"]["simulated_e2e_ms"] == 262.14
    assert rows["SM90_H100"]["error_pct"] == 3.02
    assert rows["SM90_H200"]["counterfactual"] is True and rows["SM90_H200"]["real_e2e_ms"] is None
    assert rows["SM80_A100"]["error_pct"] == 3.38
    assert {s["config"]: s["state"] for s in detail["sims"]} == {
        "SM90_H100": "completed", "SM90_H200": "completed", "SM80_A100": "completed"}


async def _wait_run(bus: Bus, run_id: str, timeout: float) -> RunRecord:
    return await wait_for_kv(bus, subjects.KV_RUNS, run_id,
                             lambda r: r.state in ("completed", "failed", "cancelled"), type_=RunRecord,
                             timeout=timeout)


async def test_synthetic_replica_runs_on_three_configs(settings: Settings, own_bus: Bus,
                                                       storage: Storage) -> None:
    from services import orchestrator, simulator

    stop = asyncio.Event()
    services: list[asyncio.Task[Any]] = [
        asyncio.create_task(orchestrator.run(settings, bus=own_bus, storage=storage, stop=stop)),
        asyncio.create_task(simulator.run(settings, bus=own_bus, storage=storage, stop=stop)),
    ]
    try:
        async with api(settings, own_bus, storage) as client:
            configs = ["SM90_H100", "SM90_H200", "SM80_A100"]
            resp = await client.post("/api/runs", json={"trace_id": SYNTHETIC_TRACE_ID, "configs": configs})
            assert resp.status == 202, await resp.text()
            run_id = (await resp.json())["id"]
            run = await _wait_run(own_bus, run_id, timeout=240.0)
            assert run.state == "completed", run
            res = await (await client.get(f"/api/runs/{run_id}/results")).json()
            assert res["reference"] is None  # the synthetic run has no recorded figures
            for cfg in res["configs"]:
                assert cfg["state"] == "completed" and cfg["predicted_e2e_ms"] > 0
                assert cfg["counterfactual"] is True  # empty baseline
                steps = cfg["steps"]
                kinds = [s["kind"] for s in steps]
                assert kinds.count("prefill") == 1 and kinds.count("decode") == 31
                prefill = next(s for s in steps if s["kind"] == "prefill")
                assert (prefill["tokens"], prefill["context"]) == (6, 6)
                contexts = sorted(s["context"] for s in steps if s["kind"] == "decode")
                assert contexts == list(range(7, 38))
            by_cfg = {c["config"]: c["predicted_e2e_ms"] for c in res["configs"]}
            assert set(by_cfg) == set(configs)
            # the run the app simulated at first start agrees with the simulators' run
            first = await (await client.get(f"/api/runs/{SYNTHETIC_RUN_ID}/results")).json()
            assert {c["config"]: c["predicted_e2e_ms"] for c in first["configs"]} == pytest.approx(by_cfg)
            # the sims now serve as request models
            models = [m["id"] for m in (await (await client.get("/v1/models")).json())["data"]]
            for cfg_id in configs:
                assert f"cascade/{SYNTHETIC_TRACE_ID}/{cfg_id}" in models
            est = await (await client.post("/v1/completions", json={
                "model": f"cascade/{SYNTHETIC_TRACE_ID}/SM90_H100", "prompt": list(range(2000)),
                "max_tokens": 8})).json()
            assert est["cascade"]["extrapolated"] is True
            assert est["cascade"]["extrapolation"]["prefill_tokens"]["high"] == 6
            ok = await (await client.post("/v1/completions", json={
                "model": f"cascade/{SYNTHETIC_TRACE_ID}/SM80_A100", "prompt": "Hello, my name is",
                "max_tokens": 32})).json()
            cal = ok["cascade"]["calibration_range"]
            assert (cal["prefill_tokens_min"], cal["decode_context_min"], cal["decode_context_max"]) == (6, 7, 37)
            sc = await client.post("/api/scenarios", json={
                "model": f"cascade/{SYNTHETIC_TRACE_ID}/SM90_H200",
                "arrival": {"pattern": "poisson", "rate": 2}, "n_requests": 50,
                "lengths": {"prompt": {"kind": "fixed", "tokens": 6}, "output": {"kind": "fixed", "tokens": 32}}})
            assert sc.status == 200, await sc.text()
            assert (await sc.json())["result"]["completed"] == 50
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*services, return_exceptions=True), 60)
