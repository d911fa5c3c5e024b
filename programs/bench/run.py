"""`cascade bench run`: runs end to end on a throw-away embedded stack, with figures.

Starts ``nats-server`` and SeaweedFS (``weed mini``) in a temporary directory
on free ports, runs the api and the orchestrator in this process (real HTTP,
real bus, real S3; simulators are real ``--once`` processes of the ``local``
backend), publishes a generated N-kernel timeline bundle, then measures:

1. simulator start to first progress event: one job queued, one
   ``python -m services.simulator --once`` process started by hand, time to its
   first ``SimProgress`` on the bus;
2. a C-config x R-replica run end to end: ``POST /api/runs`` to the run's final
   event on its SSE stream;
3. progress lag to K concurrent SSE clients on a paced run: receive time minus
   the event's creation time (``at``), over every event and client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

NAME = "run"
HELP = "time a configs x replicas run end to end, SSE progress lag and simulator start-up"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench run``."""
    parser.add_argument("--kernels", type=int, default=10_000, help="kernels in the bundle (10000)")
    parser.add_argument("--configs", default="SM80_A100,SM90_H100,SM90_H200",
                        help="comma-separated GPU configs (SM80_A100,SM90_H100,SM90_H200)")
    parser.add_argument("--replicas", type=int, default=4, help="replicas per config (4)")
    parser.add_argument("--clients", type=int, default=100, help="concurrent SSE clients (100)")
    parser.add_argument("--max-local-sims", type=int, default=0,
                        help="simulator processes at once (default: CPU count)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_s3(base: Path) -> tuple[subprocess.Popen[bytes], str, str, str]:
    from programs.embedded.binaries import weed_binary
    from programs.embedded.procs import spawn
    from programs.embedded.seaweed import (
        generate_credentials,
        pick_ports,
        weed_mini_argv,
        write_s3_config,
    )

    base.mkdir(parents=True, exist_ok=True)
    access, secret = generate_credentials()
    config = write_s3_config(base / "s3-identities.json", access, secret)
    (base / "data").mkdir(exist_ok=True)
    ports = pick_ports()
    proc = spawn(weed_mini_argv(weed_binary(), base / "data", ports, config), base / "weed.log")
    return proc, f"http://127.0.0.1:{ports.s3}", access, secret


async def _wait_s3(settings: Any, timeout: float = 60.0) -> None:
    from cascade.platform.storage import Storage

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            async with Storage.from_settings(settings) as st:
                await st.ensure_bucket()
                return
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
            await asyncio.sleep(0.3)
    raise RuntimeError(f"SeaweedFS did not come up: {last}")


async def _sse(url: str, on_event: Any, timeout: float = 300) -> None:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, s.get(url) as r:
        event = ""
        async for raw in r.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                on_event(event, json.loads(line[6:]), time.time())


async def _post(base: str, body: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.post(base + "/api/runs", json=body) as r:
        data: dict[str, Any] = await r.json()
        if r.status != 202:
            raise RuntimeError(f"POST /api/runs answered {r.status}: {data}")
        return data


async def _wait_http(base: str, timeout: float = 60.0) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(base + "/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the api at {base} did not become ready")


class _Service:
    def __init__(self, fn: Any, settings: Any, **kw: Any) -> None:
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(fn(settings, stop=self.stop, **kw))

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 60)


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from cascade.platform import subjects
    from cascade.platform.bus import connect
    from cascade.platform.messages.sim import SimProgress
    from cascade.platform.settings import load_settings
    from cascade.platform.storage import Storage
    from programs.bench._runbed import generate_timeline, publish_trace
    from programs.embedded.nats import NatsServer
    from services.api import run as api_run
    from services.orchestrator import run as orch_run
    from services.orchestrator.backends import settings_env

    figures: dict[str, Any] = {}
    nats = NatsServer(root / "nats")
    nats.start()
    s3_proc, endpoint, access, secret = _start_s3(root / "s3")
    services: list[_Service] = []
    try:
        settings = load_settings(
            {}, nats_url=nats.url, s3_endpoint=endpoint, s3_access_key=access, s3_secret_key=secret,
            data_dir=str(root / "data"), http_port=_free_port(), log_format="json",
            log_level="warning", samples=False, orchestrator_backend="pool", job_ack_wait_s=10.0,
            drain_timeout_s=2.0, **({"max_local_sims": args.max_local_sims} if args.max_local_sims else {}),
        )
        await _wait_s3(settings)
        bus = await connect(settings)
        await bus.ensure_streams()
        table = generate_timeline(args.kernels)
        async with Storage.from_settings(settings) as st:
            trace = await publish_trace(bus, st, f"bench-{uuid.uuid4().hex[:6]}", table)
        figures["kernels"] = len(table)
        base = f"http://127.0.0.1:{settings.http_port}"
        services.append(_Service(api_run, settings))
        orch = _Service(orch_run, settings)
        await _wait_http(base)

        # 1. simulator start -> first progress (pool backend: nothing else takes the job)
        first = await _post(base, {"trace_id": trace.id, "configs": ["SM90_H100"]})
        sim_id = first["run"]["sim_ids"][0]
        got = asyncio.Event()
        stamp: list[float] = []

        async def on_progress(msg: SimProgress, _d: Any) -> None:
            if not stamp:
                stamp.append(time.perf_counter())
                got.set()

        listener = await bus.listen(subjects.sim_progress(sim_id), SimProgress, on_progress)
        env = dict(os.environ)
        env.update(settings_env(settings))
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.simulator", "--once", env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.wait_for(got.wait(), 60)
        figures["sim_start_to_first_progress_s"] = stamp[0] - t0
        await listener.stop()
        await asyncio.wait_for(proc.wait(), 120)
        await orch.close()

        # 2. C configs x R replicas end to end, local backend
        local = settings.replace(orchestrator_backend="local")
        orch = _Service(orch_run, local)
        await asyncio.sleep(0.5)
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        t0 = time.perf_counter()
        run = await _post(base, {"trace_id": trace.id, "configs": configs, "replicas": args.replicas})
        final: list[str] = []
        await _sse(f"{base}/api/runs/{run['id']}/events",
                   lambda ev, data, _t: final.append(data.get("state", "")) if ev == "run" else None)
        figures["run_e2e_s"] = time.perf_counter() - t0
        figures["run_state"] = final[-1] if final else "?"
        figures["run_sims"] = len(configs) * args.replicas
        figures["max_local_sims"] = local.max_local_sims

        # 3. progress lag to K SSE clients on a paced run
        paced = await _post(base, {"trace_id": trace.id, "configs": ["SM90_H100"],
                                   "options": {"chunk_delay_s": 0.05}})
        lags: list[float] = []

        def record(ev: str, data: dict[str, Any], now: float) -> None:
            if ev == "sim" and data.get("type") == "sim.progress.v1":
                lags.append(now - float(data["at"]))

        url = f"{base}/api/runs/{paced['id']}/events"
        await asyncio.sleep(0)
        await asyncio.gather(*(_sse(url, record) for _ in range(args.clients)))
        lags.sort()
        figures["sse_clients"] = args.clients
        figures["sse_events_received"] = len(lags)
        if lags:
            figures["sse_lag_p50_s"] = statistics.median(lags)
            figures["sse_lag_p95_s"] = lags[int(0.95 * (len(lags) - 1))]
            figures["sse_lag_max_s"] = lags[-1]
        await orch.close()
        await bus.close()
    finally:
        for svc in services:
            await svc.close()
        nats.stop()
        s3_proc.terminate()
        try:
            s3_proc.wait(10)
        except subprocess.TimeoutExpired:
            s3_proc.kill()
    return figures


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    root = Path(tempfile.mkdtemp(prefix="cascade-bench-run-"))
    try:
        figures = asyncio.run(_bench(args, root))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"bundle: {figures['kernels']} kernels")
    print(f"simulator start -> first progress event: {figures['sim_start_to_first_progress_s']:.2f} s "
          "(target < 2 s)")
    print(f"{figures['run_sims']} sims ({args.configs} x {args.replicas}) end to end: "
          f"{figures['run_e2e_s']:.1f} s, run {figures['run_state']} "
          f"(local backend, {figures['max_local_sims']} processes at once; target < 30 s)")
    if "sse_lag_p50_s" in figures:
        print(f"progress lag to {figures['sse_clients']} SSE clients over "
              f"{figures['sse_events_received']} deliveries: p50 {figures['sse_lag_p50_s'] * 1000:.0f} ms, "
              f"p95 {figures['sse_lag_p95_s'] * 1000:.0f} ms, max {figures['sse_lag_max_s'] * 1000:.0f} ms "
              "(target < 1 s)")
    return 0 if figures.get("run_state") == "completed" else 1
