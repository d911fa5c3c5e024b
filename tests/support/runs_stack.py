"""The runs stack of the run and orchestrator tests on the real servers (nats-server, SeaweedFS).

The api and the orchestrator run in-process (their ``run()`` coroutines, in the testbed's
:class:`~programs.embedded.testbed.InProcessStack`); simulators run as real
``python -m services.simulator --once`` processes (``local`` backend) or in-process pool
workers (``pool`` backend). :func:`wait_run` and :func:`wait_sim` wait on the run and sim
records' KV watch, not on the HTTP api.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from cascade.platform import subjects
from cascade.platform.bus import connect
from cascade.platform.settings import Settings, load_settings
from cascade.platform.state import RunRecord, SimRecord, TraceRecord
from cascade.platform.storage import Storage
from programs.bench._runbed import generate_timeline, publish_trace
from programs.embedded.testbed import InProcessStack, stack_ports
from tests.support.wait import wait_for_kv

#: The api and orchestrator (+ optional pool simulators, "sim:N") in-process, restartable one
#: by one; ``bus`` is the test's own connection (for waiting on KV), open while :func:`running` is.
Stack = InProcessStack


def make_settings(s3_server: Any, nats_url: str, tmp_path: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "nats_url": nats_url, "s3_endpoint": s3_server.endpoint,
        "s3_access_key": s3_server.access_key, "s3_secret_key": s3_server.secret_key,
        "bucket": f"runs-{uuid.uuid4().hex[:10]}", "data_dir": str(tmp_path / "data"),
        "http_port": stack_ports().http, "job_ack_wait_s": 2.0, "job_max_deliver": 3,
        "drain_timeout_s": 1.0, "log_format": "json", "log_level": "warning", "samples": False,
        "orchestrator_backend": "local", "max_local_sims": 3, "nats_connect_timeout_s": 3.0,
    }
    values.update(overrides)
    return load_settings({}, **values)


def running(settings: Settings, *services: str) -> contextlib.AbstractAsyncContextManager[Stack]:
    """The testbed's in-process stack with ``services`` (an api is up once /healthz answers)."""
    return Stack.running(settings, *services, probe="/healthz", name="test-runs")


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
