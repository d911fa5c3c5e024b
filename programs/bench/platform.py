"""`cascade bench platform`: time `cascade up` to /readyz 200 and measure the stack's memory.

Runs the real command (this venv's interpreter, ``-m programs.cli up``) in a fresh
temporary data directory on free ports (the testbed's
:class:`~programs.embedded.testbed.UpStack`): a cold start (credentials, buckets
and streams created), a stop, and a warm start on the same data. After the
warm start it lets the stack idle for ``--settle`` seconds, then sums
resident memory (RSS, and PSS which counts shared pages once) over the
whole process tree, per process, and the CPU each process of the idle stack
uses over the next ``--idle-cpu`` seconds (after the cold start as well: a fresh
stack idling, what `make run` leaves running). ``--set NAME=VALUE`` gives the
stack a setting of its own (it inherits no ``CASCADE_*`` variable). Then it uses the stack as a user would
(``--imports`` uploads of a generated instruction-trace folder through the real
``cascade import``, and a run of three GPUs x two replicas on the last one),
lets it idle again and measures again: what a stack holds after work, not only
after a start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from programs.embedded.testbed import UpStack

NAME = "platform"
HELP = "time `cascade up` to /readyz 200 and measure the idle stack's resident memory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench platform``."""
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds to let the stack idle before measuring memory (default 5)")
    parser.add_argument("--idle-cpu", type=float, default=20.0, metavar="SECONDS",
                        help="then measure the idle stack's CPU over this many seconds (default 20)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the stack's own (e.g. embedded_go_memory_mib=128: the stack "
                             "inherits no CASCADE_* variable); repeatable")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="give up when /readyz is not 200 after this many seconds (default 120)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    parser.add_argument("--imports", type=int, default=3,
                        help="trace imports before the second measurement (default 3; 0 skips)")
    parser.add_argument("--kernels", type=int, default=12,
                        help="kernel files in the imported trace folder (default 12)")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _tree(root: int) -> list[int]:
    children = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _kib(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory(root: int) -> tuple[int, int, list[tuple[str, int]]]:
    """(RSS KiB, PSS KiB, [(process, RSS KiB)]) summed over ``root`` and its descendants."""
    rss = pss = 0
    rows = []
    for pid in _tree(root):
        proc = Path(f"/proc/{pid}")
        r = _kib(proc / "status", "VmRSS")
        rss += r
        pss += _kib(proc / "smaps_rollup", "Pss")
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            cmd = "?"
        rows.append((cmd[:70], r))
    return rss, pss, rows


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"cascade bench platform: --set takes NAME=VALUE (a setting's name without "
                         f"CASCADE_, e.g. embedded_go_memory_mib=128), got {text!r}")
    return name.strip().lower().removeprefix("cascade_"), value


def cpu_ticks(root: int) -> dict[int, tuple[str, int]]:
    """Per process of ``root``'s tree: (command, user + system CPU clock ticks so far)."""
    out = {}
    for pid in _tree(root):
        proc = Path(f"/proc/{pid}")
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        out[pid] = (cmd[:70], int(fields[11]) + int(fields[12]))  # utime, stime
    return out


def _print_cpu(title: str, before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]],
               seconds: float) -> None:
    """CPU each process used between two :func:`cpu_ticks` readings, in % of one core."""
    hz = os.sysconf("SC_CLK_TCK")
    rows = [(cmd, (ticks - before[pid][1]) / hz / seconds * 100) for pid, (cmd, ticks) in after.items()
            if pid in before]
    print(f"{title}: {sum(r for _c, r in rows):5.1f}% of one core")
    for cmd, r in sorted(rows, key=lambda x: -x[1]):
        print(f"    {r:5.1f}%  {cmd}")


def _print_memory(title: str, rss: int, pss: int, rows: list[tuple[str, int]]) -> None:
    print(f"{title} ({len(rows)} processes)")
    print(f"  RSS sum : {rss / 1024:7.1f} MiB")
    print(f"  PSS sum : {pss / 1024:7.1f} MiB  (shared pages counted once)")
    for cmd, r in sorted(rows, key=lambda x: -x[1]):
        print(f"    {r / 1024:7.1f} MiB  {cmd}")


