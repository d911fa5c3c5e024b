"""OpenAI-style /v1 estimates against a finished sim (real NATS KV + real S3 results).

The finished sim is written the way the simulator writes one (``cascade.runs.results``),
from the synthetic OPT-125m sample timeline with its source durations as the
prediction, so its calibration range is the sample's: a six-token prefill and decode
contexts 7 to 37.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.settings import Settings
from cascade.platform.state import SimRecord
from cascade.platform.storage import Storage
from cascade.runs.results import SimResult
from services.api.sim_models import SIM_MODELS
from tests.support.fixtures_api import FinishedSim, start_client

# ---- OpenAI response shapes (strict mirrors of the documented schema) ------------------------

class Usage(msgspec.Struct, forbid_unknown_fields=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    logprobs: None
    finish_reason: Literal["stop", "length", "content_filter"]


class Completion(msgspec.Struct):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ChatMessage(msgspec.Struct):
    role: Literal["assistant"]
    content: str | None


class ChatChoice(msgspec.Struct):
    index: int
    message: ChatMessage
    logprobs: None
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


class ChatCompletion(msgspec.Struct):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ModelCard(msgspec.Struct):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: Literal["list"]
    data: list[ModelCard]


class ErrorBody(msgspec.Struct, forbid_unknown_fields=False):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(msgspec.Struct):
    error: ErrorBody


def _step_ms(result: SimResult, kind: str) -> list[float]:
    return [(s.host_ns + s.gpu_ns) / 1e6 for s in result.steps if s.kind == kind]


# ---- tests -------------------------------------------------------------------------------------

async def test_models_lists_finished_sim_in_openai_shape(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.get("/v1/models")
    assert resp.status == 200
    body = msgspec.json.decode(await resp.read(), type=ModelList)
    ids = [m.id for m in body.data]
    assert finished.model in ids
    card = next(m for m in body.data if m.id == finished.model)
    assert card.owned_by == "cascade" and card.created > 0


async def test_completion_with_token_ids_is_exact_and_calibrated(client: TestClient,
                                                                 finished: FinishedSim) -> None:
    resp = await client.post("/v1/completions", json={
        "model": finished.model, "prompt": [2, 31414, 6, 127, 766, 16], "max_tokens": 32,
        "cascade_itl": "full"})
    assert resp.status == 200, await resp.text()
    raw = await resp.read()
    shaped = msgspec.json.decode(raw, type=Completion)
    assert shaped.choices[0].text == "" and shaped.choices[0].finish_reason == "length"
    assert (shaped.usage.prompt_tokens, shaped.usage.completion_tokens, shaped.usage.total_tokens) == (6, 32, 38)
    body = json.loads(raw)
    m, c = body["metrics"], body["cascade"]
    assert c["extrapolated"] is False and c["extrapolation"] == {}
    assert c["prompt_tokens_approximate"] is False
    assert c["config"] == finished.config and c["sim"] == finished.sim_id
    assert c["calibration_range"]["prefill_tokens_min"] == 6
    assert (c["calibration_range"]["decode_context_min"], c["calibration_range"]["decode_context_max"]) == (7, 37)
    # and which kernel model, spec and calibration timed the sim, with their measured accuracy
    k = c["kernels"]
    assert k["model"] == finished.result.model and k["spec_hash"] == finished.result.spec_hash
    assert k["calibration"] == finished.result.calibration and k["calibration"].startswith("cascade-default@")
    assert k["kernel_count"] == finished.result.kernel_count > 0
    assert k["accuracy"]["mape_pct"] == 0.0 and "measured durations kept" in k["accuracy"]["basis"]
    assert k["extrapolated"] == finished.result.extrapolated
    # the fit reproduces the simulated steps it was calibrated on
    prefill = _step_ms(finished.result, "prefill")
    decode = _step_ms(finished.result, "decode")
    assert m["ttft_ms"] == pytest.approx(prefill[0], rel=1e-6)
    assert len(m["itl_ms"]) == 31
    assert m["tpot_ms"] == pytest.approx(float(np.mean(decode)), rel=0.02)
    assert m["e2e_ms"] == pytest.approx(m["ttft_ms"] + sum(m["itl_ms"]), rel=1e-9)
    assert m["queue_ms"] == 0.0
    assert m["itl_mean_ms"] == pytest.approx(m["tpot_ms"], rel=1e-9)


async def test_2000_token_prompt_is_flagged_extrapolated(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.post("/v1/completions", json={
        "model": finished.model, "prompt": list(range(2000)), "max_tokens": 4})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    c = body["cascade"]
    assert c["extrapolated"] is True
    far = c["extrapolation"]["prefill_tokens"]
    assert far["value"] == 2000 and far["high"] == 6 and far["beyond"] == 1994
    assert c["extrapolation"]["decode_context"]["value"] == 2003
    assert c["method"] == "kernel-model"
    small = await (await client.post("/v1/completions", json={
        "model": finished.model, "prompt": list(range(6)), "max_tokens": 4})).json()
    assert body["metrics"]["ttft_ms"] > small["metrics"]["ttft_ms"]


async def test_text_prompt_is_approximate(client: TestClient, finished: FinishedSim) -> None:
    body = await (await client.post("/v1/completions", json={
        "model": finished.model, "prompt": "Hello, my name is", "max_tokens": 8})).json()
    assert body["usage"]["prompt_tokens"] == 5
    assert body["cascade"]["prompt_tokens_approximate"] is True
    two = await (await client.post("/v1/completions", json={
        "model": finished.model, "prompt": ["Hello", "a b c d e f g"], "max_tokens": 2})).json()
    assert [ch["index"] for ch in two["choices"]] == [0, 1]
    assert two["usage"]["prompt_tokens"] == 2 + 7  # "Hello": 5 characters / 4, rounded up
    assert two["choices"][1]["cascade"]["prompt_tokens_approximate"] is True


async def test_chat_completion_shape(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.post("/v1/chat/completions", json={
        "model": finished.model, "max_tokens": 10, "temperature": 0.7,
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]})
    assert resp.status == 200, await resp.text()
    raw = await resp.read()
    shaped = msgspec.json.decode(raw, type=ChatCompletion)
    assert shaped.choices[0].message.content == ""
    assert shaped.usage.completion_tokens == 10
    body = json.loads(raw)
    assert body["cascade"]["prompt_tokens_approximate"] is True
    assert body["metrics"]["itl_count"] == 9 and "itl_ms" not in body["metrics"]


async def test_stream_carries_per_token_timings(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.post("/v1/completions", json={
        "model": finished.model, "prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    text = await resp.text()
    events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    tokens = [c for c in chunks if c["choices"]]
    assert len(tokens) == 5
    assert all(c["object"] == "text_completion" for c in chunks)
    times = [c["cascade_token"]["time_ms"] for c in tokens]
    assert times == sorted(times) and times[0] > 0
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 4 + ["length"]
    assert tokens[-1]["metrics"]["e2e_ms"] == pytest.approx(times[-1])
    assert chunks[-1]["usage"] == {"prompt_tokens": 6, "completion_tokens": 5, "total_tokens": 11}
    chat = await client.post("/v1/chat/completions", json={
        "model": finished.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "stream": True})
    chat_events = [json.loads(line[6:]) for line in (await chat.text()).split("\n")
                   if line.startswith("data: {")]
    assert chat_events[0]["object"] == "chat.completion.chunk"
    assert chat_events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


async def test_paced_stream_takes_the_simulated_time(client: TestClient, finished: FinishedSim) -> None:
    started = time.perf_counter()
    resp = await client.post("/v1/completions", json={
        "model": finished.model, "prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 20, "stream": True,
        "cascade_pace": True})
    text = await resp.text()
    elapsed_ms = (time.perf_counter() - started) * 1000
    last = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")][-1]
    assert elapsed_ms >= last["metrics"]["e2e_ms"] * 0.95


async def test_errors_use_openai_shape(client: TestClient, finished: FinishedSim) -> None:
    resp = await client.post("/v1/completions", json={"model": "cascade/nope/SM90_H100", "prompt": "x"})
    assert resp.status == 404
    err = msgspec.json.decode(await resp.read(), type=ErrorResponse).error
    assert err.code == "model_not_found" and finished.model in err.message
    resp = await client.post("/v1/completions", json={"model": finished.model, "prompt": "x", "n": 2})
    assert resp.status == 400
    assert msgspec.json.decode(await resp.read(), type=ErrorResponse).error.param == "n"
    resp = await client.post("/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert "malformed JSON" in msgspec.json.decode(await resp.read(), type=ErrorResponse).error.message
    resp = await client.post("/v1/completions", json={"model": finished.model, "prompt": [1, "a"]})
    assert resp.status == 400
    assert msgspec.json.decode(await resp.read(), type=ErrorResponse).error.param == "prompt"
    resp = await client.post("/v1/completions", json={"model": "gpt-4", "prompt": "x"})
    assert resp.status == 404
    resp = await client.post("/v1/chat/completions", json={"model": finished.model, "messages": []})
    assert resp.status == 400
    assert msgspec.json.decode(await resp.read(), type=ErrorResponse).error.param == "messages"


async def test_step_model_cached_in_memory_and_s3_and_refit_on_change(
        client: TestClient, finished: FinishedSim, bus: Bus, storage: Storage) -> None:
    models = client.server.app[SIM_MODELS]
    req = {"model": finished.model, "prompt": [1, 2, 3], "max_tokens": 2}
    await client.post("/v1/completions", json=req)
    builds = models.cache.builds
    await client.post("/v1/completions", json=req)
    assert models.cache.builds == builds  # served from memory
    assert await storage.exists(f"results/{finished.run_id}/{finished.sim_id}/stepmodel.json")
    sims = await bus.kv(subjects.KV_SIMS)
    entry = await sims.get(finished.sim_id, SimRecord)
    assert entry is not None
    await sims.put(finished.sim_id, msgspec.structs.replace(entry.value, finished_at=time.time() + 5,
                                                            attempts=2))

    def updated() -> bool:
        hit = models.find(finished.model)
        return hit is not None and hit.sim.attempts == 2

    await models.wait_until(updated, timeout=10.0)  # the KV watch delivers the change
    await client.post("/v1/completions", json=req)
    assert models.cache.builds == builds + 1


async def test_tokenizer_json_counts_exactly(bus: Bus, bus_settings: Settings, storage: Storage,
                                             finished: FinishedSim, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "hello": 1, "my": 2, "name": 3, "is": 4, ",": 5}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    monkeypatch.setenv("CASCADE_TOKENIZER", str(path))
    c = await start_client(bus_settings.replace(samples=False), bus, storage)
    try:
        body = await (await c.post("/v1/completions", json={
            "model": finished.model, "prompt": "hello , my name is a b c", "max_tokens": 2})).json()
    finally:
        await c.close()
    assert body["usage"]["prompt_tokens"] == 8
    assert body["cascade"]["prompt_tokens_approximate"] is False


async def test_repeated_answers_are_identical_but_for_id(client: TestClient, finished: FinishedSim) -> None:
    """Memoised answer fragments give byte-identical metrics/cascade objects on every request."""
    req = {"model": finished.model, "prompt": [5, 6, 7], "max_tokens": 5}
    first = await (await client.post("/v1/completions", json=req)).json()
    other = await (await client.post("/v1/completions", json={**req, "max_tokens": 6})).json()
    again = await (await client.post("/v1/completions", json=req)).json()
    assert first["id"] != again["id"] and first["id"].startswith("cmpl-") and len(first["id"]) == 29
    for key in ("metrics", "cascade", "usage", "choices", "model", "object"):
        assert first[key] == again[key]
    assert other["metrics"]["itl_count"] == 5 and first["metrics"]["itl_count"] == 4
    approx = await (await client.post("/v1/completions", json={**req, "prompt": "a b c"})).json()
    assert approx["cascade"]["prompt_tokens_approximate"] is True
    assert first["cascade"]["prompt_tokens_approximate"] is False
    assert approx["metrics"] == first["metrics"]
