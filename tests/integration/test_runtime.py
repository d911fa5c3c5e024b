"""Service runtime: micro discovery/status, metrics, SIGTERM drain, exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.settings import Settings
from programs.embedded.ports import free_port
from services import ingest, orchestrator
from tests.support.fixtures_nats import nats_settings, unique
from tests.support.paths import REPO
from tests.support.wait import wait_until


async def _wait_for_service(bus: Bus, service: str, *, instance: str | None = None,
                            endpoint: str | None = None, timeout: float = 20.0) -> dict:
    """The service's INFO answer; with ``endpoint``, once that endpoint is registered too (the
    micro service answers INFO as soon as it exists, before its endpoints are added)."""

    async def found() -> dict | None:
        for reply in await bus.discover_services("INFO", timeout=0.3):
            meta = reply.get("metadata") or {}
            if reply.get("name") == subjects.micro_name(service) and (
                instance is None or meta.get("instance", "").endswith(f":{instance}")
            ) and (endpoint is None
                   or any(e.get("subject") == endpoint for e in reply.get("endpoints") or [])):
                return reply
        return None

    what = f"service {service} (instance {instance or 'any'}, endpoint {endpoint or 'any'}) to answer $SRV.INFO"
    return await wait_until(found, timeout, what=what, interval=0)


async def test_service_registers_micro_status_and_metrics(bus: Bus, bus_settings: Settings) -> None:
    metrics_port = free_port()
    name = unique("svc")
    settings = bus_settings.replace(metrics_port=metrics_port, service_name=name)
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(settings, bus=bus, stop=stop))
    try:
        status_subject = subjects.svc_endpoint("ingest", "status")
        info = await _wait_for_service(bus, "ingest", instance=str(os.getpid()),
                                       endpoint=status_subject)
        reply = await bus.nc.request(status_subject, b"", timeout=2)
        status = json.loads(reply.data)
        assert status["service"] == "ingest"
        assert status["healthy"] is True
        assert status["role"] == "ingest" and status["started"] is True
        stats = [r for r in await bus.discover_services("STATS")
                 if r["name"] == "cascade-ingest" and r["id"] == info["id"]]
        assert stats and stats[0]["endpoints"][0]["data"]["service"] == "ingest"
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp,
        ):
            assert resp.status == 200
            text = await resp.text()
        assert 'cascade_service_info{instance=' in text and 'service="ingest"' in text
        assert "cascade_bus_connected 1.0" in text
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert task.exception() is None
    assert bus.is_connected  # a bus passed in is not closed by the service


def _spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(extra)
    return env


@pytest.mark.parametrize("service", ["orchestrator", "api"])
async def test_sigterm_drains_and_exits_zero(
    bus: Bus, nats_url: str, tmp_path: Path, service: str
) -> None:
    env = _env(
        CASCADE_NATS_URL=nats_url,
        CASCADE_HTTP_PORT=str(free_port()),
        CASCADE_LOG_FORMAT="json",
        CASCADE_DRAIN_TIMEOUT_S="2",
    )
    log_path = tmp_path / f"{service}.log"
    proc = await asyncio.to_thread(_spawn, [sys.executable, "-m", f"services.{service}"], env, log_path)
    try:
        await _wait_for_service(bus, service, instance=str(proc.pid))
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    events = [(line.get("service"), line["event"]) for line in lines]
    assert rc == 0, log_path.read_text()
    assert (service, "service stopping") in events
    assert (service, "service stopped") in events


def test_service_main_exits_1_when_bus_unreachable() -> None:
    port = free_port()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "services.prepare"], check=False, cwd=REPO, capture_output=True, text=True,
        env=_env(CASCADE_NATS_URL=f"nats://127.0.0.1:{port}", CASCADE_NATS_CONNECT_TIMEOUT_S="1"),
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"nats://127.0.0.1:{port}" in proc.stderr
    assert time.monotonic() - started < 15


async def test_run_owns_and_closes_its_own_bus(nats_url: str) -> None:
    settings = nats_settings(nats_url)
    stop = asyncio.Event()
    task = asyncio.create_task(orchestrator.run(settings, stop=stop))
    from cascade.platform.bus import connect

    probe = await connect(settings)
    try:
        await _wait_for_service(probe, "orchestrator", instance=str(os.getpid()))
        stop.set()
        await asyncio.wait_for(task, 10)
        replies = await probe.discover_services("PING", timeout=0.3)
        assert all(r.get("metadata", {}).get("instance", "") != f"{socket.gethostname()}:{os.getpid()}"
                   or r.get("name") != "cascade-orchestrator" for r in replies)
    finally:
        await probe.close()


async def test_stop_hands_back_in_flight_jobs(bus: Bus, bus_settings: Settings) -> None:
    from cascade.platform.bus import Delivery
    from cascade.platform.messages import SimJob
    from cascade.platform.runtime import ServiceContext, serve

    subject, durable = f"cascade.jobs.{unique('rt')}", unique("dur")
    started = asyncio.Event()
    settings = bus_settings.replace(drain_timeout_s=0.5)

    async def stuck(job: SimJob, delivery: Delivery) -> None:
        started.set()
        await asyncio.Event().wait()

    async def setup(ctx: ServiceContext) -> None:
        await ctx.run_worker(subject, durable, SimJob, stuck, ack_wait=30)

    stop = asyncio.Event()
    task = asyncio.create_task(serve("simulator", settings, setup, bus=bus, stop=stop,
                                     install_signals=False))
    job = SimJob(run_id="r", sim_id="handed-back", trace_id="t", bundle_key="b/", config="SM90_H100")
    await bus.publish(subject, job, msg_id=unique())
    await asyncio.wait_for(started.wait(), 10)
    stop.set()
    await asyncio.wait_for(task, 10)

    got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    async def works(job: SimJob, delivery: Delivery) -> None:
        await got.put((job.sim_id, delivery.attempt))

    worker = await bus.run_worker(subject, durable, SimJob, works, ack_wait=30)
    # Handed back with a nak, so it comes back at once rather than after the 30 s ack wait.
    assert await asyncio.wait_for(got.get(), 5) == ("handed-back", 2)
    await worker.stop()
    await bus.jsm.delete_consumer("CASCADE_JOBS", durable)
