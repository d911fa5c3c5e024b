"""`cascade bench load`: a bounded load test of the api on loopback, with ``/healthz`` watched.

Default: starts the real embedded stack (``cascade up`` in a fresh temporary data
directory on free ports: the testbed's :class:`~programs.embedded.testbed.UpStack`; the
bundled sample loaded) and waits until ``/v1/models`` lists
the sample's model. Then ``--clients`` aiohttp clients (default 200), each a closed loop
over its own connection for ``--duration`` seconds, send a seeded mix of

- reads: ``GET /api/runs``, ``GET /api/runs/{id}`` (the sample run), ``GET /api/configs``,
  ``GET /v1/models``;
- estimates: ``POST /v1/completions`` against the sample's model, without and with
  ``stream: true`` (the stream read to its end).

Meanwhile a separate process (its own event loop, so the clients' CPU does not delay it)
asks ``GET /healthz`` every ``--probe-interval`` seconds; it also does so for 5 s before the
load starts, the machine's own baseline. Printed: per route class the
requests, errors (non-2xx or transport errors), p50 / p99 / max latency and requests/s;
the total rate; ``/healthz`` p50 / p99 / max under that load against its 100 ms target (and
idle); the CPU the client process and, for a stack it started (or ``--data-dir``), each
stack process used while loaded, with the 1-minute load average: a saturated client or
machine inflates latencies that the api's own work does not explain.
``--json`` prints the same figures as one JSON object.

Without a servable model yet (the recorded sample run has no per-step results) the sample's
synthetic replica is run once on SM90_H100 first, with the stack's token.

``--url http://host:8080`` measures a running api instead; ``--token`` (the stack's own token
when it starts one) goes on every request: ``/v1`` completions are POSTs, which the api
authenticates like every write.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from programs.embedded.testbed import UpStack

NAME = "load"
HELP = "p50/p99 and errors of reads and /v1 at 200 concurrent clients, /healthz latency under load"

#: Route classes and their share of the mix.
MIX: tuple[tuple[str, float], ...] = (
    ("GET /api/runs", 0.10),
    ("GET /api/runs/{id}", 0.10),
    ("GET /api/traces", 0.10),
    ("GET /api/traces/{id}", 0.10),
    ("GET /api/traces/{id}/kernels", 0.10),
    ("GET /api/configs", 0.10),
    ("GET /v1/models", 0.10),
    ("POST /v1/completions", 0.20),
    ("POST /v1/completions stream", 0.10),
)
#: Groups of route classes ``--only`` accepts besides single classes.
GROUPS: dict[str, tuple[str, ...]] = {
    "traces": ("GET /api/traces", "GET /api/traces/{id}", "GET /api/traces/{id}/kernels"),
    "runs": ("GET /api/runs", "GET /api/runs/{id}"),
    "reads": ("GET /api/runs", "GET /api/runs/{id}", "GET /api/traces", "GET /api/traces/{id}",
              "GET /api/traces/{id}/kernels", "GET /api/configs", "GET /v1/models"),
    "v1": ("GET /v1/models", "POST /v1/completions", "POST /v1/completions stream"),
}
#: Sort columns the kernel-page clients pick from.
KERNEL_SORTS = ("kernel_id", "duration_ns", "name", "grid_x")
HEALTHZ_TARGET_MS = 100.0
#: Seconds of /healthz probes before the load starts (the machine's own baseline).
IDLE_PROBE_S = 5.0
SAMPLE_MODEL_PREFIX = "cascade/"
PROMPT = "The quick brown fox jumps over the lazy dog. " * 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench load``."""
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients (default 200)")
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds of load after a 2 s warm-up (default 20)")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="max_tokens of the /v1 completions (default 64)")
    parser.add_argument("--probe-interval", type=float, default=0.05,
                        help="seconds between /healthz probes (default 0.05)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the request mix (default 0)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--url", help="measure a running api at this base URL instead")
    parser.add_argument("--token", default="", help="bearer token with --url")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for the stack and the sample model (default 180)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    parser.add_argument("--data-dir", type=Path,
                        help="with --url: the stack's data directory (its state.json names the "
                             "processes whose CPU is reported)")
    parser.add_argument("--only", default="",
                        help="route classes to send, comma-separated: groups traces, runs, reads, "
                             "v1 or classes as printed (default: the whole mix)")
    parser.add_argument("--traces", type=int, default=0,
                        help="seed this many traces into the stack it starts first (default 0)")
    parser.add_argument("--runs", type=int, default=0,
                        help="seed this many finished runs into the stack it starts first")
    parser.add_argument("--kernels", type=int, default=0,
                        help="one of the seeded traces is ready with this many kernels (its "
                             "bundle in S3); kernel pages are read from it")
    parser.add_argument("--restart-api", action="store_true",
                        help="after seeding, kill -9 the api and time its restart until the "
                             "lists hold everything seeded")


