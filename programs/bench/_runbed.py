"""Test bed for runs: a generated multi-kernel timeline, its bundle in S3, a ready trace.

Used by ``cascade bench run`` and the run tests. :func:`generate_timeline`
builds a transformer-like generation loop (one prefill step, then decode
steps; per layer a QKV GEMM, attention, output GEMM, norm, MLP GEMMs and an
elementwise op) with measured-looking durations on the source GPU, host launch
times, one stream and step markers. :func:`publish_trace` builds the bundle
with :class:`cascade.traces.bundle.BundleBuilder`, uploads it under
``bundles/{trace}/{hash}/`` and records the trace as ``ready`` in KV, so runs
can start without the ingest path.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from cascade.kerneltable import KernelTable
from cascade.platform import subjects
from cascade.platform.state import TraceRecord
from cascade.traces.bundle import KERNELS_NAME, MANIFEST_NAME, BundleBuilder

_LAYER_OPS: tuple[tuple[str, str, str], ...] = (
    ("linear", "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "qkv"),
    ("attention", "flash_fwd_kernel", "attn"),
    ("linear", "ampere_fp16_s16816gemm_fp16_64x128_ldg8_f2f_stages_32x5_tn", "out"),
    ("layernorm", "vectorized_layer_norm_kernel", "ln"),
    ("linear", "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_tn", "fc1"),
    ("elementwise", "vectorized_elementwise_kernel_gelu", "act"),
    ("linear", "ampere_fp16_s16816gemm_fp16_128x256_ldg8_f2f_stages_64x3_tn", "fc2"),
)


def generate_timeline(
    n_kernels: int = 2000,
    *,
    hidden: int = 4096,
    prompt: int = 512,
    batch: int = 8,
    seed: int = 0,
) -> KernelTable:
    """A compute-heavy generation-loop timeline of about ``n_kernels`` kernels (A100 durations)."""
    rng = np.random.default_rng(seed)
    per_step = len(_LAYER_OPS) * 4
    steps = max(2, n_kernels // per_step)
    rows: list[dict[str, Any]] = []
    t = 0.0
    device_free = 0.0
    kid = 1
    for step in range(steps):
        prefill = step == 0
        tokens = prompt * batch if prefill else batch
        context = prompt + max(0, step - 1) + 1
        t += 40_000.0  # host scheduling between steps
        for _layer in range(4):
            for op, name, part in _LAYER_OPS:
                if kid > n_kernels:
                    break
                m, n, k = tokens, hidden, hidden
                if part == "qkv":
                    n = 3 * hidden
                elif part == "fc1":
                    n = 4 * hidden
                elif part == "fc2":
                    k = 4 * hidden
                if op == "linear":
                    flops = 2.0 * m * n * k
                    nbytes = 2.0 * (m * k + k * n + m * n)
                    dur = max(flops / (312e12 * 0.7), nbytes / (2.0e12 * 0.8)) * 1e9 + 3000.0
                elif op == "attention":
                    flops = 4.0 * tokens * context * hidden
                    nbytes = 2.0 * (2 * batch * context * hidden + 2 * tokens * hidden)
                    dur = max(flops / (312e12 * 0.5), nbytes / (2.0e12 * 0.7)) * 1e9 + 4000.0
                    m = n = k = -1
                else:
                    flops = 8.0 * tokens * hidden
                    nbytes = 2.0 * 3 * tokens * hidden
                    dur = nbytes / (2.0e12 * 0.7) * 1e9 + 2500.0
                    m = n = k = -1
                dur *= float(rng.uniform(0.97, 1.03))
                launch = t
                t += 4_500.0
                start = max(launch + 3000.0, device_free)
                device_free = start + dur
                rows.append({
                    "name": name, "kernel_id": kid, "stream": 7, "op": op, "dtype": "fp16",
                    "flops": flops, "bytes": nbytes, "m": m, "n": n, "k": k, "batch": 1, "step_batch": batch,
                    "grid_x": max(1, (tokens * hidden) // (128 * 128)), "grid_y": 1, "grid_z": 1,
                    "block_x": 256, "block_y": 1, "block_z": 1, "regs": 128, "smem_bytes": 49152,
                    "host_launch_ns": launch, "start_ns": start, "duration_ns": dur, "step": step,
                    "step_kind": "prefill" if prefill else "decode", "step_tokens": tokens,
                    "step_context": context, "sync_after": 0,
                })
                kid += 1
        if rows:
            rows[-1]["sync_after"] = 1
            t = max(t, device_free) + 15_000.0  # host waits for the step's tokens, then samples
        if kid > n_kernels:
            break
    return KernelTable.from_rows(rows)


def build_bundle(trace_id: str, table: KernelTable, source_gpu: str, workload: str = "") -> tuple[str, bytes, bytes]:
    """``(hash, manifest bytes, kernels.npz bytes)`` of a timeline bundle."""
    builder = BundleBuilder(trace_id=trace_id, source_gpu=source_gpu, workload=workload, kind="timeline")
    builder.add_timeline(table)
    return builder.finalize()


async def publish_trace(
    bus: Any,
    storage: Any,
    trace_id: str,
    table: KernelTable,
    *,
    source_gpu: str = "SM80_A100",
    baseline: dict[str, float] | None = None,
    name: str = "",
) -> TraceRecord:
    """Upload the table's bundle and record the trace ``ready`` in KV (replacing any record)."""
    bundle_hash, manifest, npz = build_bundle(trace_id, table, source_gpu, name)
    prefix = f"bundles/{trace_id}/{bundle_hash}/"
    await storage.put_bytes(prefix + KERNELS_NAME, npz)
    await storage.put_bytes(prefix + MANIFEST_NAME, manifest, content_type="application/json")
    now = time.time()
    record = TraceRecord(
        id=trace_id, name=name or trace_id, source_gpu=source_gpu, kind="timeline", state="ready",
        created_at=now, updated_at=now, sealed=True, kernels_total=len(table),
        kernels_prepared=len(table), bundle_key=prefix, bundle_hash=bundle_hash,
        baseline=dict(baseline or {}),
    )
    kv = await bus.kv(subjects.KV_TRACES)
    await kv.put(trace_id, record)
    return record


