"""/v1 limits and OpenAI compatibility, checked with the official ``openai`` SDK where it applies.

Real NATS KV + real S3 results (the finished sim of :mod:`tests.test_v1`); the trace's
workload is OPT-125m, whose context window is 2,048 tokens.
"""

from __future__ import annotations

import openai
import pytest
from aiohttp.test_utils import TestClient

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.storage import Storage
from services.api.sim_models import SIM_MODELS
from tests.support.fixtures_api import FinishedSim, make_finished_sim

TOKEN = "v1-limits-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api_tokens() -> list[str]:
    return [TOKEN]


def sdk(client: TestClient, key: str = TOKEN) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key, max_retries=0)


async def test_prompt_and_max_tokens_bounded_by_the_context(client: TestClient,
                                                            finished: FinishedSim) -> None:
    api = sdk(client)
    with pytest.raises(openai.BadRequestError) as err:
        await api.completions.create(model=finished.model, prompt=list(range(45_000)), max_tokens=4)
    body = err.value.body
    assert isinstance(body, dict)
    assert body["code"] == "context_length_exceeded" and body["param"] == "prompt"
    assert "2048" in body["message"] and "45004" in body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        await api.completions.create(model=finished.model, prompt=[1, 2], max_tokens=1_000_000)
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "max_tokens"
    assert "2047" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        await api.chat.completions.create(model=finished.model, max_tokens=2040, messages=[
            {"role": "user", "content": "word " * 100}])
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "messages"
    # exactly the context is fine
    ok = await api.completions.create(model=finished.model, prompt=list(range(2000)), max_tokens=48)
    assert ok.usage is not None and ok.usage.total_tokens == 2048


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", 5.0), ("temperature", -0.1), ("top_p", 1.5), ("top_p", -1.0),
    ("presence_penalty", 3.0), ("frequency_penalty", -2.5),
])
async def test_sampling_ranges(client: TestClient, finished: FinishedSim, field: str,
                               value: float) -> None:
    resp = await client.post("/v1/completions", json={
        "model": finished.model, "prompt": "hi", field: value}, headers=AUTH)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == field and "between" in err["message"]
    assert set(err) >= {"message", "type", "param", "code"}


async def test_n_out_of_range(client: TestClient, finished: FinishedSim) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        await sdk(client).completions.create(model=finished.model, prompt="x", n=0)
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "n"


async def test_itl_summarised_unless_full(client: TestClient, finished: FinishedSim) -> None:
    req = {"model": finished.model, "prompt": [1, 2, 3], "max_tokens": 200}
    summary = (await (await client.post("/v1/completions", json=req, headers=AUTH)).json())["metrics"]
    assert "itl_ms" not in summary and summary["itl_count"] == 199
    assert summary["itl_min_ms"] <= summary["itl_p50_ms"] <= summary["itl_p90_ms"] \
        <= summary["itl_p99_ms"] <= summary["itl_max_ms"]
    full = (await (await client.post("/v1/completions", json={**req, "cascade_itl": "full"},
                                          headers=AUTH)).json())
    gaps = full["metrics"]["itl_ms"]
    assert len(gaps) == 199 and max(gaps) == summary["itl_max_ms"]
    bad = await client.post("/v1/completions", json={**req, "cascade_itl": "all"}, headers=AUTH)
    assert bad.status == 400 and (await bad.json())["error"]["param"] == "cascade_itl"


async def test_sdk_streams_a_long_answer(client: TestClient, finished: FinishedSim) -> None:
    stream = await sdk(client).completions.create(model=finished.model, prompt=[1, 2, 3],
                                                  max_tokens=1500, stream=True)
    chunks = [c async for c in stream]
    assert len(chunks) == 1500
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_every_v1_error_in_openai_shape(client: TestClient, finished: FinishedSim) -> None:
    with pytest.raises(openai.AuthenticationError) as auth:
        await sdk(client, key="wrong").completions.create(model=finished.model, prompt="x")
    assert isinstance(auth.value.body, dict) and "bearer token" in auth.value.body["message"]
    assert auth.value.body["type"] == "authentication_error"
    for method, path in (("GET", "/v1/nope"), ("POST", "/v1/embeddings"), ("GET", "/v1")):
        resp = await client.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status in (404, 405), path
        err = (await resp.json())["error"]
        assert set(err) == {"message", "type", "param", "code"} and path in err["message"]
    resp = await client.get("/v1/completions", headers=AUTH)
    assert resp.status == 405 and "type" in (await resp.json())["error"]
    resp = await client.post("/v1/completions", data=b"x" * (9 * 1024 * 1024),
                             headers={"Authorization": f"Bearer {TOKEN}",
                                      "Content-Type": "application/json"})
    assert resp.status == 413 and (await resp.json())["error"]["type"] == "invalid_request_error"
    # the rest of the api keeps its own shape
    resp = await client.get("/api/nope")
    assert (await resp.json())["error"] == "not_found"


async def test_every_listed_model_retrievable(client: TestClient, finished: FinishedSim) -> None:
    api = sdk(client)
    listed = [m.id async for m in api.models.list()]
    assert finished.model in listed
    for mid in listed:
        card = await api.models.retrieve(mid)
        assert card.id == mid
        assert card.owned_by == ("cascade-described" if mid.startswith("described/") else "cascade")
    card_body = await (await client.get(f"/v1/models/{finished.model}")).json()
    assert card_body["max_model_len"] == 2048
    with pytest.raises(openai.NotFoundError):
        await api.models.retrieve("cascade/nope/SM90_H100")


async def test_only_servable_models_listed(client: TestClient, finished: FinishedSim, bus: Bus,
                                           storage: Storage) -> None:
    stepless = await make_finished_sim(bus, storage, steps=[])
    orphan = await make_finished_sim(bus, storage)
    traces = await bus.kv(subjects.KV_TRACES)
    await traces.delete(orphan.trace_id)
    models = client.server.app[SIM_MODELS]
    await models.wait_until(lambda: models.find(orphan.model) is None
                            and models.find(stepless.model) is not None, timeout=10.0)
    listed = [m.id async for m in sdk(client).models.list()]
    assert finished.model in listed
    assert stepless.model not in listed and orphan.model not in listed
    resp = await client.get(f"/v1/models/{orphan.model}")
    assert resp.status == 404


async def test_sdk_sync_and_async_parse(client: TestClient, finished: FinishedSim) -> None:
    api = sdk(client)
    comp = await api.completions.create(model=finished.model, prompt="Hello", max_tokens=3,
                                        temperature=0.7, top_p=0.9)
    assert comp.choices[0].finish_reason == "length" and comp.usage is not None
    chat = await api.chat.completions.create(model=finished.model, max_tokens=3,
                                             messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.role == "assistant"
