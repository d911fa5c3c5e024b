"""`cascade bench cli`: whole `cascade` processes as a user runs them.

Times `cascade predict` end to end (process start, imports, reading the table, the model,
writing the output) on generated kernel tables of 300,000 and 3,000,000 rows, CSV and
Parquet, with each process's peak RSS, and the start-up of `cascade --help` and
`cascade predict --help`. Every figure is a separate OS process (best of ``--repeat``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NAME = "cli"
HELP = "whole-process cascade predict on 300k / 3M-row CSV and Parquet tables, and CLI start-up"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", default="300000,3000000",
                        help="comma-separated table sizes (default 300000,3000000)")
    parser.add_argument("--formats", default="csv,parquet", help="input and output formats")
    parser.add_argument("--target", default="SM90_H100")
    parser.add_argument("--source", default="SM80_A100")
    parser.add_argument("--model", default="auto")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is shown)")
    parser.add_argument("--cascade", default=None,
                        help="the cascade executable to time (default: the one beside python)")
    parser.add_argument("--keep", metavar="DIR", help="keep the generated tables here")


def _cascade(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    beside = Path(sys.executable).with_name("cascade")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("cascade")
    return [found] if found else [sys.executable, "-m", "programs.cli"]


#: Runs one command and prints its wall time and peak RSS. A fresh small interpreter forks
#: it, because Linux carries a parent's peak RSS into a forked child across exec.
_PROBE = """
import os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - t0
code = os.waitstatus_to_exitcode(status)
if code:
    sys.stderr.write(err.decode(errors="replace")[-2000:])
print(code, wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)
"""


def _run(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one process; its output is discarded."""
    done = subprocess.run([sys.executable, "-c", _PROBE, *cmd], capture_output=True, text=True,
                          check=False)
    try:
        code, wall, rss, cpu = done.stdout.split()
    except ValueError:
        raise SystemExit(f"could not time {' '.join(cmd)}:\n{done.stderr[-2000:]}") from None
    if int(code) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{done.stderr[-2000:]}")
    return float(wall), float(rss), float(cpu)


def _best(cmd: list[str], repeat: int) -> tuple[float, float, float]:
    """Best wall time, highest peak RSS and least CPU time over ``repeat`` runs."""
    runs = [_run(cmd) for _ in range(max(1, repeat))]
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def run(args: argparse.Namespace) -> int:
    """Print wall time and peak RSS of every whole process."""
    from cascade.tableio import write_table
    from programs.bench.predict import synthetic_table

    exe = _cascade(args.cascade)
    load = os.getloadavg()[0]
    print(f"cascade executable: {' '.join(exe)}; {os.cpu_count()} CPUs, load average {load:.1f} "
          "(wall times stretch on a loaded machine; CPU times much less)")
    for argv in (["--help"], ["predict", "--help"]):
        wall, rss, cpu = _best([*exe, *argv], max(args.repeat, 5))
        print(f"  cascade {' '.join(argv):16s} {wall * 1e3:7.0f} ms wall, {cpu * 1e3:5.0f} ms CPU, "
              f"peak RSS {rss:6.0f} MiB")
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    suffix = {"csv": ".csv", "parquet": ".parquet"}
    with tempfile.TemporaryDirectory(prefix="cascade-bench-cli-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for rows in (int(r) for r in args.rows.split(",") if r.strip()):
            table = synthetic_table(rows)
            for fmt in formats:
                src = folder / f"kernels-{rows}{suffix[fmt]}"
                write_table(table, src)
                out = folder / f"pred-{rows}{suffix[fmt]}"
                cmd = [*exe, "predict", "--trace", str(src), "--source", args.source,
                       "--target", args.target, "--model", args.model, "--out", str(out)]
                wall, rss, cpu = _best(cmd, args.repeat if rows <= 1_000_000 else 1)
                size = src.stat().st_size / 2**20
                print(f"  predict {rows:>9,} rows {fmt:7s} ({size:6.1f} MiB in, "
                      f"{out.stat().st_size / 2**20:6.1f} MiB out): {wall:6.2f} s wall, {cpu:6.2f} s CPU, "
                      f"{rows / wall / 1e3:7.0f} k rows/s, peak RSS {rss:6.0f} MiB")
            del table
    return 0
