"""`cascade bench run`: runs end to end on a throw-away embedded stack, with figures.

Starts ``nats-server`` and SeaweedFS in a temporary directory on free ports (the
testbed's :func:`~programs.embedded.testbed.embedded_servers`: as ``cascade up``
runs them), runs the api and the orchestrator in this process
(:class:`~programs.embedded.testbed.InProcessStack`: real HTTP, real bus, real
S3; simulators are real ``--once`` processes of the ``local`` backend),
publishes a generated N-kernel timeline bundle, then measures:

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


async def _post(base: str, body: dict[str, Any], token: str = "") -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.post(base + "/api/runs", json=body, headers=headers) as r:
        data: dict[str, Any] = await r.json()
        if r.status != 202:
            raise RuntimeError(f"POST /api/runs answered {r.status}: {data}")
        return data


#: Settings (``CASCADE_*`` values) of the benchmarks' stack: quiet, no samples, a short ack
#: wait and drain.
STACK_SETTINGS = {"log_level": "warning", "samples": "false", "job_ack_wait_s": "10",
                  "drain_timeout_s": "2"}


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from cascade.platform import subjects
    from cascade.platform.messages.sim import SimProgress
    from programs.bench._runbed import generate_timeline, publish_trace
    from programs.embedded.testbed import InProcessStack, embedded_servers
    from services.orchestrator.backends import settings_env

    figures: dict[str, Any] = {}
    sims = {"max_local_sims": str(args.max_local_sims)} if args.max_local_sims else {}
    # NATS and S3 as `cascade up` runs them, the api and the orchestrator in this event loop;
    # everything is stopped on the way out
    async with embedded_servers(root / "servers", **STACK_SETTINGS, orchestrator_backend="pool",
                                **sims) as settings, \
            InProcessStack.running(settings, name="cascade-bench-run") as stack:
        bus = stack.bus
        token = settings.api_tokens[-1]
        table = generate_timeline(args.kernels)
        trace = await publish_trace(bus, stack.storage, f"bench-{uuid.uuid4().hex[:6]}", table)
        figures["kernels"] = len(table)
        base = stack.base
        await stack.start("api")  # waits for /readyz
        await stack.start("orchestrator")

        # 1. simulator start -> first progress (pool backend: nothing else takes the job)
        first = await _post(base, {"trace_id": trace.id, "configs": ["SM90_H100"]}, token)
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
        await stack.stop("orchestrator", timeout=60)

        # 2. C configs x R replicas end to end, local backend
        local = settings.replace(orchestrator_backend="local")
        await stack.start("orchestrator", orchestrator_backend="local")
        await asyncio.sleep(0.5)
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        t0 = time.perf_counter()
        run = await _post(base, {"trace_id": trace.id, "configs": configs, "replicas": args.replicas},
                          token)
        final: list[str] = []
        await _sse(f"{base}/api/runs/{run['id']}/events",
                   lambda ev, data, _t: final.append(data.get("state", "")) if ev == "run" else None)
        figures["run_e2e_s"] = time.perf_counter() - t0
        figures["run_state"] = final[-1] if final else "?"
        figures["run_sims"] = len(configs) * args.replicas
        figures["max_local_sims"] = local.max_local_sims

        # 3. progress lag to K SSE clients on a paced run
        paced = await _post(base, {"trace_id": trace.id, "configs": ["SM90_H100"],
                                   "options": {"chunk_delay_s": 0.05}}, token)
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
        await stack.stop("orchestrator", timeout=60)
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
