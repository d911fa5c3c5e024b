"""Reads at scale: the api serves traces and runs from KV-fed indexes, paged, and a ready
trace's kernels from its bundle, without creating a JetStream consumer per request.

Real nats-server and S3 (session fixtures); the state is written the way the services write
it (``programs.bench._seed``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.keys import file_key, unit_key
from cascade.platform.settings import Settings
from cascade.platform.state import TraceRecord
from cascade.platform.storage import Storage
from cascade.platform.tracestore import FileRecord, UnitRecord
from programs.bench._seed import Seeded, big_table, seed_state
from services.api.app import create_app
from tests.support.wait import wait_until

KERNELS = 30_000


@pytest.fixture
async def seeded(bus: Bus, storage: Storage) -> Seeded:
    return await seed_state(bus, storage, traces=400, runs=250, kernels=KERNELS)


@pytest.fixture
async def client(bus: Bus, bus_settings: Settings, storage: Storage, seeded: Seeded
                 ) -> AsyncIterator[TestClient]:
    app = create_app(bus_settings.replace(samples=False), bus=bus, storage=storage)
    c = TestClient(TestServer(app))
    await c.start_server()
    try:
        yield c
    finally:
        await c.close()


async def _json(client: TestClient, path: str, status: int = 200) -> Any:
    resp = await client.get(path)
    body = await resp.json()
    assert resp.status == status, body
    return body


async def _walk(client: TestClient, path: str, key: str, limit: int) -> list[dict[str, Any]]:
    """Every entry of a paged list, following next_cursor."""
    out: list[dict[str, Any]] = []
    cursor = None
    sep = "&" if "?" in path else "?"
    for _ in range(1000):
        page = await _json(client, f"{path}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
        assert len(page[key]) <= limit
        out += page[key]
        cursor = page["next_cursor"]
        if cursor is None:
            return out
    raise AssertionError("the pages never ended")


def _newest_first(entries: list[dict[str, Any]]) -> bool:
    keys = [(e["created_at"], e["id"]) for e in entries]
    return keys == sorted(keys, reverse=True)


async def test_trace_and_run_lists_page_newest_first(client: TestClient, seeded: Seeded) -> None:
    mine = set(seeded.trace_ids)
    traces = [t for t in await _walk(client, "/api/traces", "traces", 70) if t["id"] in mine]
    assert sorted(t["id"] for t in traces) == sorted(mine)  # each once, none lost
    assert _newest_first(traces)
    first = await _json(client, "/api/traces?limit=5")
    assert len(first["traces"]) == 5 and first["total"] >= len(mine) and first["next_cursor"]

    ready = await _walk(client, "/api/traces?state=ready", "traces", 33)
    assert ready and all(t["state"] == "ready" for t in ready)
    expected_ready = {t["id"] for t in traces if t["state"] == "ready"}
    assert expected_ready <= {t["id"] for t in ready}
    named = await _json(client, f"/api/traces?name=BENCH%20{seeded.tag}%20TRACE%2012&limit=1000")
    assert sorted(t["name"] for t in named["traces"]) == sorted(
        f"bench {seeded.tag} trace {i}" for i in range(399) if str(i).startswith("12"))
    assert named["total"] == len(named["traces"])

    runs = [r for r in await _walk(client, "/api/runs", "runs", 60) if r["id"] in set(seeded.run_ids)]
    assert sorted(r["id"] for r in runs) == sorted(seeded.run_ids) and _newest_first(runs)
    done = await _json(client, f"/api/runs?state=completed&name=bench%20{seeded.tag}%20run%2024"
                               "&limit=3")
    assert [r["name"] for r in done["runs"]] == [
        f"bench {seeded.tag} run {i}" for i in (24, 240, 241)]
    assert done["total"] == 11 and done["next_cursor"]
    assert (await _json(client, f"/api/runs?state=failed&name={seeded.tag}"))["runs"] == []

    for bad in ("cursor=nope", "limit=0", "limit=1001", "state=done", "cursor=12.%20x"):
        body = await _json(client, f"/api/traces?{bad}", 400)
        assert body["field"] in ("cursor", "limit", "state"), body


async def test_reads_create_no_consumers(client: TestClient, bus: Bus, seeded: Seeded) -> None:
    big = seeded.big_trace_id
    await _json(client, f"/api/traces/{big}/kernels?limit=10")  # loads the bundle view once
    before = dict(bus.stats.jetstream_consumers_created)
    for i in range(40):
        tid = seeded.trace_ids[i * 7]
        await _json(client, f"/api/traces?limit=20&state=ready&name=trace%20{i}")
        await _json(client, f"/api/traces/{tid}")
        await _json(client, f"/api/traces/{tid}/kernels")
        await _json(client, f"/api/traces/{big}/kernels?offset={i * 500}&limit=50&sort=name")
        await _json(client, f"/api/traces/{big}/summary")
        await _json(client, f"/api/runs?limit=50&cursor={int(time.time() * 1e6)}.x")
        await _json(client, f"/api/runs/{seeded.run_ids[i]}")
        await _json(client, f"/api/traces/tr-nosuch{i}", 404)
    assert bus.stats.jetstream_consumers_created == before
    metrics = await (await client.get("/metrics")).text()
    assert 'cascade_bus_jetstream_consumers_open{purpose="kv-watch"}' in metrics
    assert "cascade_bus_jetstream_consumers_created_total" in metrics


async def test_kernel_pages_come_from_the_bundle(client: TestClient, seeded: Seeded) -> None:
    big = seeded.big_trace_id
    table = big_table(KERNELS)
    duration = np.asarray(table["duration_ns"], dtype=float)
    page = await _json(client, f"/api/traces/{big}/kernels?sort=duration_ns&order=desc"
                               "&offset=200&limit=100")
    assert page["source"] == "bundle" and page["total"] == KERNELS
    order = np.argsort(-duration, kind="stable")  # the sample's durations are all known
    assert [k["kernel_id"] for k in page["kernels"]] == (order[200:300] + 1).tolist()
    assert [k["duration_ns"] for k in page["kernels"]] == duration[order[200:300]].tolist()
    names = np.asarray(table["name"]).astype(str)
    needle = names[5][:12].lower()
    hits = [i + 1 for i, n in enumerate(names) if needle in n.lower()]
    found = await _json(client, f"/api/traces/{big}/kernels?q={needle}&limit=1000")
    assert found["total"] >= len(hits) > 0
    assert set(hits[:1000]) <= {k["kernel_id"] for k in found["kernels"]} | set(hits[1000:])
    summary = await _json(client, f"/api/traces/{big}/summary")
    assert summary["ready"] and summary["kernels"] == KERNELS
    assert summary["time_ns"] == pytest.approx(float(np.nansum(duration)))


async def test_index_sees_other_writers_and_delete_purges(client: TestClient, bus: Bus) -> None:
    kv = await bus.kv(subjects.KV_TRACES)
    now = time.time()
    tid = f"tr-other{int(now * 1000) % 10**9}"
    # written by another process while the api runs: found on the first read
    await kv.put(tid, TraceRecord(id=tid, name="from ingest", source_gpu="SM90_H100",
                                  state="preparing", created_at=now))
    for n in range(3):
        name = f"kernel-{n + 1}.traceg"
        await kv.put(file_key(tid, name), FileRecord(name=name, key=f"traces/{tid}/raw/{name}",
                                                     size=10, etag="e", kind="kernel",
                                                     unit=f"kernel-{n + 1}"))
        await kv.put(unit_key(tid, f"kernel-{n + 1}"),
                     UnitRecord(unit=f"kernel-{n + 1}", kernel_id=n + 1, name=f"k{n}",
                                state="prepared", row={"name": f"k{n}", "big": list(range(50))}))
    detail = await _json(client, f"/api/traces/{tid}")  # found at once (a miss waits for the watch)
    if len(detail["kernels"]) < 3:  # the units, written after the record, may trail it a moment

        async def all_units() -> dict[str, Any] | None:
            again = await _json(client, f"/api/traces/{tid}")
            return again if len(again["kernels"]) == 3 else None

        detail = await wait_until(all_units, 10, what=f"the api's index to show {tid}'s 3 units")
    assert detail["state"] == "preparing" and detail["progress"]["units"] == 3
    assert [k["kernel_id"] for k in detail["kernels"]] == [1, 2, 3]
    assert "row" not in detail["kernels"][0]
    progress = await _json(client, f"/api/traces/{tid}/kernels?sort=kernel_id&order=desc")
    assert progress["source"] == "progress" and [k["kernel_id"] for k in progress["kernels"]] == [3, 2, 1]

    resp = await client.delete(f"/api/traces/{tid}")
    gone = await resp.json()
    assert resp.status == 200 and gone["keys"] == 7, gone
    assert await kv.keys(f"{tid}.>") == [] and await kv.get(tid, TraceRecord) is None
    await _json(client, f"/api/traces/{tid}", 404)
    listed = await _json(client, f"/api/traces?name={tid}")
    assert listed["traces"] == [] and listed["total"] == 0


async def test_cli_lists_every_page(client: TestClient, seeded: Seeded) -> None:
    import asyncio
    import json
    import sys

    url = str(client.make_url("")).rstrip("/")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "programs.cli", "traces", "--url", url, "--name", seeded.tag,
        "--limit", "150", "--all", "--json", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    pages = json.loads(out)
    assert [len(p["traces"]) for p in pages] == [150, 150, 100]
    assert {t["id"] for p in pages for t in p["traces"]} == set(seeded.trace_ids)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "programs.cli", "runs", "--url", url, "--name", seeded.tag,
        "--state", "completed", "--limit", "5", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert len(lines) == 7 and lines[-1].startswith("5 of 250 runs; next page: --cursor ")
    assert seeded.run_ids[0] in lines[1]
