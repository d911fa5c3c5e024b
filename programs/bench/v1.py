"""`cascade bench v1`: latency of ``POST /v1/completions`` estimates under concurrent clients.

Default: starts a real ``nats-server`` and a real SeaweedFS S3 in a temporary
directory (the testbed's :func:`~programs.embedded.testbed.embedded_servers`, torn down
always), writes one finished sim (the synthetic OPT-125m sample's timeline with its
source-GPU durations as the simulated times, stored exactly as the simulator stores
results) and starts the api in this process on the testbed's free http port (the app
built here, so that a timing middleware can go first). The clients run in a
separate (spawned) process with its own event loop: ``--clients`` aiohttp clients,
each looping over one keep-alive connection with the stack's api token (closed loop: a
client sends its next request when the previous answer arrived). Each of ``--repeat``
rounds first sends ``--warmup`` unmeasured requests, then ``--requests`` measured ones,
and prints:

- client-side latency p50 / p95 / p99 / max and the request rate (with a closed loop,
  latency is at least clients / rate: that queueing term is printed beside it);
- server-side handler time (every middleware and the handler, measured by a timing
  middleware put first in the chain; HTTP parsing and the socket write are outside it);
- CPU time per request of the server process and of the client process, so machine
  load (other work on the CPUs) can be told from the server's own cost.

``--url http://host:8080 --model cascade/<trace>/<config>`` measures a running api
(``cascade up``) instead; only the client side is observed then.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np

NAME = "v1"
HELP = "p50/p99 latency of /v1/completions estimates under concurrent clients"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench v1``."""
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients (default 50)")
    parser.add_argument("--requests", type=int, default=5000,
                        help="measured requests per round (default 5000)")
    parser.add_argument("--warmup", type=int, default=1000,
                        help="unmeasured warm-up requests before each round (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--prompt-tokens", type=int, default=6, help="token-id prompt length (default 6)")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens (default 32)")
    parser.add_argument("--url", help="measure a running api at this base URL instead")
    parser.add_argument("--model", help="model id to ask for with --url")
    parser.add_argument("--token", default="", help="bearer token with --url")


@contextlib.asynccontextmanager
async def _local_api(timer: HandlerTimer | None = None) -> AsyncIterator[tuple[str, str, str]]:
    """Real NATS + S3 (the testbed's :func:`~programs.embedded.testbed.embedded_servers`) and
    the api in-process on the testbed's free http port, with one finished sim; yields
    (base url, model, api token). Everything is stopped on exit, also on an exception.

    ``timer``'s middleware goes first in the app's chain (it times every other middleware
    and the handler)."""
    from aiohttp import web

    from cascade.platform import subjects
    from cascade.platform.bus import connect
    from cascade.platform.runstore import write_result
    from cascade.platform.samples import load_sample
    from cascade.platform.state import RunRecord, SimRecord, TraceRecord
    from cascade.platform.storage import Storage
    from cascade.runs.results import build_result, kernels_with_predictions
    from programs.embedded.layout import LOOPBACK
    from programs.embedded.testbed import embedded_servers
    from services.api.app import create_app

    with tempfile.TemporaryDirectory(prefix="cascade-bench-v1-") as tmp:
        async with contextlib.AsyncExitStack() as exits:
            # the supervisor has created the bucket and the streams once this yields
            settings = await exits.enter_async_context(embedded_servers(
                Path(tmp) / "servers", samples="false", log_level="warning"))
            storage = await exits.enter_async_context(Storage.from_settings(settings))
            bus = await connect(settings, name="bench-v1")
            exits.push_async_callback(bus.close)
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
            app = create_app(settings, bus=bus, storage=storage)
            if timer is not None:
                app.middlewares.insert(0, timer.middleware)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            exits.push_async_callback(runner.cleanup)
            await web.TCPSite(runner, LOOPBACK, settings.http_port).start()
            yield (f"http://{LOOPBACK}:{settings.http_port}", f"cascade/{trace_id}/SM90_H100",
                   settings.api_tokens[-1])


class Fired(NamedTuple):
    """What one measured round of client requests saw (client side)."""

    latencies_ms: np.ndarray
    wall_s: float
    errors: int
    client_cpu_s: tuple[float, float]
    """(user, system) CPU seconds the client process spent during the measured requests."""


