"""A stand-in for ``vllm serve`` (tests of ``cascade profile vllm``): an aiohttp app speaking
the endpoints the profiler uses, and failing the way the real server fails.

- ``GET /health``, ``GET /v1/models``;
- ``POST /v1/completions`` with ``stream: true``: ``max_tokens`` SSE chunks ``data: {...}``
  (a first-token delay, then one per step), a usage chunk, ``data: [DONE]``;
- ``POST /start_profile`` / ``POST /stop_profile``, registered only when
  ``VLLM_TORCH_PROFILER_DIR`` is set (vLLM's behaviour: 404 otherwise). On stop, every rank
  writes ``standin_rank<R>.<ms>.pt.trace.json.gz`` there the way the PyTorch profiler does
  (gzip Chrome trace: ``deviceProperties``, ``cpu_op`` / ``cuda_runtime`` / ``kernel`` events
  linked by ``External id`` and ``correlation``, an NCCL all-reduce kernel per layer), slowly:
  part of the file first, the rest ``--flush-delay`` seconds later.

``python -m tests.support.vllm_standin --port P --tensor-parallel-size N --model NAME``
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import time
from pathlib import Path
from typing import Any

from aiohttp import web

PROFILER_DIR_ENV = "VLLM_TORCH_PROFILER_DIR"
DEVICE = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045215232,
          "computeMajor": 9, "computeMinor": 0, "numSms": 132}
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


class Settings(argparse.Namespace):
    port: int
    tensor_parallel_size: int
    model: str
    ttft_s: float
    step_s: float
    flush_delay: float
    profiler_dir: str


SETTINGS = web.AppKey("settings", Settings)
PROFILING = web.AppKey("profiling", dict)


def rank_trace(rank: int, steps: int, tp: int) -> dict[str, Any]:
    """One rank's Chrome trace of ``steps`` decode steps (two layers: GEMM, all-reduce)."""
    events: list[dict[str, Any]] = []
    t = 1_700_000_000_000_000.0 + rank * 3.0  # µs, the host clock ranks share
    ext = corr = 0
    tid, pid = 100 + rank, 4000 + rank
    for step in range(steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"step:decode:tokens={tp}",
                       "pid": pid, "tid": tid, "ts": t, "dur": 400.0})
        for _layer in range(2):
            for kind in ("gemm", "nccl"):
                ext += 1
                corr += 1
                if kind == "gemm":
                    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid,
                          "ts": t, "dur": 20.0, "args": {
                              "External id": ext, "Input Dims": [[8, 4096], [4096, 4096 // tp]],
                              "Input type": ["c10::BFloat16", "c10::BFloat16"]}}
                    name, dur, grid = GEMM, 30.0 + step, [32, 4, 1]
                else:
                    op = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid,
                          "tid": tid, "ts": t, "dur": 20.0, "args": {
                              "External id": ext, "Collective name": "allreduce",
                              "Group size": tp, "dtype": "BFloat16", "In msg nelems": 8 * 4096,
                              "Out msg nelems": 8 * 4096}}
                    name, dur, grid = NCCL, 12.0, [2, 1, 1]
                events.append(op)
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                               "pid": pid, "tid": tid, "ts": t + 5.0, "dur": 4.0,
                               "args": {"correlation": corr, "External id": ext}})
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": 7,
                               "ts": t + 15.0, "dur": dur, "args": {
                                   "External id": ext, "correlation": corr, "device": rank,
                                   "stream": 7, "grid": grid, "block": [128, 1, 1],
                                   "registers per thread": 128, "shared memory": 0}})
                t += 50.0
        t += 100.0
    props = [dict(DEVICE, id=i) for i in range(tp)]
    return {"schemaVersion": 1, "deviceProperties": props, "traceEvents": events,
            "traceName": f"rank{rank}"}


async def write_slowly(path: Path, doc: dict[str, Any], delay: float) -> None:
    """Write the gzip file in two parts, ``delay`` apart (the profiler's flush is not atomic)."""
    data = gzip.compress(json.dumps(doc).encode())
    half = len(data) // 2
    with path.open("wb") as fh:
        fh.write(data[:half])
        fh.flush()
        await asyncio.sleep(delay)
        fh.write(data[half:])


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="")


async def models(request: web.Request) -> web.Response:
    s = request.app[SETTINGS]
    return web.json_response({"object": "list", "data": [{"id": s.model, "object": "model"}]})


async def completions(request: web.Request) -> web.StreamResponse:
    s = request.app[SETTINGS]
    body = await request.json()
    n = int(body.get("max_tokens", 16))
    prompt = body.get("prompt")
    if not isinstance(prompt, list | str) or not body.get("stream"):
        return web.json_response({"error": "stream a prompt"}, status=400)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await asyncio.sleep(s.ttft_s)
    for i in range(n):
        if i:
            await asyncio.sleep(s.step_s)
        prof = request.app[PROFILING]
        if prof["on"]:
            prof["steps"] += 1
        chunk = {"id": "cmpl-1", "object": "text_completion", "created": int(time.time()),
                 "model": s.model, "choices": [{"index": 0, "text": f" t{i}", "logprobs": None,
                                                "finish_reason": "length" if i == n - 1 else None}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"id": "cmpl-1", "object": "text_completion", "model": s.model, "choices": [],
             "usage": {"prompt_tokens": len(prompt), "completion_tokens": n}}
    await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    await resp.write_eof()
    return resp


async def start_profile(request: web.Request) -> web.Response:
    request.app[PROFILING].update(on=True, steps=0)
    return web.Response(text="")


async def stop_profile(request: web.Request) -> web.Response:
    s = request.app[SETTINGS]
    prof = request.app[PROFILING]
    prof["on"] = False
    steps = max(1, min(int(prof["steps"]), 20))
    folder = Path(s.profiler_dir)
    stamp = int(time.time() * 1000)
    tp = s.tensor_parallel_size
    tasks = [asyncio.ensure_future(write_slowly(
        folder / f"standin_rank{r}.{stamp}.pt.trace.json.gz", rank_trace(r, steps, tp),
        s.flush_delay * (r + 1))) for r in range(tp)]
    prof["writers"] = tasks  # answered before the files are whole, as vLLM may be
    return web.Response(text="")


def make_app(settings: Settings) -> web.Application:
    """The app; the profiler routes only when a profiler dir is set (as vLLM does)."""
    app = web.Application()
    app[SETTINGS] = settings
    app[PROFILING] = {"on": False, "steps": 0}
    routes = [web.get("/health", health), web.get("/v1/models", models),
              web.post("/v1/completions", completions)]
    if settings.profiler_dir:
        routes += [web.post("/start_profile", start_profile), web.post("/stop_profile", stop_profile)]
    app.add_routes(routes)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vllm_standin")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--model", default="standin-model")
    p.add_argument("--ttft-s", type=float, default=0.02)
    p.add_argument("--step-s", type=float, default=0.003)
    p.add_argument("--flush-delay", type=float, default=0.6)
    settings = p.parse_args(argv, namespace=Settings())
    settings.profiler_dir = os.environ.get(PROFILER_DIR_ENV, "")
    web.run_app(make_app(settings), host="127.0.0.1", port=settings.port, print=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
