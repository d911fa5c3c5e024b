"""The runs stack of the run and orchestrator tests on the real servers (nats-server, SeaweedFS).

The api and the orchestrator run in-process (their ``run()`` coroutines); simulators run as
real ``python -m services.simulator --once`` processes (``local`` backend) or in-process pool
workers (``pool`` backend). :func:`wait_run` and :func:`wait_sim` wait on the run and sim
records' KV watch, not on the HTTP api.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from cascade.platform import subjects
from cascade.platform.bus import Bus, connect
from cascade.platform.settings import Settings, load_settings
from cascade.platform.state import RunRecord, SimRecord, TraceRecord
from cascade.platform.storage import Storage
from programs.bench._runbed import generate_timeline, publish_trace
from tests.support.wait import wait_for_kv, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """api + orchestrator (+ optional pool simulators) in-process, restartable one by one.

    ``bus`` is the test's own connection (for waiting on KV), open while :func:`running` is.
    """

    def __init__(self, settings: Settings, bus: Bus) -> None:
        self.settings = settings
        self.bus = bus
        self.base = f"http://127.0.0.1:{settings.http_port}"
        self.stops: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self, name: str) -> None:
        from services.api import run as api_run
        from services.orchestrator import run as orch_run
        from services.simulator import run as sim_run

        fn = {"api": api_run, "orchestrator": orch_run}.get(name.split(":")[0], sim_run)
        stop = asyncio.Event()
        self.stops[name] = stop
        self.tasks[name] = asyncio.create_task(fn(self.settings, stop=stop))
        if name == "api":
            await self.wait_http()

    async def stop(self, name: str) -> None:
        self.stops[name].set()
        await asyncio.wait_for(self.tasks.pop(name), 30)

    async def close(self) -> None:
        for name in list(self.tasks):
            await self.stop(name)

    async def wait_http(self) -> None:
        async with aiohttp.ClientSession() as s:

            async def healthy() -> bool:
                task = self.tasks["api"]
                if task.done():
                    task.result()  # the api's own error, not a timeout
                async with s.get(self.base + "/healthz") as r:
                    return r.status == 200

            await wait_until(healthy, 20, what=f"the api's {self.base}/healthz to answer 200",
                             interval=0.1, ignore=(aiohttp.ClientError,))


def make_settings(s3_server: Any, nats_url: str, tmp_path: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "nats_url": nats_url, "s3_endpoint": s3_server.endpoint,
        "s3_access_key": s3_server.access_key, "s3_secret_key": s3_server.secret_key,
        "bucket": f"runs-{uuid.uuid4().hex[:10]}", "data_dir": str(tmp_path / "data"),
        "http_port": _free_port(), "job_ack_wait_s": 2.0, "job_max_deliver": 3,
        "drain_timeout_s": 1.0, "log_format": "json", "log_level": "warning", "samples": False,
        "orchestrator_backend": "local", "max_local_sims": 3, "nats_connect_timeout_s": 3.0,
    }
    values.update(overrides)
    return load_settings({}, **values)


@contextlib.asynccontextmanager
async def running(settings: Settings, *services: str) -> AsyncIterator[Stack]:
    async with Storage.from_settings(settings) as st:
        await st.ensure_bucket()
    bus = await connect(settings, name="test-runs")
    await bus.ensure_streams()
    stack = Stack(settings, bus)
    try:
        for name in services:
            await stack.start(name)
        yield stack
    finally:
        try:
            await stack.close()
        finally:
            await bus.close()


async def make_trace(settings: Settings, n_kernels: int = 1500, *, source_gpu: str = "SM80_A100",
                     **kw: Any) -> TraceRecord:
    trace_id = f"tr-{uuid.uuid4().hex[:8]}"
    table = generate_timeline(n_kernels)
    span_ms = float((table["start_ns"] + table["duration_ns"]).max() - table["host_launch_ns"].min()) / 1e6
    bus = await connect(settings)
    await bus.ensure_streams()
    try:
        async with Storage.from_settings(settings) as st:
            return await publish_trace(bus, st, trace_id, table, source_gpu=source_gpu,
                                       baseline={"e2e_ms": span_ms * 0.98}, **kw)
    finally:
        await bus.close()


async def post(base: str, path: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(base + path, json=body) as r:
        return r.status, await r.json()


async def get(base: str, path: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(base + path) as r:
        assert r.status == 200, await r.text()
        if r.content_type == "text/csv":
            return await r.text()
        return await r.json()


async def read_sse(url: str, *, headers: dict[str, str] | None = None, timeout: float = 120) -> list[dict[str, Any]]:
    """Every SSE event until the server ends the stream: ``{"id", "event", "data"}``."""
    events: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, \
            s.get(url, headers=headers) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for raw in r.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if cur:
                    events.append(cur)
                cur = {}
            elif line.startswith("id: "):
                cur["id"] = int(line[4:])
            elif line.startswith("event: "):
                cur["event"] = line[7:]
            elif line.startswith("data: "):
                cur["data"] = json.loads(line[6:])
    return events


async def wait_run(stack: Stack, run_id: str, states: set[str], timeout: float = 120) -> dict[str, Any]:
    """Once the run's KV record is in one of ``states``: the api's detail of it."""
    await wait_for_kv(stack.bus, subjects.KV_RUNS, run_id, lambda r: r.state in states,
                      type_=RunRecord, timeout=timeout)

    # the api's read of one run answers what KV holds now (not its index, which can trail)
    detail: dict[str, Any] = await get(stack.base, f"/api/runs/{run_id}")
    assert detail["run"]["state"] in states, detail
    return detail


async def wait_sim(stack: Stack, run_id: str, pred: Callable[[SimRecord], bool],
                   timeout: float = 60) -> SimRecord:
    """The first sim record of ``run_id`` (any replica or config) for which ``pred`` holds."""
    return await wait_for_kv(stack.bus, subjects.KV_SIMS, ">",
                             lambda s: s.run_id == run_id and pred(s), type_=SimRecord, timeout=timeout)
