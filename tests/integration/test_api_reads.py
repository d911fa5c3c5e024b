"""The api's reads of one run answer what KV holds now, not what its KV-fed index last saw.

A client that watched a run finish (its event stream, or KV) and then reads the run must see
it finished: the index that serves lists and ``/v1`` models can trail KV by a moment.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.settings import Settings
from cascade.platform.state import RunRecord, SimRecord
from cascade.platform.storage import Storage
from services.api.app import create_app
from services.api.sim_models import sim_models
from tests.support.wait import wait_until


async def test_run_detail_reads_kv_when_the_index_trails(bus: Bus, bus_settings: Settings,
                                                          storage: Storage,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(bus_settings, bus=bus, storage=storage)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        runs, sims = await bus.kv(subjects.KV_RUNS), await bus.kv(subjects.KV_SIMS)
        now = time.time()
        sim = SimRecord(id="run-trail0001-a-r0", run_id="run-trail0001", config="SM80_A100",
                        state="running", percent=40.0)
        run = RunRecord(id="run-trail0001", trace_id="tr-trail", configs=["SM80_A100"],
                        state="running", created_at=now, updated_at=now, sim_ids=[sim.id])
        await sims.put(sim.id, sim)
        await runs.put(run.id, run)
        index = sim_models(app)
        await wait_until(lambda: index.loaded() and index.sim_record(sim.id) is not None
                         and any(r.id == run.id for r in index.run_records()),
                         what="the api's index to see the running run")
        # from here on the index trails KV: its watches see changes but apply none
        monkeypatch.setattr(index, "_apply", lambda what, entry: None)
        await sims.put(sim.id, msgspec.structs.replace(sim, state="completed", percent=100.0,
                                                       finished_at=now + 1))
        await runs.put(run.id, msgspec.structs.replace(run, state="completed", finished_at=now + 1))
        await asyncio.sleep(0.3)  # let the watches deliver (and drop) the changes
        assert index.loaded()
        assert [r.state for r in index.run_records() if r.id == run.id] == ["running"]

        resp = await client.get(f"/api/runs/{run.id}")
        body = await resp.json()
        assert resp.status == 200, body
        assert body["run"]["state"] == "completed"
        assert [(s["state"], s["percent"]) for s in body["sims"]] == [("completed", 100.0)]

        resp = await client.get("/api/runs/run-nosuch0001")
        assert resp.status == 404
        assert "run-nosuch0001" in (await resp.json())["message"]
    finally:
        await client.close()


async def test_a_finished_run_is_served_from_the_index(bus: Bus, bus_settings: Settings,
                                                        storage: Storage,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the index shows a run finished, its detail needs no KV get of the run (its state
    never changes again); an unfinished one still reads KV."""
    app = create_app(bus_settings, bus=bus, storage=storage)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        runs = await bus.kv(subjects.KV_RUNS)
        now = time.time()
        done = RunRecord(id="run-done00001", trace_id="tr-done", configs=["SM80_A100"],
                         state="completed", created_at=now, updated_at=now, finished_at=now)
        live = RunRecord(id="run-live00001", trace_id="tr-live", configs=["SM80_A100"],
                         state="running", created_at=now, updated_at=now)
        await runs.put(done.id, done)
        await runs.put(live.id, live)
        index = sim_models(app)
        await wait_until(lambda: index.loaded() and index.run_record(done.id) is not None
                         and index.run_record(live.id) is not None,
                         what="the api's index to see both runs")
        got: list[str] = []
        kv_type = type(runs)
        real_get = kv_type.get

        async def counting_get(self: object, key: str, *args: object, **kwargs: object) -> object:
            got.append(key)
            return await real_get(self, key, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(kv_type, "get", counting_get)
        resp = await client.get(f"/api/runs/{done.id}")
        assert resp.status == 200 and (await resp.json())["run"]["state"] == "completed"
        assert done.id not in got
        resp = await client.get(f"/api/runs/{live.id}")
        assert resp.status == 200 and (await resp.json())["run"]["state"] == "running"
        assert live.id in got
    finally:
        await client.close()

