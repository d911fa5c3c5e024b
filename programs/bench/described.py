"""`cascade bench described`: a serving question answered from a model description alone,
timed as a user runs it (issue 46's target: under 10 s whole process).

Writes a Llama-3.1-70B-shaped config.json (the public architecture: 80 layers, hidden 8192,
64 / 8 heads, intermediate 28672, vocabulary 128256) and times `cascade scenario --hf-config
... --gpu GPU --tp 4 --quant fp8 --concurrency 256 --prompt 1024 --output 1024 --requests
2000 --json` as a separate OS process (best of ``--repeat``, with its peak RSS), then prints
the answer it gave (TTFT, TPOT, throughput per GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "described"
HELP = "whole-process cascade scenario from a 70B config.json: TP 4, FP8, 2,000 requests at concurrency 256"

#: Llama-3.1-70B's architecture as its public config.json states it.
LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
             "num_hidden_layers": 80, "vocab_size": 128256, "max_position_embeddings": 131072,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", default="SM100_B200,SM90_H200,SM90_H100",
                        help="comma-separated GPUs (default SM100_B200,SM90_H200,SM90_H100)")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--quant", default="fp8")
    parser.add_argument("--repeat", type=int, default=2, help="runs per figure (best is shown)")


def _once(cmd: list[str]) -> tuple[float, float, bytes]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        sys.stderr.write(err.decode(errors="replace")[-2000:])
        raise SystemExit(f"cascade scenario failed: {' '.join(cmd)}")
    return wall, usage.ru_maxrss / 1024, out


def run(args: argparse.Namespace) -> int:
    exe = Path(sys.executable).with_name("cascade")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "programs.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "llama-3.1-70b.json"
        cfg.write_text(json.dumps(LLAMA_70B))
        print(f"{'GPU':12s} {'wall s':>7s} {'RSS MB':>7s} {'TTFT mean/median ms':>20s} {'TPOT mean/median ms':>20s} "
              f"{'out tok/s/GPU':>13s}")
        for gpu in [g.strip() for g in args.gpus.split(",") if g.strip()]:
            cmd = [*base, "scenario", "--hf-config", str(cfg), "--gpu", gpu, "--tp", str(args.tp), "--quant",
                   args.quant, "--concurrency", str(args.concurrency), "--prompt", "1024", "--output", "1024",
                   "--requests", str(args.requests), "--json"]
            runs = [_once(cmd) for _ in range(max(1, args.repeat))]
            wall, rss, out = min(runs, key=lambda r: r[0])
            doc = json.loads(out)
            ttft, tpot = doc["ttft_ms"], doc["tpot_ms"]
            per_gpu = doc["output_throughput"] / args.tp
            print(f"{gpu:12s} {wall:7.2f} {rss:7.0f} {ttft['mean']:9.1f} / {ttft['median']:8.1f} "
                  f"{tpot['mean']:9.2f} / {tpot['median']:8.2f} {per_gpu:13.0f}")
    print(f"(Llama-3.1-70B-shaped, {args.quant}, TP {args.tp}, {args.requests} requests at concurrency "
          f"{args.concurrency}, 1024 in / 1024 out; predicted from the description alone)")
    return 0
