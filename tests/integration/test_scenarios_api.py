"""POST /api/scenarios on a finished sim: metrics, summary, validation, background jobs, capacity."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.support.fixtures_api import FinishedSim
from tests.support.wait import wait_until


def _body(finished: FinishedSim, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": finished.model, "arrival": {"pattern": "poisson", "rate": 5.0},
        "lengths": {"prompt": {"kind": "fixed", "tokens": 6}, "output": {"kind": "fixed", "tokens": 32}},
        "n_requests": 200, "replicas": 2, "seed": 1,
    }
    body.update(extra)
    return body


async def test_scenario_returns_metrics_and_vllm_like_summary(client: TestClient,
                                                               finished: FinishedSim) -> None:
    resp = await client.post("/api/scenarios", json=_body(finished))
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    res = body["result"]
    assert res["completed"] == 200
    assert res["total_output_tokens"] == 200 * 32 and res["total_input_tokens"] == 200 * 6
    assert len(res["replicas"]) == 2
    assert res["ttft_ms"]["count"] == 200 and res["ttft_ms"]["p99"] >= res["ttft_ms"]["median"] > 0
    # six-token prompts and contexts up to 37 are calibrated; batches of 2+ concurrent decodes are not
    assert set(res["extrapolation"]) <= {"decode_batch"}
    assert res["extrapolated"] == bool(res["extrapolation"])
    if res["extrapolated"]:
        assert "extrapolated" in body["summary"]
    assert body["sim"] == finished.sim_id and body["config"] == finished.config
    summary = body["summary"]
    assert "Serving Benchmark Result" in summary
    assert "Mean TTFT (ms):" in summary and "P99 TPOT (ms):" in summary
    assert f"{res['completed']:<10}" in summary


async def test_sim_run_and_model_select_the_same_sim(client: TestClient, finished: FinishedSim) -> None:
    base = _body(finished)
    del base["model"]
    answers = []
    for sel in ({"model": finished.model}, {"sim": finished.sim_id},
                {"run": finished.run_id, "config": finished.config}):
        resp = await client.post("/api/scenarios", json={**base, **sel, "scheduler": {
            "name": "vllm", "settings": {"max_num_seqs": 8}}})
        assert resp.status == 200, await resp.text()
        answers.append((await resp.json())["result"]["e2el_ms"])
    assert answers[0] == answers[1] == answers[2]


async def test_low_rate_ttft_equals_prefill_step(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.post("/api/scenarios", json=_body(
        finished, arrival={"pattern": "constant", "rate": 0.5}, n_requests=20, replicas=1))
    res = (await resp.json())["result"]
    prefill = next(s for s in finished.result.steps if s.kind == "prefill")
    assert res["ttft_ms"]["mean"] == pytest.approx((prefill.host_ns + prefill.gpu_ns) / 1e6, rel=1e-6)
    assert res["queue_ms"]["max"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("change", "status", "field"), [
    ({"arrival": {"pattern": "poisson", "rate": -1}}, 400, "arrival.rate"),
    ({"arrival": {"pattern": "zigzag", "rate": 1}}, 400, "arrival.pattern"),
    ({"arrival": {"rate": 1}}, 400, "arrival.pattern"),
    ({"arrival": {"pattern": "trace", "path": "/etc/passwd"}}, 400, "arrival.path"),
    ({"arrival": {"pattern": "poisson", "rate": 1, "kind": "poisson"}}, 400, "arrival.kind"),
    ({"lengths": {"prompt": {"kind": "uniform", "lo": 9, "hi": 3}}}, 422, "lengths.prompt.hi"),
    ({"lengths": {"prompt": {"kind": "lognormal", "median": 9}}}, 422, "lengths.prompt"),
    ({"lengths": {"prompt": {"kind": "trace"}}}, 400, "lengths.prompt"),  # the schema states it
    ({"concurrency": 4, "arrival": {"pattern": "trace", "csv": "arrived_at,prompt_tokens,output_tokens\n0,6,4\n"},
      "lengths": {"output": {"kind": "trace"}}}, 400, "lengths.output"),
    ({"concurrency": 4, "duration": 5.0, "n_requests": None}, 422, "duration"),
    ({"lengths": {"prompt": 2040, "output": 32}}, 422, "lengths.output"),  # opt-125m: 2048 tokens
    ({"lengths": {"prompt": 4096, "output": 8}}, 422, "lengths.prompt"),
    ({"lengths": {"output": {"kind": "weird"}}}, 400, "lengths.output.kind"),
    ({"lengths": {"output": 0}}, 400, "lengths.output"),
    ({"replicas": 0}, 400, "replicas"),
    ({"replicas": 5000}, 400, "replicas"),
    ({"slos": {"ttft_ms": -5}}, 400, "slos.ttft_ms"),
    ({"scheduler": {"name": "fifo"}}, 400, "scheduler.name"),
    ({"scheduler": {"name": "vllm", "settings": {"max_num_seqs": 0}}}, 400,
     "scheduler.settings.max_num_seqs"),
    ({"scheduler": {"name": "vllm", "settings": {"batch_size": 4}}}, 400, "scheduler.settings.batch_size"),
    ({"capacity_search": {"kind": "max_rate"}}, 422, "slos"),
    ({"duration": 5.0}, 422, "duration"),
    ({"kv": {"model": "gpt-5"}}, 400, "kv.model"),
    ({"bogus": 1}, 400, "body"),
    ({"concurrency": 4, "clients_start": "sideways"}, 400, "clients_start"),
    ({"concurrency": 4, "warmup_requests": -1}, 400, "warmup_requests"),
    # a warm-up that leaves nothing to measure
    ({"arrival": {"pattern": "constant", "rate": 0.5}, "duration": 4.0, "n_requests": None,
      "warmup_requests": 50}, 422, "warmup_requests"),
])
async def test_validation_names_the_field(client: TestClient, finished: FinishedSim,
                                          change: dict[str, Any], status: int, field: str) -> None:
    """A body off the schema is a 400; one on it whose fields cannot go together, a 422."""
    resp = await client.post("/api/scenarios", json=_body(finished, **change))
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert body["error"] == ("invalid_request" if status == 400 else "unprocessable")
    assert body.get("field", "body") == field, body
    assert body["message"]


async def test_requests_longer_than_the_models_context_are_refused(client: TestClient,
                                                                    finished: FinishedSim) -> None:
    """As the model's server would refuse them: the count, the longest and the context named."""
    lengths = {"prompt": {"kind": "lognormal", "median": 1500, "p90": 3000}, "output": 16}
    resp = await client.post("/api/scenarios", json=_body(finished, lengths=lengths))
    assert resp.status == 422, await resp.text()
    body = await resp.json()
    assert body["field"] == "lengths.prompt"
    assert "of 200 requests hold more tokens than the model's context of 2048" in body["message"]
    assert "a lognormal law takes a max" in body["message"]
    # the same law capped below the context runs
    lengths["prompt"]["max"] = 2048 - 16
    resp = await client.post("/api/scenarios", json=_body(finished, lengths=lengths))
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["result"]["completed"] == 200