async def _fire(url: str, model: str, token: str, clients: int, total: int, warmup: int, prompt: int,
                max_tokens: int, gate: Callable[[bool], None] | None = None) -> Fired:
    """``warmup`` then ``total`` requests from ``clients`` keep-alive connections (one per client).

    Warm-up requests (which also open every connection) are not measured. ``gate(True)`` /
    ``gate(False)`` is called around the measured requests when given.
    """
    import aiohttp

    body = msgspec.json.encode({"model": model, "prompt": list(range(prompt)), "max_tokens": max_tokens})
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    async with aiohttp.ClientSession(base_url=url, connector=connector, headers=headers) as session:
        async with session.post("/v1/completions", data=body) as first:
            if first.status != 200:
                raise RuntimeError(f"warm-up request failed: {first.status} {await first.text()}")

        async def phase(count: int, record: list[float] | None) -> int:
            remaining = [count]
            errors = [0]

            async def client() -> None:
                while remaining[0] > 0:
                    remaining[0] -= 1
                    t0 = time.perf_counter()
                    async with session.post("/v1/completions", data=body) as resp:
                        await resp.read()
                        if resp.status != 200:
                            errors[0] += 1
                    if record is not None:
                        record.append((time.perf_counter() - t0) * 1000)

            await asyncio.gather(*(client() for _ in range(clients)))
            return errors[0]

        await phase(max(warmup, clients), None)
        latencies: list[float] = []
        if gate is not None:
            gate(True)
        cpu0 = _cpu()
        started = time.perf_counter()
        errors = await phase(total, latencies)
        wall = time.perf_counter() - started
        cpu1 = _cpu()
        cpu = (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
        if gate is not None:
            gate(False)
    return Fired(np.array(latencies), wall, errors, cpu)


def _child(conn: Any, url: str, model: str, token: str, clients: int, total: int, warmup: int,
           prompt: int, max_tokens: int) -> None:
    def gate(on: bool) -> None:
        conn.send(("measuring" if on else "done", None))

    fired = asyncio.run(_fire(url, model, token, clients, total, warmup, prompt, max_tokens, gate))
    conn.send(("result", (fired.latencies_ms.tolist(), fired.wall_s, fired.errors, fired.client_cpu_s)))
    conn.close()


class HandlerTimer:
    """A middleware (put first in the chain) timing every middleware + handler while on."""

    def __init__(self) -> None:
        self.on = False
        self.times_ms: list[float] = []

    @property
    def middleware(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def timed(request: Any, handler: Any) -> Any:
            if not self.on:
                return await handler(request)
            t0 = time.perf_counter()
            try:
                return await handler(request)
            finally:
                self.times_ms.append((time.perf_counter() - t0) * 1000)

        return timed


class Round(NamedTuple):
    """One measured round: client view, server CPU and handler times."""

    fired: Fired
    server_cpu_s: tuple[float, float]
    """(user, system) CPU seconds of the server process while the clients measured."""
    handler_ms: np.ndarray
    machine_busy_s: float
    """CPU seconds every process on the machine used meanwhile (nan where unknown)."""


async def _fire_elsewhere(url: str, model: str, token: str, clients: int, total: int, warmup: int,
                          prompt: int, max_tokens: int, timer: HandlerTimer) -> Round:
    """Run the clients in a child process (their own interpreter and event loop), timing the
    server (this process) only while the child measures."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, url, model, token, clients, total, warmup,
                                            prompt, max_tokens))
    proc.start()
    child.close()
    cpu0 = cpu = (0.0, 0.0)
    busy0 = busy = float("nan")
    try:
        while True:
            what, payload = await asyncio.to_thread(parent.recv)
            if what == "measuring":
                timer.times_ms = []
                timer.on = True
                cpu0 = _cpu()
                busy0 = _machine_busy_s()
            elif what == "done":
                cpu1 = _cpu()
                cpu = (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
                busy = _machine_busy_s() - busy0
                timer.on = False
            else:
                lat, wall, errors, client_cpu = payload
                break
    finally:
        timer.on = False
        await asyncio.to_thread(proc.join, 30)
    return Round(Fired(np.array(lat), wall, errors, tuple(client_cpu)), cpu,
                 np.array(timer.times_ms), busy)


def _cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of this process."""
    t = os.times()
    return t.user, t.system


def _machine_busy_s() -> float:
    """CPU seconds all processes have used since boot (``/proc/stat``), nan where unavailable."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return float("nan")
    if not fields or fields[0] != "cpu":
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _pcts(values: np.ndarray) -> tuple[float, float, float, float]:
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return float(p50), float(p95), float(p99), float(values.max())


def _print_round(i: int, rnd: Round, clients: int) -> None:
    f = rnd.fired
    n = len(f.latencies_ms)
    rate = n / f.wall_s
    p50, p95, p99, mx = _pcts(f.latencies_ms)
    print(f"round {i}: {n} requests, {f.errors} errors, {rate:.0f} req/s | latency ms p50 {p50:.2f} "
          f"p95 {p95:.2f} p99 {p99:.2f} max {mx:.2f} (queueing alone: {clients} / rate = "
          f"{clients / rate * 1000:.2f} ms)")
    cu, cs = (x / n * 1e6 for x in f.client_cpu_s)
    if len(rnd.handler_ms):
        h50, h95, h99, hmx = _pcts(rnd.handler_ms)
        su, ss = (x / n * 1e6 for x in rnd.server_cpu_s)
        print(f"         server handler ms p50 {h50:.3f} p95 {h95:.3f} p99 {h99:.3f} max {hmx:.3f}")
        print(f"         CPU us per request (user+system): server {su:.0f}+{ss:.0f}, "
              f"clients {cu:.0f}+{cs:.0f}", end="")
        if not math.isnan(rnd.machine_busy_s):
            ours = sum(rnd.server_cpu_s) + sum(f.client_cpu_s)
            other = max(0.0, rnd.machine_busy_s - ours) / f.wall_s
            print(f"; rest of the machine (other processes, kernel softirq) used {other:.2f} of "
                  f"{os.cpu_count()} CPUs meanwhile")
        else:
            print()
    else:
        print(f"         CPU us per request (user+system): clients {cu:.0f}+{cs:.0f} "
              "(server not observed)")


async def _main(args: argparse.Namespace) -> int:
    rounds: list[Round] = []
    if args.url:
        if not args.model:
            print("--url needs --model (see GET /v1/models)")
            return 2
        where = args.url
        for _ in range(args.repeat):
            fired = await _fire(args.url, args.model, args.token, args.clients, args.requests,
                                args.warmup, args.prompt_tokens, args.max_tokens)
            rounds.append(Round(fired, (0.0, 0.0), np.zeros(0), float("nan")))
    else:
        timer = HandlerTimer()
        where = "api in this process (real nats-server + SeaweedFS), clients in a child process"
        async with _local_api(timer) as (url, model, token):
            for _ in range(args.repeat):
                rounds.append(await _fire_elsewhere(url, model, token, args.clients, args.requests,
                                                    args.warmup, args.prompt_tokens, args.max_tokens,
                                                    timer))
    print(f"/v1/completions estimates: {where}")
    print(f"{args.clients} clients on keep-alive connections, {args.requests} measured requests per "
          f"round after {max(args.warmup, args.clients)} warm-up requests, prompt {args.prompt_tokens} "
          f"token ids, max_tokens {args.max_tokens}; load average at start {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs")
    for i, rnd in enumerate(rounds, 1):
        _print_round(i, rnd, args.clients)
    p99s = np.array([_pcts(r.fired.latencies_ms)[2] for r in rounds])
    rates = np.array([len(r.fired.latencies_ms) / r.fired.wall_s for r in rounds])
    print(f"over {len(rounds)} rounds: p99 median {np.median(p99s):.2f} ms (best {p99s.min():.2f}, "
          f"worst {p99s.max():.2f}); {np.median(rates):.0f} req/s median")
    print(f"target p99 < 20 ms: {'met' if np.median(p99s) < 20 else 'NOT met'} (median round)")
    return 0 if all(r.fired.errors == 0 for r in rounds) else 1


def run(args: argparse.Namespace) -> int:
    """Entry point of ``cascade bench v1``."""
    return asyncio.run(_main(args))


__all__ = ["HELP", "NAME", "add_arguments", "run"]