async def publish_instruction_trace(
    bus: Any,
    storage: Any,
    trace_id: str,
    folder: Path,
    n_kernels: int,
    *,
    source_gpu: str = "SM80_A100",
    blocks: int = 4,
) -> TraceRecord:
    """Generate an ``n_kernels`` Accel-Sim trace in ``folder`` (kernel-N.traceg + kernelslist.g),
    upload its files under the trace's raw prefix, parse it into an instruction bundle, and
    record the trace ``ready`` in KV (what ingest + prepare would leave behind)."""
    from cascade.platform.keys import raw_key
    from cascade.traces.folder import parse_trace_folder
    from cascade.traces.generate import TraceSpec, write_trace_folder

    specs = [TraceSpec(kernel_id=k, name=f"_Z6kernel{k}Pf", grid=(blocks, 1, 1), iterations=2)
             for k in range(1, n_kernels + 1)]
    write_trace_folder(folder, specs, memcpys=1)
    for path in sorted(folder.iterdir()):
        await storage.put_bytes(raw_key(trace_id, path.name), path.read_bytes())
    parsed = parse_trace_folder(folder)
    if parsed.failures:
        raise RuntimeError(f"generated trace did not parse: {parsed.failures}")
    builder = BundleBuilder(trace_id=trace_id, source_gpu=source_gpu, workload="bench", kind="instructions")
    for features in parsed.kernels:
        builder.add_features(features)
    bundle_hash, manifest, npz = builder.finalize()
    prefix = f"bundles/{trace_id}/{bundle_hash}/"
    await storage.put_bytes(prefix + KERNELS_NAME, npz)
    await storage.put_bytes(prefix + MANIFEST_NAME, manifest, content_type="application/json")
    now = time.time()
    record = TraceRecord(
        id=trace_id, name=trace_id, source_gpu=source_gpu, kind="instructions", state="ready",
        created_at=now, updated_at=now, sealed=True, kernels_total=n_kernels,
        kernels_prepared=n_kernels, bundle_key=prefix, bundle_hash=bundle_hash,
        bundle_kernels=n_kernels,
    )
    kv = await bus.kv(subjects.KV_TRACES)
    await kv.put(trace_id, record)
    return record
