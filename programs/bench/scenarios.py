"""`cascade bench scenarios`: how fast the serving simulator runs (wall time, this machine)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from cascade.serving.arrivals import Fixed, LogNormal, Poisson, Uniform
from cascade.serving.capacity import max_rate
from cascade.serving.kvcache import MODEL_SHAPES, KVConfig
from cascade.serving.metrics import Slo
from cascade.serving.routers import LeastOutstanding
from cascade.serving.scenario import Scenario, resolve, run_scenario, simulate
from cascade.serving.synthetic import synthetic_step_model

NAME = "scenarios"
HELP = "serving simulator speed: 10,000 requests over 4 replicas (target < 2 s) and more"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is shown)")
    parser.add_argument("--quick", action="store_true", help="only the headline figure")


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best = float("inf")
    out = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(args: argparse.Namespace) -> int:
    model = synthetic_step_model()
    kv = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=80 << 30)
    n, reps = args.requests, args.replicas
    print(f"step model: {model.source}; KV {kv.num_blocks()} blocks x {kv.block_size} tokens "
          f"per replica; wall times are the best of {args.repeat}")
    cases = [
        ("headline: poisson 40 req/s/replica, 256 in / 128 out, least_outstanding",
         Scenario(arrival=Poisson(rate=40.0 * reps), n_requests=n, replicas=reps,
                  prompt=Fixed(tokens=256), output=Fixed(tokens=128), router=LeastOutstanding())),
    ]
    if not args.quick:
        cases += [
            ("light load: poisson 2.5 req/s/replica (long decode runs fast-forwarded)",
             Scenario(arrival=Poisson(rate=2.5 * reps), n_requests=n, replicas=reps,
                      prompt=Fixed(tokens=256), output=Fixed(tokens=128))),
            ("overload with preemption: 100 req/s/replica, uniform 32..1024 in, lognormal out",
             Scenario(arrival=Poisson(rate=100.0 * reps), n_requests=n, replicas=reps,
                      prompt=Uniform(lo=32, hi=1024), output=LogNormal(median=128, p90=400))),
        ]
    for label, sc in cases:
        wall, res = _best(partial(run_scenario, sc, model, kv), args.repeat)
        print(f"\n{label}\n  {res.completed} requests over {reps} replicas: {wall:.3f} s wall "
              f"({'meets' if wall < 2.0 else 'MISSES'} the < 2 s target); {res.steps} engine "
              f"steps ({res.steps / wall / 1e3:.0f} k steps/s), {res.total_output_tokens} tokens, "
              f"{res.preemptions} preemptions")
        print(f"  simulated: {res.request_throughput:.1f} req/s, TTFT p99 {res.ttft_ms.p99:.1f} ms,"
              f" TPOT mean {res.tpot_ms.mean:.2f} ms, KV max {100 * res.kv_cache.max_utilisation:.0f}%")
    if args.quick:
        return 0
    for label, sc in cases[:2]:
        rs = resolve(sc)
        single, _ = _best(partial(simulate, rs, model, kv, fast_forward=False), 1)
        ff, _ = _best(partial(simulate, rs, model, kv, fast_forward=True), 1)
        print(f"\nfast-forward of pure-decode runs ({label.split(':')[0]}): {single:.3f} s "
              f"stepping one at a time vs {ff:.3f} s (x{single / ff:.1f})")
    sc = Scenario(arrival=Poisson(rate=10.0), n_requests=1000, prompt=Fixed(tokens=512),
                  output=Fixed(tokens=128), slo=Slo(ttft_ms=300, tpot_ms=30, attainment=0.95))
    wall, cap = _best(lambda: max_rate(sc, model, kv), 1)
    print(f"capacity search (1,000 requests a probe): {cap.rate:.2f} req/s in "
          f"{len(cap.probes)} probes, {wall:.2f} s")
    k = 20_000
    t0 = time.perf_counter()
    for i in range(k):
        model.predict_prefill(1 + i % 4000)
        model.predict_decode(1 + i % 64, 100 + i % 3000)
    per = (time.perf_counter() - t0) / (2 * k) * 1e6
    print(f"step-model predictions: {per:.1f} us each (predict_prefill / predict_decode)")
    return 0
