"""`cascade bench v1`: latency of ``POST /v1/completions`` estimates under concurrent clients.

Default (in-process): starts a real ``nats-server`` and a real SeaweedFS S3 in a
temporary directory, writes one finished sim (the synthetic OPT-125m sample's
timeline with its source-GPU durations as the simulated times, stored exactly as
the simulator stores results), starts the api in this process on a free port,
warms the step-model cache with one request, then fires ``--requests`` requests
from ``--clients`` concurrent aiohttp clients and prints p50 / p90 / p99 / max
latency and the request rate. Client and server share this process's event loop,
so the figures include client-side overhead.

``--url http://host:8080 --model cascade/<trace>/<config>`` measures a running api
(``cascade up``) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

NAME = "v1"
HELP = "p50/p99 latency of /v1/completions estimates under concurrent clients"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench v1``."""
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients (default 50)")
    parser.add_argument("--requests", type=int, default=5000, help="requests in total (default 5000)")
    parser.add_argument("--prompt-tokens", type=int, default=6, help="token-id prompt length (default 6)")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens (default 32)")
    parser.add_argument("--url", help="measure a running api at this base URL instead")
    parser.add_argument("--model", help="model id to ask for with --url")
    parser.add_argument("--token", default="", help="bearer token with --url")


@contextlib.asynccontextmanager
async def _local_api() -> AsyncIterator[tuple[str, str]]:
    """Real NATS + S3 + the api in-process, with one finished sim; yields (base url, model)."""
    from aiohttp import web

    from cascade import subjects
    from cascade.bus import connect
    from cascade.embedded.binaries import weed_binary
    from cascade.embedded.ports import can_connect, free_port
    from cascade.embedded.procs import spawn, stop_popen, wait_until
    from cascade.embedded.seaweed import (
        generate_credentials,
        pick_ports,
        weed_mini_argv,
        write_s3_config,
    )
    from cascade.natsserver import NatsServer
    from cascade.results import build_result, kernels_with_predictions, write_result
    from cascade.samples import load_sample
    from cascade.settings import load_settings
    from cascade.state import RunRecord, SimRecord, TraceRecord
    from cascade.storage import Storage
    from services.api.app import create_app

    with tempfile.TemporaryDirectory(prefix="cascade-bench-v1-") as tmp:
        base = Path(tmp)
        nats = NatsServer(base / "nats")
        nats.start()
        access, secret = generate_credentials()
        config = write_s3_config(base / "s3.json", access, secret)
        (base / "s3").mkdir()
        ports = pick_ports()
        weed: subprocess.Popen[bytes] = spawn(weed_mini_argv(weed_binary(), base / "s3", ports, config),
                                              base / "weed.log")
        try:
            if not wait_until(lambda: can_connect("127.0.0.1", ports.s3, 0.2), 60.0):
                raise RuntimeError(f"SeaweedFS did not start; see {base / 'weed.log'}")
            port = free_port()
            settings = load_settings({}, nats_url=nats.url, s3_endpoint=f"http://127.0.0.1:{ports.s3}",
                                     s3_access_key=access, s3_secret_key=secret, samples=False,
                                     http_port=port, log_level="warning", log_format="json")
            bus = await connect(settings, name="bench-v1")
            await bus.ensure_streams()
            async with Storage.from_settings(settings) as storage:
                for _ in range(100):
                    try:
                        await storage.ensure_bucket()
                        break
                    except Exception:  # noqa: BLE001 - S3 still starting
                        await asyncio.sleep(0.2)
                table = load_sample().synthetic_table
                dur = table["duration_ns"].astype(float)
                start = table["start_ns"].astype(float)
                regime = np.array(["memory"] * len(table), dtype=object)
                run_id, sim_id, trace_id = "run-bench", "run-bench-sm90_h100-r0", "bench-opt125m"
                result = build_result(
                    run_id=run_id, sim_id=sim_id, trace_id=trace_id, config="SM90_H100", replica=0,
                    model="scaled", spec_id="SM90_H100", spec_hash="bench", table=table,
                    predicted_ns=dur, regime=regime, start_ns=start, end_ns=start + dur,
                    predicted_e2e_ns=float(np.max(start + dur)))
                key = await write_result(storage, result,
                                         kernels_with_predictions(table, dur, regime, start, start + dur))
                now = time.time()
                await (await bus.kv(subjects.KV_TRACES)).put(trace_id, TraceRecord(
                    id=trace_id, name="bench", source_gpu="SM90_H100", workload="facebook/opt-125m",
                    state="ready"))
                await (await bus.kv(subjects.KV_SIMS)).put(sim_id, SimRecord(
                    id=sim_id, run_id=run_id, config="SM90_H100", state="completed", finished_at=now,
                    result_key=key))
                await (await bus.kv(subjects.KV_RUNS)).put(run_id, RunRecord(
                    id=run_id, trace_id=trace_id, configs=["SM90_H100"], state="completed",
                    sim_ids=[sim_id]))
                runner = web.AppRunner(create_app(settings, bus=bus, storage=storage), access_log=None)
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", port).start()
                try:
                    yield f"http://127.0.0.1:{port}", f"cascade/{trace_id}/SM90_H100"
                finally:
                    await runner.cleanup()
                    await bus.close()
        finally:
            stop_popen(weed, 10)
            nats.stop()


