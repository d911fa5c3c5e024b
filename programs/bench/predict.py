"""`cascade bench predict`: kernel predictions per second and timeline replay speed."""

from __future__ import annotations

import argparse
import time

import numpy as np

from cascade.kerneltable import KernelTable

NAME = "predict"
HELP = "kernel predictions per second per target, and 30k-kernel timeline replay on three targets"

_NAMES = np.array(["ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn",
                   "void at::native::vectorized_elementwise_kernel<4, silu>",
                   "void rms_norm_kernel<c10::Half>", "flash_fwd_kernel",
                   "ampere_sgemm_128x64_tn", "void at::native::reduce_kernel<512>"], dtype=object)
_OPS = np.array(["linear", "elementwise", "rmsnorm", "attention", "linear", "reduce"], dtype=object)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the prediction table")
    parser.add_argument("--timeline", type=int, default=30_000, help="kernels in the replayed timeline")
    parser.add_argument("--targets", default="SM90_H100,SM90_H200,SM100_B200")
    parser.add_argument("--source", default="SM80_A100")
    parser.add_argument("--repeat", type=int, default=3)


def synthetic_table(n: int, seed: int = 0) -> KernelTable:
    """A timeline-shaped table of transformer-like kernels (GEMMs, norms, elementwise)."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, len(_NAMES), n)
    tokens = rng.integers(1, 4096, n).astype(np.float64)
    hidden = rng.choice([2048.0, 4096.0, 8192.0], n)
    gemm = (_OPS[kind] == "linear")
    dur = np.where(gemm, 2 * tokens * hidden * hidden / 2e14 * 1e9, tokens * hidden * 6 / 1.5e12 * 1e9) + 2000
    step = np.arange(n) // 100
    host = np.cumsum(rng.uniform(3000, 6000, n))
    return KernelTable({
        "name": _NAMES[kind], "op": _OPS[kind],
        "dtype": np.where(kind == 4, "fp32", "fp16").astype(object),
        "m": np.where(gemm, tokens, -1), "n": np.where(gemm, hidden, -1), "k": np.where(gemm, hidden, -1),
        "bytes": np.where(gemm, np.nan, tokens * hidden * 6), "duration_ns": dur,
        "host_launch_ns": host, "stream": np.zeros(n, dtype=np.int64),
        "sync_after": (np.arange(n) % 100 == 99).astype(np.int64), "step": step,
        "step_kind": np.where(step == 0, "prefill", "decode").astype(object),
        "step_tokens": np.ones(n, dtype=np.int64), "step_context": step + 128,
    })


def run(args: argparse.Namespace) -> int:
    """Print predictions/s per model and target, and replay timings."""
    from cascade.engine.predict import predict_many
    from cascade.engine.replay import replay
    from cascade.engine.workload import workload_of

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    table = synthetic_table(args.kernels)
    t0 = time.perf_counter()
    w = workload_of(table)
    derive = time.perf_counter() - t0
    print(f"table: {args.kernels} kernels; workload derivation {derive * 1e3:.1f} ms "
          f"({args.kernels / derive / 1e6:.2f} M kernels/s, once per table)")
    for model in ("roofline", "scaled", "analytical", "auto"):
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            predict_many(table, targets, source=args.source, model=model, workload=w)
            best = min(best, time.perf_counter() - t0)
        per_target = args.kernels / (best / len(targets))
        print(f"  {model:10s}: {best * 1e3:8.1f} ms for {len(targets)} targets -> "
              f"{per_target / 1e6:6.2f} M kernel predictions/s per target")
    tl = synthetic_table(args.timeline, seed=1)
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        preds = predict_many(tl, targets, source=args.source, model="scaled")
        results = [replay(tl, p.predicted_ns) for p in preds]
        best = min(best, time.perf_counter() - t0)
    print(f"timeline: {args.timeline} kernels, predict (scaled) + replay on {len(targets)} targets: "
          f"{best * 1e3:.1f} ms")
    for p, r in zip(preds, results, strict=True):
        print(f"  {p.target:12s} end-to-end {r.end_to_end_ns / 1e6:9.3f} ms, {len(r.steps.step)} steps, "
              f"gpu busy {r.gpu_busy_ns / 1e6:9.3f} ms")
    return 0
