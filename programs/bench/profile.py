"""`cascade bench profile`: what ``cascade profile`` costs and how fast kernels reach the app.

Three figures, each optional (``--only``):

- **overhead**: the ``hf`` recipe on this machine's CPU (PyTorch CPU build; random weights
  from a config: OPT-125m's shape by default, ``--tiny`` for a 2-layer toy): mean
  end-to-end (median) of ``--repeats`` unprofiled generations (after ``--warmup``)
  against the same generation under the timeline pass's PyTorch profiler
  (``record_shapes``, step ranges), interleaved with them.
- **lag**: a real stack (``nats-server`` and SeaweedFS as ``cascade up`` runs them, the api
  and ingest in-process: the testbed's :func:`~programs.embedded.testbed.embedded_servers`
  and :class:`~programs.embedded.testbed.InProcessStack`) and ``cascade profile
  --mode instructions`` over the stand-in tracer writing ``--files`` kernel files; lag of
  each file from the moment the stand-in finished it to the moment ingest recorded it
  (``received_at``), p50 / p95 / max.
- **memory**: the same stack; the stand-in writes ``--stream-gb`` GB of kernel files
  (sparse, multipart uploads); peak RSS of the ``cascade profile`` process alone (VmHWM
  from /proc), sampled while it streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "profile"
HELP = "timeline-pass overhead on the CPU recipe, kernel upload lag p50/p95, streaming memory"

OPT125M = {
    "model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072, "vocab_size": 50272,
    "max_position_embeddings": 2048, "word_embed_proj_dim": 768, "do_layer_norm_before": True,
    "activation_function": "relu", "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
    "enable_bias": True, "layer_norm_elementwise_affine": True,
}
TINY = {**OPT125M, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "ffn_dim": 64, "word_embed_proj_dim": 32, "max_position_embeddings": 128}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench profile``."""
    parser.add_argument("--only", choices=("overhead", "lag", "memory"), action="append",
                        help="run only this figure (repeatable; default all)")
    parser.add_argument("--tiny", action="store_true", help="overhead on a 2-layer toy, not OPT-125m")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--files", type=int, default=1000, help="kernel files for the lag figure")
    parser.add_argument("--interval", type=float, default=0.02,
                        help="seconds the stand-in takes per kernel file (lag figure)")
    parser.add_argument("--stream-gb", type=float, default=2.0, help="GB streamed for the memory figure")
    parser.add_argument("--parallel", type=int, default=4)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def overhead(args: argparse.Namespace, base: Path) -> dict[str, float]:
    """Baseline vs timeline-pass end-to-end of the CPU recipe (in this process)."""
    from programs.profiler.hf import Recipe, add_recipe_arguments

    cfg = base / "model" / "config.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(json.dumps(TINY if args.tiny else OPT125M))
    p = argparse.ArgumentParser()
    add_recipe_arguments(p)
    recipe = Recipe(p.parse_args(["--model", str(cfg), "--random-init", "--max-new-tokens",
                                  str(args.max_new_tokens), "--repeats", str(args.repeats),
                                  "--warmup", str(args.warmup), "--device", "cpu"]))
    for _ in range(args.warmup):
        recipe.generate()
    recipe.args.warmup = 0
    plain, steps, profiled = [], [], []
    for i in range(args.repeats):  # interleaved, so load on a shared machine hits both alike
        e2e, step_ms = recipe.generate()
        plain.append(e2e)
        steps.extend(step_ms)
        profiled.append(recipe.timeline(base / f"timeline-{i}.pt.trace.json"))
    b = statistics.median(plain)
    t = statistics.median(profiled)
    return {"baseline_ms": b, "timeline_ms": t, "overhead_pct": (t - b) / b * 100,
            "baseline_step_ms": statistics.fmean(steps),
            "timeline_trace_mb": (base / "timeline-0.pt.trace.json").stat().st_size / 1e6}


def _peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def _profile_process(info: dict[str, Any], out: Path, standin: list[str],
                           parallel: int) -> tuple[int, float, str]:
    """Run ``cascade profile`` as its own process; (exit status, peak RSS MB, stderr tail)."""
    argv = [sys.executable, "-m", "programs.cli", "profile", "--app", info["url"], "--token", info["token"],
            "--source-gpu", "SM90_H100", "--mode", "instructions", "--out", str(out),
            "--baseline-repeats", "0", "--wait", "0", "--quiet", "--parallel", str(parallel), "--",
            sys.executable, "-m", "programs.profiler.standin", *standin]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    peak = 0.0
    waiter = asyncio.ensure_future(proc.communicate())
    while not waiter.done():
        peak = max(peak, _peak_rss_mb(proc.pid) or 0.0)
        await asyncio.wait({waiter}, timeout=0.1)
    _out, err = waiter.result()
    return int(proc.returncode or 0), peak, err.decode()[-2000:]