# ---- the stack ----------------------------------------------------------------------------------

def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _wait_for(check: Callable[[], Any], timeout: float, what: str, proc: subprocess.Popen[bytes] | None,
              log: Path | None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (urllib.error.URLError, OSError, ValueError):
            found = None
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"cascade up exited with {proc.returncode} before {what}; see {log}")
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} after {timeout:g} s" + (f"; see {log}" if log else ""))
        time.sleep(0.2)


def _post_json(url: str, body: Any, token: str) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _targets(base: str, token: str, timeout: float, proc: subprocess.Popen[bytes] | None,
             log: Path | None, *, need_model: bool = True) -> tuple[str, str]:
    """(a servable model id, a run id) of the sample. Without a servable model yet (the
    recorded run has no per-step results), the sample's synthetic replica is run once on
    SM90_H100, as a user would from the UI. Without ``need_model`` the model is ''."""

    def models() -> list[str]:
        data = _get_json(f"{base}/v1/models")["data"]
        return [m["id"] for m in data if m["id"].startswith(SAMPLE_MODEL_PREFIX)]

    def synthetic() -> str | None:
        traces = _get_json(f"{base}/api/traces?name=sample-&limit=100")["traces"]
        ids = [t["id"] for t in traces if t["state"] == "ready"
               and t.get("provenance", {}).get("source") == "sample-synthetic"]
        return ids[0] if ids else None

    model = ""
    if need_model:
        if not models():
            trace = _wait_for(synthetic, timeout, "sample synthetic trace on /api/traces", proc, log)
            _post_json(f"{base}/api/runs", {"trace_id": trace, "configs": ["SM90_H100"],
                                            "name": "cascade bench load"}, token)
        model = _wait_for(lambda: next(iter(models()), None), timeout, "model on /v1/models",
                          proc, log)

    def run() -> str | None:
        runs = _get_json(f"{base}/api/runs?limit=1")["runs"]
        return runs[0]["id"] if runs else None

    return model, _wait_for(run, timeout, "run on /api/runs", proc, log)


def _read_targets(base: str, seeded: Any) -> dict[str, list[str]]:
    """Ids the read clients pick from: the seeded traces and runs, else the stack's own; the
    trace whose kernels are paged (the seeded big one, else a ready trace)."""
    if seeded is not None and seeded.trace_ids:
        traces = list(seeded.trace_ids)
    else:
        traces = [t["id"] for t in _get_json(f"{base}/api/traces?limit=1000")["traces"]]
    if seeded is not None and seeded.run_ids:
        runs = list(seeded.run_ids)
    else:
        runs = [r["id"] for r in _get_json(f"{base}/api/runs?limit=1000")["runs"]]
    if seeded is not None and seeded.big_trace_id:
        kernels = [seeded.big_trace_id]
    else:
        kernels = [t["id"] for t in _get_json(f"{base}/api/traces?state=ready&limit=1000")["traces"]
                   if t.get("bundle_key")][:1]
    return {"traces": traces or ["tr-none"], "runs": runs, "kernels": kernels or traces[:1]}


async def _seed(settings: Any, args: argparse.Namespace) -> Any:
    from cascade.platform.bus import connect
    from cascade.platform.storage import Storage
    from programs.bench._seed import seed_state

    bus = await connect(settings, name="cascade-bench-seed")
    try:
        async with Storage.from_settings(settings) as storage:
            return await seed_state(bus, storage, traces=args.traces, runs=args.runs,
                                    kernels=args.kernels)
    finally:
        await bus.close()


def _restart_api(bed: UpStack, traces: int, runs: int, timeout: float) -> dict[str, float]:
    """kill -9 the api; seconds until its lists answer with every seeded trace and run again."""
    base = bed.base

    def totals() -> tuple[int, int]:
        t = _get_json(f"{base}/api/traces?limit=1", timeout=2.0)["total"]
        r = _get_json(f"{base}/api/runs?limit=1", timeout=2.0)["total"]
        return int(t), int(r)

    if bed.kill("api") is None:
        raise SystemExit("no api process in the stack's state.json")
    t0 = time.perf_counter()
    first = None
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        try:
            t, r = totals()
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            time.sleep(0.05)
            continue
        first = first if first is not None else time.perf_counter() - t0
        if t >= traces and r >= runs:
            return {"ready_s": time.perf_counter() - t0, "first_answer_s": first,
                    "traces": float(t), "runs": float(r)}
        time.sleep(0.05)
    raise SystemExit(f"the api did not come back with {traces} traces and {runs} runs within "
                     f"{timeout:g} s")


