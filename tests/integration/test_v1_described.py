"""OpenAI-style /v1 estimates of described models (a bundled config.json on a GPU, no trace),
against the real api on real NATS + S3 (the ``client`` fixture, with its one finished sim for
the traced side)."""

from __future__ import annotations

import json
import time

import msgspec
import openai
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from services.api.described_models import DESCRIBED_MODELS, GRAMMAR
from tests.integration.test_v1 import ChatCompletion, Completion, ErrorResponse, ModelList
from tests.support.fixtures_api import FinishedSim

LLAMA_H100 = "described/llama-3.1-8b/SM90_H100"
LLAMA_B200 = "described/llama-3.1-8b/SM100_B200"


async def _complete(client: TestClient, model: str, prompt: int, max_tokens: int) -> dict[str, object]:
    resp = await client.post("/v1/completions", json={"model": model, "prompt": list(range(prompt)),
                                                      "max_tokens": max_tokens})
    assert resp.status == 200, await resp.text()
    body: dict[str, object] = await resp.json()
    return body


async def _error(resp: ClientResponse) -> tuple[int, str, str | None]:
    err = msgspec.json.decode(await resp.read(), type=ErrorResponse).error
    return resp.status, err.message, err.code


async def test_described_completion_and_chat_in_openai_shape(client: TestClient) -> None:
    resp = await client.post("/v1/completions", json={"model": LLAMA_H100, "prompt": list(range(512)),
                                                      "max_tokens": 32, "cascade_itl": "full"})
    assert resp.status == 200, await resp.text()
    raw = await resp.read()
    shaped = msgspec.json.decode(raw, type=Completion)
    assert shaped.model == LLAMA_H100 and shaped.choices[0].finish_reason == "length"
    assert (shaped.usage.prompt_tokens, shaped.usage.completion_tokens) == (512, 32)
    body = json.loads(raw)
    m, c = body["metrics"], body["cascade"]
    assert m["ttft_ms"] > 0 and m["tpot_ms"] > 0 and m["itl_count"] == 31 and len(m["itl_ms"]) == 31
    assert m["e2e_ms"] == pytest.approx(m["ttft_ms"] + sum(m["itl_ms"]), rel=1e-9)
    assert c["source"] == "described" and c["extrapolated"] is False and c["extrapolation"] == {}
    assert c["method"] == "kernel-model" and c["calibration_range"] is None
    assert (c["sim"], c["run"], c["trace"], c["config"]) == ("", "", "", "SM90_H100")
    basis = c["basis"]
    assert basis["kind"] == "described" and basis["gpu"] == "SM90_H100"
    assert "llama" in basis["workload"] and "TP 1" in basis["workload"]
    assert basis["llm_calibration"]["id"] and basis["llm_calibration"]["digest"]
    assert basis["expected_kernel_error"]["cells"] > 0
    assert c["kernels"]["model"] == "llm" and c["kernels"]["accuracy"]["mape_pct"] is not None
    chat = await client.post("/v1/chat/completions", json={
        "model": LLAMA_H100, "max_tokens": 8, "messages": [{"role": "user", "content": "Hello there"}]})
    assert chat.status == 200, await chat.text()
    raw = await chat.read()
    assert msgspec.json.decode(raw, type=ChatCompletion).usage.completion_tokens == 8
    cb = json.loads(raw)
    assert cb["cascade"]["source"] == "described" and cb["metrics"]["e2e_ms"] > cb["metrics"]["ttft_ms"] > 0


async def test_described_latency_follows_the_shape_and_the_gpu(client: TestClient) -> None:
    short, long_ = await _complete(client, LLAMA_H100, 128, 16), await _complete(client, LLAMA_H100, 4096, 16)
    assert long_["metrics"]["ttft_ms"] > short["metrics"]["ttft_ms"]  # type: ignore[index]
    chunked = await _complete(client, LLAMA_H100, 20_000, 2)
    assert chunked["cascade"]["prefill_steps"] == 3  # type: ignore[index]  # 8192-token chunks
    more = await _complete(client, LLAMA_H100, 128, 64)
    assert more["metrics"]["e2e_ms"] > short["metrics"]["e2e_ms"]  # type: ignore[index]
    b200 = await _complete(client, LLAMA_B200, 4096, 16)
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert b200["metrics"][key] < long_["metrics"][key]  # type: ignore[index]
    assert b200["cascade"]["basis"]["gpu"] == "SM100_B200"  # type: ignore[index]
    # the GPU by an alias, defaults spelt out: the same model, echoed by its canonical id
    alias = await _complete(client, "described/llama-3.1-8b/B200/tp1/bf16", 4096, 16)
    assert alias["model"] == "described/llama-3.1-8b/SM100_B200/bf16"
    assert alias["metrics"] == b200["metrics"]
    # DeepSeek-V3 (multi-head latent attention, block FP8 as published) on eight H200s and B200s
    h200 = await _complete(client, "described/deepseek-v3/H200/tp8", 1024, 16)
    b200_ds = await _complete(client, "described/deepseek-v3/B200/tp8", 1024, 16)
    assert "MLA" in h200["cascade"]["basis"]["workload"]  # type: ignore[index]
    assert b200_ds["metrics"]["tpot_ms"] < h200["metrics"]["tpot_ms"]  # type: ignore[index]


