"""`cascade bench accelsim`: the Accel-Sim wrapper's figures, with a stand-in accel-sim.out.

Starts a throw-away stack (``nats-server`` and SeaweedFS as ``cascade up`` runs them: the
testbed's :func:`~programs.embedded.testbed.embedded_servers`; the api and the orchestrator
in this process: :class:`~programs.embedded.testbed.InProcessStack`; simulators are real
``--once`` processes of the ``local`` backend) whose
``CASCADE_ACCELSIM_BIN`` is the stand-in from ``tests/support/accelsim_standin.py`` (the real output
format, paced), publishes a generated N-kernel instruction trace, then measures:

1. progress latency: the stand-in stamps the wall time right after it prints (and flushes)
   a kernel's completion line; the bench stamps the matching SSE event at the api; R sims;
2. wrapper overhead per sim: the sim's ``SimStarted`` (job taken) to the stand-in's first
   output line (bundle and instruction files on disk, config discovery and hashing, spawn),
   and process spawn to first line as the simulator measured it;
3. memory of the wrapper: peak RSS (VmHWM) of the simulator process while the stand-in
   prints L chatter lines per kernel, against the same run with a quiet stand-in.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

NAME = "accelsim"
HELP = "Accel-Sim wrapper: kernel line -> SSE latency, start -> first line, RSS with a chatty simulator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench accelsim``."""
    parser.add_argument("--kernels", type=int, default=20, help="kernels in the trace (20)")
    parser.add_argument("--replicas", type=int, default=3, help="sims for the latency figures (3)")
    parser.add_argument("--pace", type=float, default=0.1, help="stand-in seconds per kernel (0.1)")
    parser.add_argument("--chatty-lines", type=int, default=100_000,
                        help="chatter lines per kernel in the memory run (100000)")
    parser.add_argument("--standin", default="", help="stand-in script (default: tests/support/accelsim_standin.py)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


def _standin(path: str) -> Path:
    if path:
        return Path(path).resolve()
    import cascade

    found = Path(cascade.__file__).resolve().parents[2] / "tests" / "support" / "accelsim_standin.py"
    if not found.is_file():
        raise SystemExit(f"no stand-in at {found}: pass --standin PATH")
    return found


def _write_config(root: Path, name: str, clock: float, **opts: Any) -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["-gpgpu_n_clusters 66", f"-gpgpu_clock_domains {clock:.1f}:{clock:.1f}:{clock:.1f}:2619.0"]
    lines += [f"# standin-{k.replace('_', '-')}: {v}" for k, v in opts.items()]
    (folder / "gpgpusim.config").write_text("\n".join(lines) + "\n")
    (folder / "trace.config").write_text("-trace_opcode_latency_initiation_int 4,2\n")


async def _watch_rss(pid: int, peak: dict[int, int]) -> None:
    """Follow ``pid``'s VmHWM (kB) until it exits."""
    status = Path(f"/proc/{pid}/status")
    while True:
        try:
            text = status.read_text()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                peak[pid] = max(peak.get(pid, 0), int(line.split()[1]))
        await asyncio.sleep(0.02)


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import sys

    from cascade.platform.runstore import read_result
    from programs.bench._runbed import publish_instruction_trace
    from programs.bench.run import STACK_SETTINGS, _post, _sse
    from programs.embedded.testbed import InProcessStack, embedded_servers

    figures: dict[str, Any] = {}
    standin = _standin(args.standin)
    binary = root / "bin" / "accel-sim.out"
    binary.parent.mkdir(parents=True)
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{standin}" "$@"\n')
    binary.chmod(0o755)
    stamps = root / "stamps.txt"
    configs = root / "accelsim-configs"
    _write_config(configs, "SM90_H100", 1755.0, pace_s=args.pace, chatty_lines=20, stamps=stamps)
    _write_config(configs, "SM80_A100", 1410.0, pace_s=args.pace, chatty_lines=args.chatty_lines)
    _write_config(configs, "SM90_H200", 1755.0, pace_s=args.pace, chatty_lines=20)
    # NATS and S3 as `cascade up` runs them, the api and the orchestrator in this event loop;
    # everything is stopped on the way out
    async with embedded_servers(root / "servers", **STACK_SETTINGS, orchestrator_backend="local",
                                max_local_sims=str(max(1, args.replicas)),
                                accelsim_bin=str(binary),
                                accelsim_configs=str(configs)) as settings, \
            InProcessStack.running(settings, name="cascade-bench-accelsim") as stack:
        st = stack.storage
        token = settings.api_tokens[-1]
        trace = await publish_instruction_trace(stack.bus, st, f"bench-{uuid.uuid4().hex[:6]}",
                                                root / "trace", args.kernels)
        base = stack.base
        await stack.start("api")  # waits for /readyz
        await stack.start("orchestrator")
        figures["kernels"] = args.kernels

        # 1 + 2: latency and overhead over R sims
        run = await _post(base, {"trace_id": trace.id, "configs": ["SM90_H100"],
                                 "replicas": args.replicas, "model": "accel-sim"}, token)
        arrivals: dict[tuple[str, int], float] = {}
        started: dict[str, float] = {}
        states: list[str] = []

        def record(ev: str, data: dict[str, Any], now: float) -> None:
            if ev == "run":
                states.append(data.get("state", ""))
            elif ev == "sim" and data.get("type") == "sim.started.v1":
                started.setdefault(data["id"], float(data["at"]))
            elif ev == "sim" and "kernel" in data:
                arrivals[(data["id"], int(data["kernel"]["uid"]))] = now

        await _sse(f"{base}/api/runs/{run['id']}/events", record)
        figures["latency_run_state"] = states[-1] if states else "?"
        lat: list[float] = []
        overhead: list[float] = []
        for line in stamps.read_text().splitlines():
            parts = line.split()
            sim = parts[1].rsplit("-a", 1)[0]
            if parts[0] == "kernel" and (sim, int(parts[2])) in arrivals:
                lat.append(arrivals[(sim, int(parts[2]))] - float(parts[3]))
            elif parts[0] == "first" and sim in started:
                overhead.append(float(parts[2]) - started[sim])
        lat.sort()
        figures["latency_events"] = len(lat)
        if lat:
            figures["latency_p50_ms"] = statistics.median(lat) * 1e3
            figures["latency_p95_ms"] = lat[int(0.95 * (len(lat) - 1))] * 1e3
            figures["latency_max_ms"] = lat[-1] * 1e3
        figures["overhead_s"] = sorted(overhead)
        spawn = []
        for sid in run["run"]["sim_ids"]:
            res = await read_result(st, run["id"], sid)
            if res.simulator is not None and res.simulator.first_output_s is not None:
                spawn.append(res.simulator.first_output_s)
        figures["spawn_to_first_line_s"] = sorted(spawn)

        # 3: RSS of the wrapper, chatty vs quiet
        for label, config in (("chatty", "SM80_A100"), ("quiet", "SM90_H200")):
            peaks: dict[int, int] = {}
            watchers: list[asyncio.Task[None]] = []
            one = await _post(base, {"trace_id": trace.id, "configs": [config], "model": "accel-sim"},
                              token)
            final: list[str] = []

            def watch(ev: str, data: dict[str, Any], _now: float,
                      final: list[str] = final, peaks: dict[int, int] = peaks,
                      watchers: list[asyncio.Task[None]] = watchers) -> None:
                if ev == "run":
                    final.append(data.get("state", ""))
                elif ev == "sim" and data.get("type") == "sim.started.v1":
                    pid = int(str(data.get("worker", "")).split(":")[-1].split("/")[0] or 0)
                    if pid:
                        watchers.append(asyncio.create_task(_watch_rss(pid, peaks)))

            t0 = time.perf_counter()
            await _sse(f"{base}/api/runs/{one['id']}/events", watch)
            wall = time.perf_counter() - t0
            for w in watchers:
                w.cancel()
            res = await read_result(st, one["id"], one["run"]["sim_ids"][0])
            figures[f"{label}_state"] = final[-1] if final else "?"
            figures[f"{label}_peak_rss_mb"] = max(peaks.values(), default=0) / 1024
            figures[f"{label}_accelsim_wall_s"] = res.simulator.wall_s if res.simulator else wall
        lines = args.chatty_lines * args.kernels
        figures["chatty_lines"] = lines
        figures["chatty_lines_per_s"] = lines / max(1e-9, figures["chatty_accelsim_wall_s"])
    return figures


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    root = Path(tempfile.mkdtemp(prefix="cascade-bench-accelsim-"))
    try:
        f = asyncio.run(_bench(args, root))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    def secs(values: list[float]) -> str:
        return ", ".join(f"{v:.2f}" for v in values) + " s" if values else "n/a"

    print(f"trace: {f['kernels']} kernels, stand-in {args.pace:g} s per kernel, "
          f"{args.replicas} sims on the local backend")
    if "latency_p50_ms" in f:
        print(f"progress latency (kernel completion line printed -> SSE event at the api) over "
              f"{f['latency_events']} kernels: p50 {f['latency_p50_ms']:.1f} ms, "
              f"p95 {f['latency_p95_ms']:.1f} ms, max {f['latency_max_ms']:.1f} ms")
    print(f"wrapper overhead per sim (job taken -> first accel-sim output line): {secs(f['overhead_s'])}")
    print(f"  of which process spawn -> first line: {secs(f['spawn_to_first_line_s'])}")
    print(f"simulator RSS, chatty stand-in ({f['chatty_lines']:,} lines, "
          f"{f['chatty_lines_per_s']:,.0f} lines/s): peak {f['chatty_peak_rss_mb']:.0f} MB; "
          f"quiet stand-in: peak {f['quiet_peak_rss_mb']:.0f} MB")
    ok = all(f.get(k) == "completed" for k in ("latency_run_state", "chatty_state", "quiet_state"))
    if not ok:
        print(f"runs: latency {f.get('latency_run_state')}, chatty {f.get('chatty_state')}, "
              f"quiet {f.get('quiet_state')}")
    return 0 if ok else 1
