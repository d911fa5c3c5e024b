"""`cascade bench kineto`: PyTorch profiler trace import throughput and peak memory."""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

NAME = "kineto"
HELP = "PyTorch profiler (Kineto) trace import throughput (MB/s of JSON) and peak RSS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mb", type=float, default=200.0,
                        help="JSON text to generate (default 200)")
    parser.add_argument("--gz", action="store_true", help="gzip the generated trace")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to keep/reuse the generated trace (default: a temp dir)")


def run(args: argparse.Namespace) -> int:
    """Generate (or reuse) the trace, import it, print the figures."""
    import msgspec
    import numpy as np

    from cascade import opfamilies as ops
    from cascade.traces.chrome import read_chrome_trace
    from cascade.traces.kinetogen import KinetoTruth, write_kineto_trace

    folder = args.dir or Path(tempfile.gettempdir()) / "cascade-bench-kineto"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"gen-{int(args.size_mb)}mb.pt.trace.json{'.gz' if args.gz else ''}"
    truth_file = path.with_name(path.name + ".truth.json")
    if path.exists() and truth_file.exists():
        truth = msgspec.json.decode(truth_file.read_bytes(), type=KinetoTruth)
        print(f"reusing {path} ({path.stat().st_size / 1e6:,.0f} MB on disk)")
    else:
        began = time.perf_counter()
        with ProcessPoolExecutor(1) as pool:  # generate in a child: the RSS below is the import's
            truth = pool.submit(write_kineto_trace, path, args.size_mb, gz=args.gz).result()
        truth_file.write_bytes(msgspec.json.encode(truth))
        print(f"generated {path}: {truth.file_bytes / 1e6:,.0f} MB JSON, "
              f"{path.stat().st_size / 1e6:,.0f} MB on disk in {time.perf_counter() - began:.1f} s")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu0 = os.times()
    t0 = time.perf_counter()
    tl = read_chrome_trace(path)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = tl.table
    fam = ops.families(t["op"], t["name"])
    gemm_class = np.isin(fam, [ops.GEMM, ops.ATTENTION])
    shaped = gemm_class & (t["m"] > 0) & (t["flops"] > 0)
    dur = t["duration_ns"]
    share = float(dur[shaped].sum() / dur[gemm_class].sum()) if gemm_class.any() else float("nan")
    known = (t["flops"] > 0) | (t["bytes"] > 0)
    ok = len(t) == truth.kernels and int(gemm_class.sum()) == truth.gemm_class_kernels
    print(f"JSON text         {truth.file_bytes / 1e6:,.1f} MB{' (gzip)' if args.gz else ''}")
    print(f"kernels           {len(t):,} (expected {truth.kernels:,}: {'ok' if ok else 'MISMATCH'})")
    print(f"wall              {wall:.2f} s   cpu {cpu:.2f} s")
    print(f"throughput        {truth.file_bytes / 1e6 / wall:,.1f} MB/s of JSON (wall)")
    print(f"peak RSS          {peak:,.0f} MB (before import {rss0:,.0f} MB; target < 500 MB)")
    print(f"GEMM-class time with shapes  {share:.1%}")
    print(f"kernel time with known work  {float(dur[known].sum() / dur.sum()):.1%}")
    print(f"device            {tl.device} (sm {tl.device_sm})")
    return 0 if ok else 1
