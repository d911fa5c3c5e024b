"""`cascade bench prepare`: trace parse + feature throughput and peak memory.

Generates (or reuses) one large kernel trace per instruction mix ('simple':
every feature once per loop iteration; 'real': the proportions of the
NVBit tracer's output on a tiled GEMM; 'unique': the real mix with no memory
line repeating beyond one block's warps; see :mod:`cascade.traces.generate`)
and input kind (plain text, xz), parses each in a fresh child process and
prints MB/s of uncompressed text per wall second and per CPU second (one
core), and the child's peak RSS.
"""

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
MIXES = ("simple", "real", "unique")
INPUTS = ("plain", "xz")
TARGET_MBPS = 20.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mb", type=float, default=256.0,
                        help="uncompressed trace text to generate per trace (default 256)")
    parser.add_argument("--mix", choices=(*MIXES, "all"), default="all",
                        help="instruction mix: simple, real (the tracer's), unique (real, no memory "
                        "line repeats) or all (default)")
    parser.add_argument("--input", choices=(*INPUTS, "all"), default="all",
                        help="plain text, xz-compressed or all (default)")
    parser.add_argument("--xz", action="store_true", help="same as --input xz")
    parser.add_argument("--raw", action="store_true", help="raw .trace instead of .traceg")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to keep/reuse the generated traces (default: a temp dir)")


def _parse_child(path: str) -> dict[str, float]:
    """Parse one file in this (fresh) process; return its own figures."""
    from cascade.traces.parse import parse_kernel_file

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu0 = os.times()
    t0 = time.perf_counter()
    feats = parse_kernel_file(path)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    return {
        "wall": wall,
        "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
        "rss0": rss0,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "warp_insts": float(feats.row["warp_insts"]),
        "lines": float(feats.lines),
    }


def _trace(folder: Path, size_mb: float, mix: str, xz: bool, raw: bool) -> tuple[Path, float, float]:
    """The generated trace for (mix, xz): path, text bytes, expected warp instructions."""
    from cascade.traces.generate import write_large_trace

    name = f"kernel-1-{mix}-{int(size_mb)}mb.{'trace' if raw else 'traceg'}"
    path = folder / (name + (".xz" if xz else ""))
    truth_file = path.with_suffix(path.suffix + ".truth")
    if path.exists() and truth_file.exists():
        text_bytes, warp_insts = (float(x) for x in truth_file.read_text().split())
        print(f"reusing {path} ({path.stat().st_size / 1e6:,.0f} MB on disk)")
        return path, text_bytes, warp_insts
    t = time.perf_counter()
    with ProcessPoolExecutor(1) as pool:
        truth = pool.submit(write_large_trace, path, size_mb, xz=xz, raw=raw, mix=mix).result()
    text_bytes, warp_insts = float(truth.text_bytes), truth.columns["warp_insts"]
    truth_file.write_text(f"{text_bytes} {warp_insts}")
    print(f"generated {path}: {text_bytes / 1e6:,.0f} MB text, "
          f"{path.stat().st_size / 1e6:,.0f} MB on disk in {time.perf_counter() - t:.1f} s")
    return path, text_bytes, warp_insts


def run(args: argparse.Namespace) -> int:
    """Generate (or reuse) the traces, parse each in a fresh process, print the figures."""
    folder = args.dir or Path(tempfile.gettempdir()) / "cascade-bench-prepare"
    folder.mkdir(parents=True, exist_ok=True)
    mixes = MIXES if args.mix == "all" else (args.mix,)
    inputs = ("xz",) if args.xz else INPUTS if args.input == "all" else (args.input,)
    rows: list[tuple[str, str, float, dict[str, float], bool]] = []
    ok_all = True
    for mix in mixes:
        for kind in inputs:
            path, text_bytes, warp_insts = _trace(folder, args.size_mb, mix, kind == "xz", args.raw)
            with ProcessPoolExecutor(1) as pool:
                res = pool.submit(_parse_child, str(path)).result()
            ok = res["warp_insts"] == warp_insts
            ok_all &= ok
            rows.append((mix, kind, text_bytes, res, ok))
            mb = text_bytes / 1e6
            per_core = mb / res["cpu"] if res["cpu"] > 0 else math.inf
            print(f"{mix:6} {kind:5}  {mb:8,.1f} MB text, {res['lines']:,.0f} lines: "
                  f"{res['wall']:.2f} s wall, {mb / res['wall']:.1f} MB/s wall, "
                  f"{per_core:.1f} MB/s per core; peak RSS {res['peak']:.0f} MB; warp "
                  f"instructions {'ok' if ok else 'MISMATCH'}")
    fmt = "trace" if args.raw else "traceg"
    print()
    print(f"{'mix':6} {'input':5} {'MB text':>9} {'wall s':>7} {'MB/s wall':>10} "
          f"{'MB/s/core':>10} {'peak RSS':>9}  ({fmt}; target >= {TARGET_MBPS:.0f} MB/s per "
          "core, RSS < 400 MB)")
    for mix, kind, text_bytes, res, ok in rows:
        mb = text_bytes / 1e6
        per_core = mb / res["cpu"] if res["cpu"] > 0 else math.inf
        print(f"{mix:6} {kind:5} {mb:9,.1f} {res['wall']:7.2f} {mb / res['wall']:10.1f} "
              f"{per_core:10.1f} {res['peak']:7.0f}MB{'' if ok else '  MISMATCH'}")
    return 0 if ok_all else 1