def _mix(only: str) -> tuple[tuple[str, float], ...]:
    """The route classes ``--only`` keeps (their shares renormalised by the draw)."""
    if not only.strip():
        return MIX
    wanted: set[str] = set()
    known = {name for name, _ in MIX}
    for part in (p.strip() for p in only.split(",")):
        if part in GROUPS:
            wanted.update(GROUPS[part])
        elif part in known:
            wanted.add(part)
        elif part:
            raise SystemExit(f"--only: unknown route class {part!r}; groups {', '.join(GROUPS)}, "
                             f"classes {', '.join(sorted(known))}")
    return tuple((name, w) for name, w in MIX if name in wanted)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the /healthz probe (own process, own loop) -------------------------------------------------

def _probe_process(base: str, interval: float, seconds: float, out: Any) -> None:
    """Ask /healthz every ``interval`` s for ``seconds`` s; send [latency ms, status] pairs."""
    import aiohttp

    async def main() -> list[tuple[float, int]]:
        rows: list[tuple[float, int]] = []
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    async with http.get(f"{base}/healthz") as resp:
                        await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, TimeoutError):
                    status = 0
                rows.append(((time.perf_counter() - t0) * 1000, status))
                await asyncio.sleep(max(0.0, interval - (time.perf_counter() - t0)))
        return rows

    out.send(asyncio.run(main()))
    out.close()


def _probe_in_process(ctx: Any, base: str, interval: float, seconds: float) -> list[tuple[float, int]]:
    """Run the /healthz probe in its own process for ``seconds`` and return its rows."""
    recv, send_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_process, args=(base, interval, seconds, send_end), daemon=True)
    proc.start()
    rows: list[tuple[float, int]] = recv.recv()
    proc.join(10)
    return rows


# ---- the clients --------------------------------------------------------------------------------