async def _fire(url: str, model: str, token: str, clients: int, total: int, prompt: int,
                max_tokens: int) -> tuple[np.ndarray, float, int]:
    import aiohttp

    body = {"model": model, "prompt": list(range(prompt)), "max_tokens": max_tokens}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    errors = 0
    remaining = [total]
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(base_url=url, connector=connector, headers=headers) as session:
        async with session.post("/v1/completions", json=body) as warm:
            if warm.status != 200:
                raise RuntimeError(f"warm-up request failed: {warm.status} {await warm.text()}")

        async def client() -> None:
            nonlocal errors
            while remaining[0] > 0:
                remaining[0] -= 1
                t0 = time.perf_counter()
                async with session.post("/v1/completions", json=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                latencies.append((time.perf_counter() - t0) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - started
    return np.array(latencies), wall, errors


def _child(conn: Any, url: str, model: str, clients: int, total: int, prompt: int,
           max_tokens: int) -> None:
    lat, wall, errors = asyncio.run(_fire(url, model, "", clients, total, prompt, max_tokens))
    conn.send((lat.tolist(), wall, errors))
    conn.close()


async def _fire_elsewhere(url: str, model: str, clients: int, total: int, prompt: int,
                          max_tokens: int) -> tuple[np.ndarray, float, int]:
    """Run the clients in a child process, so they do not share the api's event loop."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, url, model, clients, total, prompt, max_tokens))
    proc.start()
    child.close()
    try:
        while not parent.poll():
            await asyncio.sleep(0.05)
        lat, wall, errors = parent.recv()
    finally:
        await asyncio.to_thread(proc.join, 30)
    return np.array(lat), wall, errors


async def _main(args: argparse.Namespace) -> int:
    if args.url:
        if not args.model:
            print("--url needs --model (see GET /v1/models)")
            return 2
        lat, wall, errors = await _fire(args.url, args.model, args.token, args.clients, args.requests,
                                        args.prompt_tokens, args.max_tokens)
        where = args.url
    else:
        async with _local_api() as (url, model):
            lat, wall, errors = await _fire_elsewhere(url, model, args.clients, args.requests,
                                                      args.prompt_tokens, args.max_tokens)
        where = "in-process api (real nats-server + SeaweedFS), clients in a child process"
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    print(f"/v1/completions estimates: {where}")
    print(f"clients {args.clients}, requests {len(lat)}, errors {errors}, "
          f"prompt {args.prompt_tokens} tokens, max_tokens {args.max_tokens}")
    print(f"latency ms: p50 {p50:.2f}  p90 {p90:.2f}  p99 {p99:.2f}  max {lat.max():.2f}  "
          f"mean {lat.mean():.2f}")
    print(f"throughput: {len(lat) / wall:.0f} requests/s over {wall:.2f} s")
    print(f"target p99 < 20 ms: {'met' if p99 < 20 else 'NOT met'}")
    return 0 if errors == 0 else 1


def run(args: argparse.Namespace) -> int:
    """Entry point of ``cascade bench v1``."""
    return asyncio.run(_main(args))


__all__ = ["HELP", "NAME", "add_arguments", "run"]