async def test_model_selection_errors(client: TestClient, finished: FinishedSim) -> None:
    body = _body(finished)
    del body["model"]
    resp = await client.post("/api/scenarios", json=body)
    assert resp.status == 400 and (await resp.json())["field"] == "sim"
    resp = await client.post("/api/scenarios", json={**body, "sim": "nope-sim"})
    assert resp.status == 404
    resp = await client.post("/api/scenarios", json={**body, "model": "cascade/nope/SM90_H100"})
    assert resp.status == 404 and finished.model in (await resp.json())["message"]


async def test_trace_replay_inline_csv(client: TestClient, finished: FinishedSim) -> None:
    csv = "arrived_at,prompt_tokens,output_tokens\n0,6,4\n0.5,12,8\n1.0,6,2\n"
    resp = await client.post("/api/scenarios", json=_body(
        finished, arrival={"pattern": "trace", "csv": csv}, lengths={}, n_requests=None))
    assert resp.status == 200, await resp.text()
    res = (await resp.json())["result"]
    assert res["completed"] == 3 and res["total_output_tokens"] == 14
    far = res["extrapolation"]["prefill_tokens"]  # a 12-token prompt on a sim calibrated on six
    assert (far["value"], far["high"]) == (12, 6)


async def _wait_job(client: TestClient, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        view: dict[str, Any] = await (await client.get(f"/api/scenarios/{job_id}")).json()
        return view if view["state"] in ("completed", "failed") else None

    return await wait_until(finished, timeout, what=f"scenario job {job_id} to finish (GET /api/scenarios/{job_id})")


async def test_background_job_reports_progress_and_result(client: TestClient,
                                                          finished: FinishedSim) -> None:
    resp = await client.post("/api/scenarios", json=_body(finished, n_requests=3000, background=True))
    assert resp.status == 202, await resp.text()
    job = await resp.json()
    assert resp.headers["Location"] == f"/api/scenarios/{job['id']}"
    assert job["state"] in ("queued", "running")
    view = await _wait_job(client, job["id"])
    assert view["state"] == "completed", view
    assert view["progress"]["percent"] == 100.0
    assert view["response"]["result"]["completed"] == 3000
    assert "Serving Benchmark Result" in view["response"]["summary"]
    missing = await client.get("/api/scenarios/scn-000000000000")
    assert missing.status == 404


async def test_capacity_search_finds_a_rate(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.post("/api/scenarios", json=_body(
        finished, n_requests=300, replicas=1, slos={"ttft_ms": 50.0, "attainment": 0.95},
        capacity_search={"kind": "max_rate", "rel_tol": 0.1}))
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    cap = body["capacity"]
    assert cap["found"] is True and cap["rate"] > 0
    assert body["result"]["slo_attainment"] >= 0.95
    assert "Highest rate meeting the SLOs" in body["summary"]


async def test_scenario_runs_off_the_event_loop(client: TestClient, finished: FinishedSim,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation and its answer's encoding run in a worker thread, not on the loop."""
    import threading

    from services.api.routes import scenarios

    loop_thread = threading.get_ident()
    seen: list[int] = []
    real_compute, real_body = scenarios.compute, scenarios.response_body

    def compute(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return real_compute(*args, **kwargs)

    def response_body(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return real_body(*args, **kwargs)

    monkeypatch.setattr(scenarios, "compute", compute)
    monkeypatch.setattr(scenarios, "response_body", response_body)
    resp = await client.post("/api/scenarios", json=_body(finished))
    assert resp.status == 200, await resp.text()
    assert len(seen) == 2 and loop_thread not in seen


async def test_background_jobs_are_bounded(client: TestClient, finished: FinishedSim,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from services.api.routes import scenarios

    monkeypatch.setattr(scenarios, "MAX_JOBS", 0)
    resp = await client.post("/api/scenarios", json=_body(finished, background=True))
    assert resp.status == 429, await resp.text()
    body = await resp.json()
    assert body["error"] == "too_many_requests" and body["limit"] == 0


# ---- described models (no trace) ---------------------------------------------------------------

def _described(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "description": {"config": "llama-3.1-8b", "gpu": "SM90_H100", "tp": 1, "quant": "bf16", "kv_dtype": "bf16"},
        "concurrency": 8, "n_requests": 40, "lengths": {"prompt": 256, "output": 32}, "seed": 0}
    body.update(extra)
    return body


async def test_model_configs_lists_the_bundled_examples(client: TestClient) -> None:
    resp = await client.get("/api/model-configs")
    assert resp.status == 200, await resp.text()
    configs = {c["name"]: c for c in (await resp.json())["configs"]}
    assert set(configs) == {"llama-3.1-8b", "qwen3-32b", "gpt-oss-120b", "deepseek-v3"}
    assert configs["llama-3.1-8b"]["config"]["num_key_value_heads"] == 8
    assert configs["gpt-oss-120b"]["moe_quant"] == "mxfp4" and "128 experts" in configs["gpt-oss-120b"]["summary"]
    deepseek = configs["deepseek-v3"]
    assert deepseek["quant"] == "fp8-block" and "latent" in deepseek["summary"] and deepseek["context_tokens"] == 163840


async def test_deepseek_v3_on_eight_b200s_beats_eight_h200s(client: TestClient) -> None:
    """The bundled DeepSeek-V3, FP8 as published, TP 8 with 16 clients: served on B200s it answers
    with a lower TPOT than on H200s; on H100s its weights leave no KV cache (a 422 naming kv)."""
    tpot = {}
    for gpu in ("SM90_H200", "SM100_B200"):
        body = _described(concurrency=16, n_requests=32, lengths={"prompt": 1024, "output": 64})
        body["description"] = {"config": "deepseek-v3", "gpu": gpu, "tp": 8, "quant": "fp8-block"}
        resp = await client.post("/api/scenarios", json=body)
        assert resp.status == 200, await resp.text()
        out = await resp.json()
        assert "MLA latent 512" in out["basis"]["workload"]
        tpot[gpu] = out["result"]["tpot_ms"]["mean"]
    assert tpot["SM100_B200"] < tpot["SM90_H200"]
    body["description"] = {"config": "deepseek-v3", "gpu": "SM90_H100", "tp": 8, "quant": "fp8-block"}
    resp = await client.post("/api/scenarios", json=body)
    assert resp.status == 422 and (await resp.json())["field"] == "kv"


async def test_a_described_model_answers_ttft_and_tpot_with_its_basis(client: TestClient) -> None:
    resp = await client.post("/api/scenarios", json=_described())
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    res, basis = body["result"], body["basis"]
    assert res["completed"] == 40 and res["total_input_tokens"] == 40 * 256
    assert res["ttft_ms"]["mean"] > 0 and res["tpot_ms"]["mean"] > 0 and res["tpot_ms"]["median"] > 0
    assert basis["kind"] == "described" and basis["gpu"] == "SM90_H100"
    assert basis["llm_calibration"]["digest"] and basis["llm_calibration"]["id"]
    err = basis["expected_kernel_error"]
    assert err["mape_pct"] is not None and 0 < err["mape_pct"] < 100 and "held-out" in err["basis"]
    assert basis["kv_cache_tokens"] > 0 and basis["context_tokens"] == 131072
    assert body["model"] == "described/llama-3.1-8b" and body["sim"] == "" and body["config"] == "SM90_H100"
    assert "described, no trace" in body["summary"] and "expected error" in body["summary"]
    assert res["scenario"]["concurrency"] == 8
    # as a benchmark runs it: clients together, 2 x 8 warm-up requests simulated and left out
    assert res["scenario"]["clients_start"] == "together" and res["scenario"]["warmup_requests"] == 16
    spread = await client.post("/api/scenarios", json=_described(clients_start="staggered", warmup_requests=0))
    assert spread.status == 200, await spread.text()
    other = (await spread.json())["result"]
    assert other["completed"] == 40 and other["scenario"]["clients_start"] == "staggered"
    assert other["scenario"]["warmup_requests"] == 0 and other["ttft_ms"] != res["ttft_ms"]
    # the same config sent inline (as the UI sends an uploaded file) gives the same answer
    configs = {c["name"]: c["config"] for c in (await (await client.get("/api/model-configs")).json())["configs"]}
    inline = _described()
    inline["description"] = {**inline["description"], "config": configs["llama-3.1-8b"]}
    again = await client.post("/api/scenarios", json=inline)
    assert again.status == 200, await again.text()
    assert (await again.json())["result"]["ttft_ms"] == res["ttft_ms"]
    # an arrival rate instead of a concurrency, TP 2 and FP8 on an alias of the GPU
    rate = _described(concurrency=None, arrival={"pattern": "poisson", "rate": 4.0})
    rate["description"] = {**rate["description"], "gpu": "h100", "tp": 2, "quant": "fp8"}
    resp = await client.post("/api/scenarios", json=rate)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["result"]["completed"] == 40


@pytest.mark.parametrize(("change", "status", "field"), [
    ({"hidden_size": "wide"}, 400, "description.config.hidden_size"),
    ({"num_attention_heads": None}, 400, "description.config.num_attention_heads"),
    ({"mlp_only_layers": [0, "x"]}, 400, "description.config.mlp_only_layers"),
    ({"kv_lora_rank": 512}, 422, "description.config.qk_rope_head_dim"),
    ({"num_attention_heads": 30}, 422, "description.tp"),
    ({"hidden_size": 2, "head_dim": None}, 422, "description.config.head_dim"),
])
async def test_a_bad_config_field_is_named(client: TestClient, change: dict[str, Any], status: int,
                                           field: str) -> None:
    configs = {c["name"]: c["config"] for c in (await (await client.get("/api/model-configs")).json())["configs"]}
    config = {**configs["llama-3.1-8b"], **change}
    config = {k: v for k, v in config.items() if v is not None}
    body = _described()
    body["description"] = {**body["description"], "config": config, "tp": 4}
    resp = await client.post("/api/scenarios", json=body)
    assert resp.status == status, await resp.text()
    err = await resp.json()
    assert err["field"] == field, err
    assert err["message"]


async def test_an_unknown_gpu_names_the_closest(client: TestClient) -> None:
    body = _described()
    body["description"] = {**body["description"], "gpu": "H10O SXM"}
    resp = await client.post("/api/scenarios", json=body)
    assert resp.status == 400, await resp.text()
    err = await resp.json()
    assert err["error"] == "unknown_gpu"
    assert "SM90_H100" in err["suggestions"] and "SM90_H100" in err["known"]


async def test_an_oversized_config_is_refused(client: TestClient) -> None:
    configs = {c["name"]: c["config"] for c in (await (await client.get("/api/model-configs")).json())["configs"]}
    body = _described()
    body["description"] = {**body["description"], "config": {**configs["llama-3.1-8b"], "notes": "x" * 300_000}}
    resp = await client.post("/api/scenarios", json=body)
    assert resp.status == 413, await resp.text()
    err = await resp.json()
    assert err["error"] == "too_large" and "description.config" in err["message"]


@pytest.mark.parametrize(("change", "status", "field"), [
    ({"description": {"config": "llama-9-1t", "gpu": "SM90_H100"}}, 400, "description.config"),
    ({"description": {"config": "llama-3.1-8b", "gpu": "SM90_H100", "quant": "fp3"}}, 400, "description.quant"),
    ({"description": {"config": "llama-3.1-8b", "gpu": "SM90_H100", "tp": 0}}, 400, "description.tp"),
    ({"kv": {"model": "opt-125m"}}, 400, "kv.model"),
    ({"description": {"config": "qwen3-32b", "gpu": "SM89_L4"}}, 422, "kv"),
    ({"capacity_search": {"kind": "max_rate"}, "slos": {"ttft_ms": 100}}, 422, "capacity_search.kind"),
    ({"description": {"config": "gpt-oss-120b", "gpu": "SM90_H200", "dp": 2, "ep": 3}}, 422, "description.ep"),
])
async def test_description_validation_names_the_field(client: TestClient, change: dict[str, Any], status: int,
                                                      field: str) -> None:
    resp = await client.post("/api/scenarios", json=_described(**change))
    assert resp.status == status, await resp.text()
    assert (await resp.json())["field"] == field


async def test_data_parallel_ranks_are_engines_of_their_own(client: TestClient) -> None:
    """description.dp: gpt-oss-120b as vllm serve --data-parallel-size 2 --enable-expert-parallel."""
    body = _described(concurrency=8, n_requests=32)
    body["description"] = {"config": "gpt-oss-120b", "gpu": "SM90_H200", "tp": 1, "dp": 2, "ep": 2,
                           "moe_quant": "mxfp4"}
    resp = await client.post("/api/scenarios", json=body)
    assert resp.status == 200, await resp.text()
    out = await resp.json()
    # one engine of two ranks stepping together: each rank's limits (1024 sequences on an H200), twice
    sched = out["result"]["scenario"]["scheduler"]
    assert (sched["max_num_seqs"], sched["max_num_batched_tokens"]) == (2 * 1024, 2 * 8192)
    assert sched["long_prefill_token_threshold"] == 8192
    assert len(out["result"]["replicas"]) == 1 and out["basis"]["data_parallel"] == 2
    assert "DP 2" in out["basis"]["workload"] and out["result"]["completed"] == 32
    assert out["result"]["kv_cache"]["capacity_blocks"] * 16 == 2 * out["basis"]["kv_cache_tokens"]
