"""`cascade bench prepare`: trace parse + feature throughput and peak memory."""

from __future__ import annotations

import argparse
import math
import os
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

NAME = "prepare"
HELP = "parse + feature-extraction throughput (MB/s of trace text per core) and peak RSS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mb", type=float, default=1024.0,
                        help="uncompressed trace text to generate (default 1024)")
    parser.add_argument("--xz", action="store_true", help="xz-compress the generated trace")
    parser.add_argument("--raw", action="store_true", help="raw .trace instead of .traceg")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to keep/reuse the generated trace (default: a temp dir)")


def run(args: argparse.Namespace) -> int:
    """Generate (or reuse) the trace, parse it, print the figures."""
    from cascade.traces.generate import write_large_trace
    from cascade.traces.parse import parse_kernel_file

    folder = args.dir or Path(tempfile.gettempdir()) / "cascade-bench-prepare"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"kernel-1-{int(args.size_mb)}mb.{'trace' if args.raw else 'traceg'}"
    path = folder / (name + (".xz" if args.xz else ""))
    truth_file = path.with_suffix(path.suffix + ".truth")
    if path.exists() and truth_file.exists():
        text_bytes, warp_insts = (float(x) for x in truth_file.read_text().split())
        print(f"reusing {path} ({path.stat().st_size / 1e6:,.0f} MB on disk)")
    else:
        t = time.perf_counter()
        # generate in a child process so the parse's peak RSS below is its own
        with ProcessPoolExecutor(1) as pool:
            truth = pool.submit(write_large_trace, path, args.size_mb, xz=args.xz,
                                raw=args.raw).result()
        text_bytes, warp_insts = float(truth.text_bytes), truth.columns["warp_insts"]
        truth_file.write_text(f"{text_bytes} {warp_insts}")
        print(f"generated {path}: {text_bytes / 1e6:,.0f} MB text, "
              f"{path.stat().st_size / 1e6:,.0f} MB on disk in {time.perf_counter() - t:.1f} s")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu0 = os.times()
    t0 = time.perf_counter()
    feats = parse_kernel_file(path)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ok = feats.row["warp_insts"] == warp_insts
    mbps = text_bytes / 1e6 / cpu if cpu > 0 else math.inf
    print(f"format            {feats.format}{' + xz' if args.xz else ''}")
    print(f"text              {text_bytes / 1e6:,.1f} MB, {feats.lines:,} lines")
    print(f"warp instructions {feats.row['warp_insts']:,.0f} (expected {warp_insts:,.0f}: "
          f"{'ok' if ok else 'MISMATCH'})")
    print(f"wall time         {wall:.2f} s")
    print(f"throughput        {text_bytes / 1e6 / wall:.1f} MB/s wall, {mbps:.1f} MB/s per core "
          f"(CPU time, target >= 20)")
    print(f"peak RSS          {peak:.0f} MB (before parse {rss0:.0f} MB; target < 400)")
    return 0 if ok else 1