async def lag_and_memory(args: argparse.Namespace, base: Path, which: set[str]) -> dict[str, float]:
    """The lag and memory figures on one stack."""
    from programs.client import CascadeClient
    from programs.embedded.testbed import InProcessStack, embedded_servers

    figures: dict[str, float] = {}
    async with embedded_servers(base / "servers", log_level="warning", samples="false",
                                reconcile_interval_s="5",
                                max_upload_bytes=str(4 * 1024**3)) as settings, \
            InProcessStack.running(settings, "api", "ingest", name="cascade-bench-profile") as stack:
        info = {"url": stack.base, "token": settings.api_tokens[-1]}
        if "lag" in which:
            out, log = base / "lag", base / "standin.log"
            t0 = time.time()
            rc, _peak, err = await _profile_process(info, out, [
                "--kernels", str(args.files), "--interval", str(args.interval), "--blocks", "1",
                "--chunks", "1", "--log", str(log)], args.parallel)
            if rc != 0:
                raise RuntimeError(f"cascade profile exited {rc}: {err}")
            done = {e["name"]: e["t"] for e in map(json.loads, log.read_text().splitlines())
                    if e["event"] == "complete"}
            state = json.loads((out / ".cascade-import.json").read_text())
            (entry,) = state.values()
            async with CascadeClient(info["url"], info["token"]) as api:
                deadline = time.monotonic() + 120
                while True:  # the api accepted every file; wait for ingest to record them
                    files = (await api.get_trace(entry["trace_id"]))["files"]
                    if sum(f["name"] in done for f in files) >= args.files or \
                            time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
            lags = [f["received_at"] - done[f["name"]] for f in files if f["name"] in done]
            if len(lags) != args.files:
                raise RuntimeError(f"{len(lags)} of {args.files} kernel files arrived")
            figures.update(lag_files=float(len(lags)), lag_p50_s=_pct(lags, 0.5),
                           lag_p95_s=_pct(lags, 0.95), lag_max_s=max(lags),
                           lag_run_s=time.time() - t0)
        if "memory" in which:
            mib = 128
            count = max(1, round(args.stream_gb * 1e9 / (mib * 1024 * 1024)))
            out = base / "memory"
            rc, peak, err = await _profile_process(info, out, [
                "--kernels", str(count), "--interval", "0.05", "--blocks", "1", "--sparse-mb",
                str(mib)], args.parallel)
            if rc != 0:
                raise RuntimeError(f"cascade profile exited {rc}: {err}")
            streamed = sum(p.stat().st_size for p in out.glob("kernel-*"))
            figures.update(memory_gb=streamed / 1e9, memory_files=float(count), memory_peak_rss_mb=peak)
            for p in out.glob("kernel-*"):
                p.unlink()
    return figures


def run(args: argparse.Namespace) -> int:
    """Measure and print."""
    which = set(args.only or ("overhead", "lag", "memory"))
    with tempfile.TemporaryDirectory(prefix="cascade-bench-profile-") as tmp:
        base = Path(tmp)
        if "overhead" in which:
            f = overhead(args, base / "overhead")
            shape = "2-layer toy" if args.tiny else "OPT-125m shape"
            print(f"timeline-pass overhead (hf recipe, CPU, {shape}, random weights, "
                  f"{args.max_new_tokens} tokens, {args.repeats} runs each, interleaved, after {args.warmup} warm-up)")
            print(f"  baseline e2e median         {f['baseline_ms']:.1f} ms "
                  f"(step mean {f['baseline_step_ms']:.2f} ms)")
            print(f"  timeline pass e2e median    {f['timeline_ms']:.1f} ms")
            print(f"  overhead                   {f['overhead_pct']:+.1f} %  "
                  f"(Chrome trace {f['timeline_trace_mb']:.1f} MB)")
        if which & {"lag", "memory"}:
            f = asyncio.run(lag_and_memory(args, base / "stack", which))
            if "lag" in which:
                print(f"upload lag, stand-in finished a kernel file -> ingest recorded it "
                      f"({f['lag_files']:.0f} files, {args.interval * 1000:.0f} ms apart, "
                      f"{args.parallel} uploads in flight)")
                print(f"  p50 {f['lag_p50_s'] * 1000:.0f} ms   p95 {f['lag_p95_s'] * 1000:.0f} ms   "
                      f"max {f['lag_max_s'] * 1000:.0f} ms   (whole run {f['lag_run_s']:.1f} s)")
            if "memory" in which:
                print(f"memory while streaming {f['memory_gb']:.2f} GB "
                      f"({f['memory_files']:.0f} sparse kernel files, multipart)")
                print(f"  cascade profile peak RSS   {f['memory_peak_rss_mb']:.0f} MB")
    return 0