async def _load(base: str, model: str, run_id: str, token: str, args: argparse.Namespace,
                pids: dict[str, int], ids: dict[str, list[str]] | None = None) -> dict[str, Any]:
    import aiohttp

    mix = _mix(args.only)
    names = [name for name, _ in mix]
    weights = [w for _, w in mix]
    samples: dict[str, list[float]] = {name: [] for name in names}
    errors: dict[str, int] = dict.fromkeys(names, 0)
    statuses: dict[str, dict[str, int]] = {name: {} for name in names}
    completion = {"model": model, "prompt": PROMPT, "max_tokens": args.max_tokens}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ids = ids or {"traces": ["tr-none"], "runs": [run_id], "kernels": ["tr-none"]}
    runs = ids["runs"] or [run_id]
    kernel_total = 1000

    async def send(http: aiohttp.ClientSession, name: str, rng: random.Random) -> int:
        if name == "GET /api/runs":
            call = http.get(f"{base}/api/runs?limit=50")
        elif name == "GET /api/runs/{id}":
            call = http.get(f"{base}/api/runs/{rng.choice(runs)}")
        elif name == "GET /api/traces":
            call = http.get(f"{base}/api/traces?limit=50")
        elif name == "GET /api/traces/{id}":
            call = http.get(f"{base}/api/traces/{rng.choice(ids['traces'])}")
        elif name == "GET /api/traces/{id}/kernels":
            offset = rng.randrange(0, max(1, kernel_total - 100))
            call = http.get(f"{base}/api/traces/{ids['kernels'][0]}/kernels?offset={offset}"
                            f"&limit=100&sort={rng.choice(KERNEL_SORTS)}"
                            f"&order={rng.choice(('asc', 'desc'))}")
        elif name == "GET /api/configs":
            call = http.get(f"{base}/api/configs")
        elif name == "GET /v1/models":
            call = http.get(f"{base}/v1/models")
        elif name == "POST /v1/completions":
            call = http.post(f"{base}/v1/completions", json=completion)
        else:
            call = http.post(f"{base}/v1/completions", json={**completion, "stream": True})
        async with call as resp:
            await resp.read()
            return resp.status

    if "GET /api/traces/{id}/kernels" in names:
        async with aiohttp.ClientSession() as http, http.get(
                f"{base}/api/traces/{ids['kernels'][0]}/kernels?limit=1") as resp:
            kernel_total = int((await resp.json()).get("total", 1000)) if resp.status == 200 else 1000

    measuring = asyncio.Event()
    stop = asyncio.Event()

    async def client(i: int) -> None:
        rng = random.Random(args.seed * 100_003 + i)
        connector = aiohttp.TCPConnector(limit=1)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as http:
            while not stop.is_set():
                name = rng.choices(names, weights)[0]
                t0 = time.perf_counter()
                try:
                    status = await send(http, name, rng)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    status = 0
                    statuses[name][type(exc).__name__] = statuses[name].get(type(exc).__name__, 0) + 1
                elapsed = (time.perf_counter() - t0) * 1000
                if not measuring.is_set():
                    continue
                samples[name].append(elapsed)
                if not 200 <= status < 300:
                    errors[name] += 1
                    statuses[name][str(status)] = statuses[name].get(str(status), 0) + 1

    warmup = 2.0
    ctx = multiprocessing.get_context("spawn")
    idle_probes = await asyncio.to_thread(_probe_in_process, ctx, base, args.probe_interval,
                                          IDLE_PROBE_S)
    recv, send_end = ctx.Pipe(duplex=False)
    probe = ctx.Process(target=_probe_process, args=(base, args.probe_interval, args.duration, send_end),
                        daemon=True)
    cpu0 = time.process_time()
    tasks = [asyncio.create_task(client(i)) for i in range(args.clients)]
    await asyncio.sleep(warmup)
    measuring.set()
    probe.start()
    t0 = time.perf_counter()
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.sleep(args.duration)
    elapsed = time.perf_counter() - t0
    stack_cpu = {}
    for name, pid in pids.items():
        before, after = cpu_before[name], cpu_seconds(pid)
        if before is not None and after is not None:
            stack_cpu[name] = after - before
    measuring.clear()
    stop.set()
    await asyncio.wait(tasks, timeout=70)
    for task in tasks:
        task.cancel()
    client_cpu = time.process_time() - cpu0
    probes: list[tuple[float, int]] = await asyncio.to_thread(recv.recv)
    probe.join(10)
    return {"samples": samples, "errors": errors, "statuses": statuses, "elapsed": elapsed,
            "probes": probes, "idle_probes": idle_probes, "client_cpu_s": client_cpu, "stack_cpu_s": stack_cpu}


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values), q)) if values else None


def figures(raw: dict[str, Any], args: argparse.Namespace, model: str) -> dict[str, Any]:
    """The printed figures from the raw latencies."""
    elapsed = raw["elapsed"]
    routes = {}
    for name, values in raw["samples"].items():
        routes[name] = {"requests": len(values), "errors": raw["errors"][name],
                        "statuses": raw["statuses"][name],
                        "p50_ms": _pct(values, 50), "p99_ms": _pct(values, 99),
                        "max_ms": max(values) if values else None,
                        "rps": len(values) / elapsed if elapsed else 0.0}
    total = sum(r["requests"] for r in routes.values())
    health = [ms for ms, status in raw["probes"] if status == 200]
    idle = [ms for ms, status in raw["idle_probes"] if status == 200]
    return {
        "clients": args.clients, "duration_s": elapsed, "model": model, "routes": routes,
        "requests": total, "errors": sum(r["errors"] for r in routes.values()),
        "rps": total / elapsed if elapsed else 0.0,
        "healthz": {"probes": len(raw["probes"]), "failed": len(raw["probes"]) - len(health),
                    "p50_ms": _pct(health, 50), "p99_ms": _pct(health, 99),
                    "max_ms": max(health) if health else None, "target_ms": HEALTHZ_TARGET_MS,
                    "idle_p50_ms": _pct(idle, 50), "idle_p99_ms": _pct(idle, 99),
                    "idle_max_ms": max(idle) if idle else None},
        "client_cpu_s": raw["client_cpu_s"], "stack_cpu_s": raw["stack_cpu_s"],
        "cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
    }


def _ms(v: float | None) -> str:
    return "    -" if v is None else f"{v:8.1f}"


