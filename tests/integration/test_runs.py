"""Runs end to end on the embedded real servers (nats-server, SeaweedFS).

The api and the orchestrator run in-process (their ``run()`` coroutines);
simulators run as real ``python -m services.simulator --once`` processes
(``local`` backend) or in-process pool workers (``pool`` backend): see
:mod:`tests.support.runs_stack`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import aiohttp
from nats.aio.msg import Msg

from cascade.platform import subjects
from cascade.platform.bus import connect
from cascade.platform.state import RunRecord, SimRecord
from cascade.platform.storage import Storage
from tests.support.runs_stack import (
    get,
    make_settings,
    make_trace,
    post,
    read_sse,
    running,
    wait_run,
    wait_sim,
)
from tests.support.wait import wait_for_kv

# --------------------------------------------------------------------------- tests


async def test_three_configs_two_replicas_local_backend(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path)
    async with running(settings, "api", "orchestrator") as stack:
        trace = await make_trace(settings)
        status, body = await post(stack.base, "/api/runs", {
            "trace_id": trace.id, "configs": ["SM80_A100", "NVIDIA H100 80GB HBM3", "SM90_H200"],
            "replicas": 2, "model": "auto"})
        assert status == 202, body
        run_id = body["id"]
        assert body["state"] == "queued"
        events = await read_sse(f"{stack.base}/api/runs/{run_id}/events")
        kinds = [e["event"] for e in events]
        assert kinds[-1] == "run" and events[-1]["data"]["state"] == "completed"
        sim_events = [e["data"] for e in events if e["event"] == "sim"]
        assert {d["id"] for d in sim_events} == set(body["run"]["sim_ids"])
        assert any(d["state"] == "running" and 0 < d.get("percent", 0) < 100 for d in sim_events)
        assert all(isinstance(e.get("id"), int) for e in events[1:])

        detail = await get(stack.base, f"/api/runs/{run_id}")
        assert detail["run"]["state"] == "completed"
        assert len(detail["sims"]) == 6
        for sim in detail["sims"]:
            assert sim["state"] == "completed" and sim["percent"] == 100
            assert sim["kernels_done"] == sim["kernels_total"] == trace.kernels_total
            assert sim["attempts"] == 1 and sim["result_key"]

        results = await get(stack.base, f"/api/runs/{run_id}/results")
        by = {c["config"]: c for c in results["configs"]}
        assert set(by) == {"SM80_A100", "SM90_H100", "SM90_H200"}
        assert by["SM90_H100"]["predicted_e2e_ms"] < by["SM80_A100"]["predicted_e2e_ms"]
        a100 = by["SM80_A100"]
        assert a100["counterfactual"] is False and a100["baseline_e2e_ms"] > 0
        assert abs(a100["error_pct"]) < 10
        assert by["SM90_H100"]["counterfactual"] is True and by["SM90_H100"]["error_pct"] is None
        for c in by.values():
            assert len(c["replicas"]) == 2 and len(c["steps"]) > 10
            assert c["steps"][0]["kind"] == "prefill" and c["steps"][1]["kind"] == "decode"
            assert c["top_kernels"][0]["regime"] in ("compute", "memory", "latency", "launch")
            assert "gemm" in c["families"] and c["spec_hash"] and c["model"]
            # how far to trust it: the H200 has no calibration data, so every kernel is flagged
            calibrated = c["config"] != "SM90_H200"
            assert c["accuracy"]["target_calibrated"] is calibrated and c["accuracy"]["basis"]
            if not calibrated:
                assert c["extrapolated"] == c["kernel_count"] > 0
                assert c["extrapolation"]["target GPU not calibrated for this measurement kind"] == c["kernel_count"]
        csv_text = await get(stack.base, f"/api/runs/{run_id}/results?format=csv")
        assert len(csv_text.strip().splitlines()) == 7
        sim_id = detail["sims"][0]["id"]
        page = await get(stack.base, f"/api/runs/{run_id}/results/{sim_id}/kernels?offset=10&limit=5")
        assert page["total"] == trace.kernels_total and len(page["kernels"]) == 5
        assert page["kernels"][0]["kernel_id"] == 11 and page["kernels"][0]["predicted_ns"] > 0
        h200 = next(s["id"] for s in detail["sims"] if s["config"] == "SM90_H200")
        flagged = await get(stack.base, f"/api/runs/{run_id}/results/{h200}/kernels?limit=50")
        assert all(k["extrapolation"] & 1 for k in flagged["kernels"])  # target not calibrated
        # the same page as CSV and as Parquet: same rows, same values
        import io as _io

        import pyarrow.parquet as pq

        base_url = f"{stack.base}/api/runs/{run_id}/results/{h200}/kernels?limit=50"
        async with aiohttp.ClientSession() as s, s.get(base_url + "&format=parquet") as r:
            assert r.status == 200 and r.content_type == "application/vnd.apache.parquet"
            parquet = pq.read_table(_io.BytesIO(await r.read())).to_pydict()
        assert parquet["kernel_id"] == [k["kernel_id"] for k in flagged["kernels"]]
        assert parquet["predicted_ns"] == [k["predicted_ns"] for k in flagged["kernels"]]
        csv_page = await get(stack.base, f"/api/runs/{run_id}/results/{h200}/kernels?limit=50&format=csv")
        assert len(csv_page.strip().splitlines()) == 51

        # resume: replaying from the middle gives exactly the later events
        mid = events[len(events) // 2]["id"]
        rest = await read_sse(f"{stack.base}/api/runs/{run_id}/events",
                              headers={"Last-Event-ID": str(mid)})
        assert [e["id"] for e in rest] == [e["id"] for e in events if e.get("id", 0) > mid]


async def test_sigkilled_simulator_is_redone(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, max_local_sims=2)
    async with running(settings, "api", "orchestrator") as stack:
        trace = await make_trace(settings, 800)
        status, body = await post(stack.base, "/api/runs", {
            "trace_id": trace.id, "configs": ["SM90_H100"], "options": {"chunk_delay_s": 0.06}})
        assert status == 202, body
        run_id = body["id"]
        sim = await wait_sim(stack, run_id, lambda s: s.state == "running" and s.percent >= 10)
        pid = int(sim.worker.split(":")[1].split("/")[0])
        os.kill(pid, signal.SIGKILL)
        detail = await wait_run(stack, run_id, {"completed", "failed"}, timeout=90)
        assert detail["run"]["state"] == "completed", detail
        assert detail["sims"][0]["attempts"] == 2
        assert detail["sims"][0]["worker"] != sim.worker


async def test_restart_api_and_orchestrator_mid_run(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool")
    async with running(settings, "api", "orchestrator", "sim:1", "sim:2") as stack:
        trace = await make_trace(settings, 600)
        status, body = await post(stack.base, "/api/runs", {
            "trace_id": trace.id, "configs": ["SM80_A100", "SM90_H100"], "replicas": 2,
            "options": {"chunk_delay_s": 0.03}})
        assert status == 202, body
        run_id = body["id"]
        await wait_sim(stack, run_id, lambda s: s.state == "running" and s.percent > 5)
        sim_ids = set(body["run"]["sim_ids"])
        finished: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_completed(msg: Msg) -> None:
            sim_id = msg.subject.split(".")[-2]
            if sim_id in sim_ids and not finished.done():
                finished.set_result(sim_id)

        sub = await stack.bus.nc.subscribe(subjects.sim_event("*", "completed"), cb=on_completed)
        try:
            await stack.stop("orchestrator")
            await stack.stop("api")
            # sims progress and finish while nobody tracks them: wait for one's completed event
            await asyncio.wait_for(finished, 60)
        finally:
            await sub.unsubscribe()
        await stack.start("orchestrator")
        await stack.start("api")
        events = await read_sse(f"{stack.base}/api/runs/{run_id}/events")
        assert events[-1]["data"]["state"] == "completed"
        detail = await get(stack.base, f"/api/runs/{run_id}")
        assert detail["run"]["state"] == "completed"
        assert [s["state"] for s in detail["sims"]] == ["completed"] * 4
        assert all(s["attempts"] == 1 for s in detail["sims"])
        runs = await get(stack.base, "/api/runs")
        assert run_id in [r["id"] for r in runs["runs"]]


async def test_cancel_run(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool")
    async with running(settings, "api", "orchestrator", "sim:1") as stack:
        trace = await make_trace(settings, 600)
        status, body = await post(stack.base, "/api/runs", {
            "trace_id": trace.id, "configs": ["SM80_A100", "SM90_H100"],
            "options": {"chunk_delay_s": 0.2}})
        run_id = body["id"]
        await wait_sim(stack, run_id, lambda s: s.state == "running")
        status, answer = await post(stack.base, f"/api/runs/{run_id}/cancel", {})
        assert status == 202 and answer["cancel_requested"] is True
        events = await read_sse(f"{stack.base}/api/runs/{run_id}/events", timeout=30)
        assert events[-1]["event"] == "run" and events[-1]["data"]["state"] == "cancelled"
        detail = await wait_run(stack, run_id, {"cancelled"})
        assert {s["state"] for s in detail["sims"]} == {"cancelled"}
        status, again = await post(stack.base, f"/api/runs/{run_id}/cancel", {})
        assert status == 409 and "cancelled" in again["message"]


async def test_exhausted_deliveries_fail_the_run(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool",
                             job_max_deliver=2)
    async with running(settings, "api", "orchestrator", "sim:1") as stack:
        trace = await make_trace(settings, 200)
        async with Storage.from_settings(settings) as st:
            assert trace.bundle_key
            await st.delete_prefix(trace.bundle_key)
        status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM90_H100"]})
        assert status == 202, body
        run_id = body["id"]
        detail = await wait_run(stack, run_id, {"failed", "completed"}, timeout=60)
        assert detail["run"]["state"] == "failed"
        sim = detail["sims"][0]
        assert sim["state"] == "failed" and sim["attempts"] == 2
        assert "manifest.json" in sim["error"]
        assert sim["id"] in detail["run"]["error"]


async def test_invalid_requests(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool")
    async with running(settings, "api") as stack:
        trace = await make_trace(settings, 100)
        status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM99_NOPE"]})
        assert status == 400 and "SM90_H100" in body["known"] and "SM99_NOPE" in body["message"]
        status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM90_H100"],
                                                            "replicas": 0})
        assert status == 400 and "replicas" in body["message"]
        status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": []})
        assert status == 400
        status, body = await post(stack.base, "/api/runs", {"trace_id": "nope", "configs": ["SM90_H100"]})
        assert status == 404
        status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM90_H100"],
                                                            "model": "magic"})
        assert status == 400 and "model" in body["message"]
        bus = await connect(settings)
        try:
            kv = await bus.kv(subjects.KV_TRACES)
            import msgspec

            from cascade.platform.state import Provenance

            await kv.put(trace.id, msgspec.structs.replace(trace, state="preparing"))
            status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM90_H100"]})
            assert status == 409 and "preparing" in body["message"] and body["state"] == "preparing"
            refusal = "recorded sample: its instruction traces are not bundled"
            await kv.put(trace.id, msgspec.structs.replace(trace, provenance=Provenance(
                read_only=True, rerun_refusal=refusal, source="sample-recorded")))
            status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM90_H100"]})
            assert status == 409 and body["message"] == refusal
        finally:
            await bus.close()
        status, body = await post(stack.base, "/api/runs/run-doesnotexist/cancel", {})
        assert status == 404


async def test_configs_list_and_custom_spec_run(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool")
    async with running(settings, "api", "orchestrator", "sim:1") as stack:
        listing = await get(stack.base, "/api/configs")
        ids = {c["id"]: c for c in listing["configs"]}
        h100 = ids["SM90_H100"]
        assert h100["sms"] == 132 and h100["memory_bandwidth_gbps"] > 3000 and h100["tensor_tflops"]["fp16"] > 900
        spec = (await get(stack.base, "/api/configs/SM90_H100"))["spec"]
        custom = dict(spec, id="MY_H100_FAST", name="H100 at 2x clock", aliases=[],
                      boost_clock_mhz=spec["boost_clock_mhz"] * 2,
                      tensor_tflops={k: v * 2 for k, v in spec["tensor_tflops"].items()},
                      fp32_tflops=spec["fp32_tflops"] * 2)
        status, body = await post(stack.base, "/api/configs", custom)
        assert status == 201 and body["config"]["custom"] is True
        status, body = await post(stack.base, "/api/configs", dict(spec))
        assert status == 409
        status, body = await post(stack.base, "/api/configs", {"id": "X"})
        assert status == 400
        assert "MY_H100_FAST" in {c["id"] for c in (await get(stack.base, "/api/configs"))["configs"]}
        trace = await make_trace(settings, 300)
        status, body = await post(stack.base, "/api/runs", {
            "trace_id": trace.id, "configs": ["SM90_H100", "my_h100_fast"]})
        assert status == 202, body
        await wait_run(stack, body["id"], {"completed", "failed"})
        res = {c["config"]: c for c in (await get(stack.base, f"/api/runs/{body['id']}/results"))["configs"]}
        assert res["MY_H100_FAST"]["predicted_e2e_ms"] < res["SM90_H100"]["predicted_e2e_ms"]
        assert res["MY_H100_FAST"]["spec_hash"] != res["SM90_H100"]["spec_hash"]
        # a custom spec is a valid source too (by id or alias), an unknown one gets suggestions
        status, body = await post(stack.base, "/api/traces", {
            "name": "lab", "source_gpu": "my_h100_fast", "kind": "timeline"})
        assert status == 201 and body["source_gpu"] == "MY_H100_FAST", body
        status, body = await post(stack.base, "/api/traces", {
            "name": "lab", "source_gpu": "MY_H100_FAS", "kind": "timeline"})
        assert status == 400 and "MY_H100_FAST" in body["suggestions"], body
        # ... and a run on a trace recorded on it scales from it (not a source-less model)
        lab = await make_trace(settings, 300, source_gpu="MY_H100_FAST")
        status, body = await post(stack.base, "/api/runs", {"trace_id": lab.id,
                                                           "configs": ["SM90_H100"]})
        assert status == 202, body
        await wait_run(stack, body["id"], {"completed", "failed"})
        res = {c["config"]: c for c in (await get(stack.base, f"/api/runs/{body['id']}/results"))["configs"]}
        assert res["SM90_H100"]["source_spec_id"] == "MY_H100_FAST", res
        assert res["SM90_H100"]["extrapolation"].get(
            "source GPU not calibrated for this measurement kind") == 280, res  # source used


async def test_results_of_a_partial_trace_say_so(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    """A run on a trace that is ready with N of M kernels carries that in its results."""
    import msgspec

    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool")
    async with running(settings, "api", "orchestrator", "sim:1") as stack:
        trace = await make_trace(settings, 120)
        note = "ready with 120 of 121 kernels; failed: kernel-7 (see errors)"
        bus = await connect(settings)
        try:
            kv = await bus.kv(subjects.KV_TRACES)
            await kv.put(trace.id, msgspec.structs.replace(
                trace, kernels_total=121, kernels_prepared=120, kernels_failed=1,
                errors=["kernel-7.traceg:12: expected an instruction line"],
                warnings=[note, "notes.txt: skipped (not a trace file name)"]))
        finally:
            await bus.close()
        status, body = await post(stack.base, "/api/runs", {"trace_id": trace.id, "configs": ["SM90_H100"]})
        assert status == 202, body
        await wait_run(stack, body["id"], {"completed", "failed"})
        res = await get(stack.base, f"/api/runs/{body['id']}/results")
    cover = res["trace"]
    assert cover["partial"] is True and cover["kernels_failed"] == 1
    assert (cover["kernels_prepared"], cover["kernels_total"]) == (120, 121)
    assert note in cover["warnings"] and cover["errors"][0].startswith("kernel-7.traceg:12")


async def test_run_state_in_kv_matches_api(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    """The orchestrator creates a run published straight on the bus (no api), and finishes it."""
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool")
    async with running(settings, "orchestrator", "sim:1"):
        trace = await make_trace(settings, 200)
        from cascade.platform.messages.run import RunRequested

        bus = await connect(settings)
        try:
            run_id = f"run-{uuid.uuid4().hex[:12]}"
            await bus.publish(subjects.RUN_REQUESTED, RunRequested(
                run_id=run_id, trace_id=trace.id, configs=["SM80_A100"], replicas=2))
            run = await wait_for_kv(bus, subjects.KV_RUNS, run_id, lambda r: r.state == "completed",
                                    type_=RunRecord, timeout=60)
            assert run.jobs_published and len(run.sim_ids) == 2
            sims = await bus.kv(subjects.KV_SIMS)
            for sid in run.sim_ids:
                sim = await sims.get(sid, SimRecord)
                assert sim is not None and sim.value.state == "completed"
                assert sim.value.predicted_e2e_ns and sim.value.predicted_e2e_ns > 0
        finally:
            await bus.close()