async def test_described_errors(client: TestClient) -> None:
    for model, wrong in (("described/llama-3.1-8b", "a config and a GPU"),
                         ("described/llama-9b/SM90_H100", "no bundled config 'llama-9b'"),
                         ("described/llama-3.1-8b/SM90_H100/fp7", "segment 'fp7'"),
                         ("described/llama-3.1-8b/SM90_H100/tp2/tp4", "repeats"),
                         ("described/llama-3.1-8b/SM90_H1000", "unknown GPU 'SM90_H1000'; closest: SM90_H100")):
        status, message, code = await _error(await client.post("/v1/completions", json={
            "model": model, "prompt": "x"}))
        assert (status, code) == (404, "model_not_found"), (model, message)
        assert wrong in message and GRAMMAR in message, message
    status, message, code = await _error(await client.post("/v1/completions", json={
        "model": "described/gpt-oss-120b/SM90_H100/bf16", "prompt": "x"}))
    assert (status, code) == (400, "model_does_not_fit")
    assert "does not fit SM90_H100" in message and "at tp1" in message and "GiB of weights" in message
    status, message, code = await _error(await client.post("/v1/completions", json={
        "model": "described/llama-3.1-8b/SM90_H100/tp3", "prompt": "x"}))
    assert status == 400 and "do not split over tp=3" in message
    # the config's own window: qwen3-32b's max_position_embeddings is 40,960
    status, message, code = await _error(await client.post("/v1/completions", json={
        "model": "described/qwen3-32b/SM90_H100/tp2", "prompt": list(range(40_000)), "max_tokens": 1000}))
    assert (status, code) == (400, "context_length_exceeded") and "40960" in message
    # an unknown traced id names the described grammar too
    status, message, code = await _error(await client.post("/v1/completions", json={"model": "gpt-4",
                                                                                      "prompt": "x"}))
    assert status == 404 and GRAMMAR in message


async def test_described_stream(client: TestClient) -> None:
    resp = await client.post("/v1/chat/completions", json={
        "model": LLAMA_H100, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
        "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = [line[6:] for line in (await resp.text()).split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    tokens = [c for c in chunks if c["choices"]]
    assert len(tokens) == 6 and chunks[-1]["usage"]["completion_tokens"] == 6
    times = [c["cascade_token"]["time_ms"] for c in tokens]
    assert times == sorted(times) and times[0] > 0
    assert tokens[-1]["cascade"]["source"] == "described"
    assert tokens[-1]["metrics"]["e2e_ms"] == pytest.approx(times[-1])


async def test_models_list_described_entries(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.get("/v1/models")
    raw = await resp.read()
    listed = msgspec.json.decode(raw, type=ModelList)
    ids = [m.id for m in listed.data]
    assert ids.index(finished.model) < ids.index(LLAMA_H100)  # traced first
    cards = {m["id"]: m for m in json.loads(raw)["data"]}
    assert cards[finished.model]["cascade_source"] == "traced" and cards[finished.model]["owned_by"] == "cascade"
    described = {k: v for k, v in cards.items() if v["cascade_source"] == "described"}
    # one per bundled config, at the smallest TP whose KV cache holds the whole window on an H100 (on an
    # H200 where no H100 TP does: DeepSeek-V3's FP8 weights fill eight H100s)
    assert set(described) == {LLAMA_H100, "described/qwen3-32b/SM90_H100/tp2", "described/gpt-oss-120b/SM90_H100",
                              "described/deepseek-v3/SM90_H200/tp8"}
    for card in described.values():
        assert card["owned_by"] == "cascade-described"
        info = card["cascade"]["described"]
        assert info["kv_cache_tokens"] >= info["context_tokens"] == card["max_model_len"]
    gpt = described["described/gpt-oss-120b/SM90_H100"]["cascade"]["described"]
    assert (gpt["quant"], gpt["moe_quant"]) == ("bf16", "mxfp4")  # its quantization_config
    one = await client.get("/v1/models/described/qwen3-32b/H100/tp2")
    assert one.status == 200 and (await one.json())["id"] == "described/qwen3-32b/SM90_H100/tp2"
    assert (await client.get("/v1/models/described/nope/SM90_H100")).status == 404
    # every listed described model answers
    for model in described:
        assert (await _complete(client, model, 16, 2))["cascade"]["source"] == "described"  # type: ignore[index]


async def test_traced_answers_say_traced(client: TestClient, finished: FinishedSim) -> None:
    body = await _complete(client, finished.model, 6, 4)
    c = body["cascade"]
    assert c["source"] == "traced" and c["basis"]["kind"] == "traced"  # type: ignore[index]
    assert c["basis"]["gpu"] == finished.config and c["sim"] == finished.sim_id  # type: ignore[index]


async def test_built_once_per_model_and_with_the_openai_sdk(client: TestClient) -> None:
    described = client.server.app[DESCRIBED_MODELS]
    model = "described/llama-3.1-8b/SM90_H200"
    started = time.perf_counter()
    api = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="none", max_retries=0)
    first = await api.completions.create(model=model, prompt=[1, 2, 3], max_tokens=4)
    cold = time.perf_counter() - started
    builds = described.builds
    started = time.perf_counter()
    again = await api.completions.create(model=model, prompt=[1, 2, 3], max_tokens=4)
    warm = time.perf_counter() - started
    assert described.builds == builds  # built once, served from memory after
    assert first.model == again.model == model and first.usage is not None and first.usage.total_tokens == 7
    assert warm < cold
    with pytest.raises(openai.NotFoundError):
        await api.completions.create(model="described/llama-3.1-8b/nowhere", prompt="x", max_tokens=2)