def print_figures(f: dict[str, Any]) -> None:
    """The human-readable report."""
    print(f"cascade bench load: {f['clients']} clients, {f['duration_s']:.1f} s, model {f['model'] or '-'}")
    print(f"  {'route':<30} {'requests':>8} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'req/s':>7}")
    for name, r in f["routes"].items():
        print(f"  {name:<30} {r['requests']:>8} {r['errors']:>6} {_ms(r['p50_ms'])} {_ms(r['p99_ms'])} "
              f"{_ms(r['max_ms'])} {r['rps']:>7.1f}")
        if r["statuses"]:
            print(f"  {'':<30} errors by status: {r['statuses']}")
    print(f"  {'all':<30} {f['requests']:>8} {f['errors']:>6} {'':>26} {f['rps']:>7.1f}")
    h = f["healthz"]
    verdict = ("within" if h["p99_ms"] is not None and h["p99_ms"] < h["target_ms"] else "OVER")
    print(f"  /healthz under load: {h['probes']} probes ({h['failed']} failed), p50 {_ms(h['p50_ms'])} ms, "
          f"p99 {_ms(h['p99_ms'])} ms, max {_ms(h['max_ms'])} ms ({verdict} the "
          f"{h['target_ms']:g} ms target)")
    print(f"  /healthz before the load ({IDLE_PROBE_S:g} s idle): p50 {_ms(h['idle_p50_ms'])} ms, "
          f"p99 {_ms(h['idle_p99_ms'])} ms, max {_ms(h['idle_max_ms'])} ms")
    print(f"  client process CPU: {f['client_cpu_s']:.1f} s over {f['duration_s']:.1f} s "
          f"({f['cpus']} CPUs on this machine, load average {f['loadavg_1m']:.1f})")
    if f["stack_cpu_s"]:
        parts = ", ".join(f"{name} {sec / f['duration_s'] * 100:.0f}%"
                          for name, sec in sorted(f["stack_cpu_s"].items(), key=lambda x: -x[1]))
        print(f"  stack CPU while loaded (% of one core): {parts}")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    if args.clients < 1 or args.duration <= 0:
        raise SystemExit("--clients must be >= 1 and --duration > 0")
    if (args.traces or args.runs or args.kernels) and args.url:
        raise SystemExit("--traces/--runs/--kernels seed a stack this bench starts (not --url)")
    from programs.embedded.testbed import UpStack, stack_pids

    mix = _mix(args.only)
    bed: UpStack | None = None
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    seeded: Any = None
    restart: dict[str, float] | None = None
    try:
        token = args.token
        pids: dict[str, int] = {}
        if args.url:
            base = args.url.rstrip("/")
            if args.data_dir is not None:
                pids = stack_pids(args.data_dir)
        else:
            bed = UpStack(Path(tempfile.mkdtemp(prefix="cascade-bench-load-")), log_level="warning")
            bed.start(args.timeout)
            proc, base, log = bed.proc, bed.base, bed.log
            token = token or bed.token
            if args.traces or args.runs or args.kernels:
                seeded = asyncio.run(_seed(bed.settings(), args))
                print(f"seeded {len(seeded.trace_ids):,} traces, {len(seeded.run_ids):,} runs"
                      + (f", a {seeded.kernels:,}-kernel ready trace" if seeded.kernels else "")
                      + f" in {seeded.seconds:.1f} s", flush=True)
            if args.restart_api:
                restart = _restart_api(bed, args.traces, args.runs, args.timeout)
            pids = bed.pids()
        need_model = any(name.startswith(("POST /v1", "GET /v1")) for name, _ in mix)
        model, run_id = _targets(base, token, args.timeout, proc, log, need_model=need_model)
        ids = _read_targets(base, seeded)
        raw = asyncio.run(_load(base, model, run_id, token, args, pids, ids))
    finally:
        code = (bed.stop() or 0) if bed is not None else 0
        if bed is not None and not args.keep:
            shutil.rmtree(bed.workdir, ignore_errors=True)
    result = figures(raw, args, model)
    result["stack_exit_code"] = code
    if seeded is not None:
        result["seeded"] = {"traces": len(seeded.trace_ids), "runs": len(seeded.run_ids),
                            "kernels": seeded.kernels, "seconds": seeded.seconds}
    if restart is not None:
        result["api_restart"] = restart
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        if restart is not None:
            print(f"api kill -9 with {int(restart['traces']):,} traces and {int(restart['runs']):,} "
                  f"runs stored: first answer after {restart['first_answer_s']:.1f} s, both lists "
                  f"complete after {restart['ready_s']:.1f} s")
        print_figures(result)
        if bed is not None and args.keep:
            print(f"  data and log kept in {bed.workdir}")
    return 0 if result["errors"] == 0 else 1
