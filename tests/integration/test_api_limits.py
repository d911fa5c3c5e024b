"""Request limits of the api: Last-Event-ID values, body sizes, open event streams.

Real NATS (KV + the events stream) and real S3, a finished run written as the
services write one (:func:`tests.test_v1.make_finished_sim`).
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient

from cascade.platform.bus import Bus
from services.api.http import MAX_BODY_BYTES
from services.api.routes.runs import EVENT_STREAMS, MAX_EVENT_ID
from tests.support.fixtures_api import FinishedSim


@pytest.mark.parametrize("value", ["-5", "99999999999999999999999", "1.5", "abc", "²", " ",
                                   str(MAX_EVENT_ID + 1)])
async def test_bad_last_event_id_is_a_400(client: TestClient, finished: FinishedSim,
                                          value: str) -> None:
    resp = await client.get(f"/api/runs/{finished.run_id}/events", headers={"Last-Event-ID": value})
    if not value.strip():
        assert resp.status == 200  # empty: from the start
        return
    assert resp.status == 400, await resp.text()
    body = await resp.json()
    assert body["field"] == "Last-Event-ID" and str(MAX_EVENT_ID) in body["message"]
    q = await client.get(f"/api/runs/{finished.run_id}/events", params={"last_event_id": value})
    assert q.status == 400 and (await q.json())["field"] == "last_event_id"


async def test_last_event_id_past_the_end_streams_the_final_state(client: TestClient,
                                                                  finished: FinishedSim) -> None:
    resp = await client.get(f"/api/runs/{finished.run_id}/events",
                            headers={"Last-Event-ID": str(MAX_EVENT_ID)}, timeout=30)
    assert resp.status == 200
    text = await asyncio.wait_for(resp.text(), 30)
    assert "event: run" in text and '"state":"completed"' in text


async def test_open_event_streams_are_bounded(client: TestClient, finished: FinishedSim) -> None:
    streams = client.server.app[EVENT_STREAMS]
    streams["limit"] = streams["open"]
    try:
        resp = await client.get(f"/api/runs/{finished.run_id}/events")
        assert resp.status == 429
        body = await resp.json()
        assert body["error"] == "too_many_requests" and body["limit"] == streams["limit"]
    finally:
        streams["limit"] = 256
    ok = await client.get(f"/api/runs/{finished.run_id}/events", timeout=30)
    assert ok.status == 200
    await asyncio.wait_for(ok.text(), 30)
    assert streams["open"] == 0


async def test_body_over_the_limit_is_a_413(client: TestClient) -> None:
    resp = await client.post("/api/runs", data=b" " * (MAX_BODY_BYTES + 1),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 413
    body = await resp.json()
    assert body["error"] == "too_large" and str(MAX_BODY_BYTES) in body["message"]


@pytest.mark.parametrize(("field", "value", "range_text"), [
    ("sms", 1_200_000, "from 1 to 1024"),
    ("boost_clock_mhz", -3.4e16, "from 100 to 5000"),
    ("launch_overhead_ns", 1e300, "from 10 to 1e+06"),
])
async def test_post_config_refuses_implausible_specs(client: TestClient, field: str, value: float,
                                                     range_text: str) -> None:
    base = await (await client.get("/api/configs/SM90_H100")).json()
    spec = {**base["spec"], "id": "IMPLAUSIBLE_X", "aliases": [], field: value}
    resp = await client.post("/api/configs", json=spec)
    assert resp.status == 400, await resp.text()
    body = await resp.json()
    assert field in body["message"] and range_text in body["message"]
    listed = await (await client.get("/api/configs")).json()
    assert "IMPLAUSIBLE_X" not in {c["id"] for c in listed["configs"]}


async def test_domain_metrics_cover_the_stack(client: TestClient, finished: FinishedSim,
                                              bus: Bus) -> None:
    import time

    from prometheus_client.parser import text_string_to_metric_families

    from cascade.platform import subjects
    from cascade.platform.state import SimRecord
    from services.api.sim_models import SIM_MODELS

    sims = await bus.kv(subjects.KV_SIMS)
    now = time.time()
    slow_id = f"{finished.run_id}-slow-r0"
    await sims.put(slow_id, SimRecord(id=slow_id, run_id=finished.run_id, config="SM80_A100",
                                      state="completed", started_at=now - 12.5, finished_at=now))
    models = client.server.app[SIM_MODELS]
    await models.wait_until(lambda: slow_id in models._sims, timeout=10.0)
    text = await (await client.get("/metrics")).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(name: str, **labels: str) -> float:
        return next(s.value for f in families.values() for s in f.samples
                    if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("cascade_runs", state="completed") >= 1
    assert value("cascade_sims", state="completed") >= 2
    assert value("cascade_sim_duration_max_seconds") >= 12.5
    assert value("cascade_sim_duration_seconds_count") >= 1
    assert {"cascade_queue_pending", "cascade_queue_in_flight"} <= set(families)
    v1 = await client.post("/v1/completions", json={"model": finished.model, "prompt": [1, 2]})
    assert v1.status == 200
    text = await (await client.get("/metrics")).text()
    assert 'cascade_http_request_seconds_count{method="POST",route="/v1/completions"}' in text