def _work(bed: UpStack, workdir: Path, imports: int, kernels: int, timeout: float) -> str:
    """Imports and a run through the real CLI and API; returns a one-line summary."""
    from cascade.traces.generate import TraceSpec, write_trace_folder

    base, token = bed.base, bed.token
    template = workdir / "trace-template"
    write_trace_folder(template, [TraceSpec(kernel_id=i, iterations=20 + 4 * i, grid=(8, 2, 1),
                                            block=(128, 1, 1)) for i in range(1, kernels + 1)])
    size = sum(f.stat().st_size for f in template.iterdir()) / 2**20
    trace_id = ""
    t0 = time.perf_counter()
    for i in range(imports):
        folder = workdir / f"trace-{i}"
        shutil.copytree(template, folder)
        out = subprocess.run(
            [sys.executable, "-m", "programs.cli", "import", str(folder), "--app", base,
             "--token", token, "--name", f"bench-{i}", "--source-gpu", "SM80_A100",
             "--wait", str(timeout), "--quiet"], env=bed.env, capture_output=True, text=True,
            check=False)
        if out.returncode != 0:
            raise SystemExit(f"cascade import failed:\n{out.stdout}\n{out.stderr}")
        trace_id = out.stdout.split()[1].rstrip(":")
    imported = time.perf_counter() - t0
    run = bed.api("POST", "/api/runs", {
        "trace_id": trace_id, "configs": ["SM90_H100", "SM80_A100", "SM89_L40S"], "replicas": 2,
        "model": "auto"}, timeout=30)
    run_id = run["id"]
    t0 = time.perf_counter()
    state = ""
    while time.perf_counter() - t0 < timeout:
        state = bed.api("GET", f"/api/runs/{run_id}", timeout=30)["run"]["state"]
        if state in ("completed", "partial", "failed", "cancelled"):
            break
        time.sleep(0.2)
    return (f"{imports} imports of a {kernels}-kernel folder ({size:.1f} MiB) in {imported:.1f} s; "
            f"run {run_id} (3 GPUs x 2 replicas) {state} in {time.perf_counter() - t0:.1f} s")


def _stop(bed: UpStack) -> tuple[int, float]:
    t0 = time.perf_counter()
    code = bed.stop()
    return (-1 if code is None else code), time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    from programs.embedded.testbed import UpStack

    workdir = Path(tempfile.mkdtemp(prefix="cascade-bench-platform-"))
    try:
        settings = dict(_setting(text) for text in args.set)
        with UpStack(workdir, **settings) as bed:  # stopped on the way out, also when a step raises
            cold = bed.start(args.timeout)
            assert bed.proc is not None
            time.sleep(args.settle)
            ticks = cpu_ticks(bed.proc.pid)  # a fresh stack idling: what `make run` leaves running
            time.sleep(args.idle_cpu)
            cold_cpu = (ticks, cpu_ticks(bed.proc.pid))
            code1, stop1 = _stop(bed)
            warm = bed.start(args.timeout)
            assert bed.proc is not None
            time.sleep(args.settle)
            idle = memory(bed.proc.pid)
            ticks = cpu_ticks(bed.proc.pid)  # what the idle stack burns: polling, collectors
            time.sleep(args.idle_cpu)
            idle_cpu = (ticks, cpu_ticks(bed.proc.pid))
            worked = None
            summary = ""
            if args.imports > 0:
                summary = _work(bed, workdir, args.imports, args.kernels, args.timeout)
                time.sleep(args.settle)
                worked = memory(bed.proc.pid)
            code2, stop2 = _stop(bed)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("cascade up -> /readyz 200")
    print(f"  cold start (new data dir) : {cold:6.2f} s   (target < 15 s)")
    print(f"  warm start (same data)    : {warm:6.2f} s")
    print(f"  stop (SIGTERM -> exit)    : {stop1:6.2f} s, {stop2:6.2f} s  (exit codes {code1}, {code2})")
    _print_cpu(f"idle CPU of the fresh stack, {args.settle:g}-{args.settle + args.idle_cpu:g} s after its cold start",
               *cold_cpu, args.idle_cpu)
    _print_memory(f"idle stack memory after {args.settle:g} s", *idle)
    _print_cpu(f"idle CPU after the warm start, over the next {args.idle_cpu:g} s", *idle_cpu, args.idle_cpu)
    if worked is not None:
        print(summary)
        _print_memory(f"stack memory {args.settle:g} s after that work", *worked)
    if args.keep:
        print(f"data and logs (up-1.log, up-2.log) kept in {workdir}")
    return 0 if code1 == 0 and code2 == 0 else 1
