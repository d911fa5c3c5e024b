"""State at scale for read benchmarks and tests: many traces and runs, one big ready trace.

:func:`seed_state` writes what the services would have written after a long life, straight
into KV and S3: ``traces`` finished TraceRecords (ready, failed), ``runs`` finished RunRecords, and
one ready timeline trace of ``kernels`` kernels (the bundled sample's synthetic timeline
repeated) whose content-addressed bundle is uploaded the way prepare stores one.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from cascade.kerneltable import KernelTable
from cascade.platform import subjects
from cascade.platform.keys import bundle_prefix
from cascade.platform.samples import load_sample
from cascade.platform.state import RunRecord, TraceRecord
from cascade.platform.storage import Storage
from cascade.traces.bundle import (
    KERNELS_NAME,
    MANIFEST_NAME,
    BundleManifest,
    bundle_hash,
    table_to_npz,
)

#: Writes in flight at once while seeding.
CONCURRENCY = 256


@dataclass(frozen=True)
class Seeded:
    """What :func:`seed_state` wrote."""

    big_trace_id: str
    kernels: int
    trace_ids: list[str]
    run_ids: list[str]
    seconds: float
    tag: str = ""
    """Part of every id and name written (``bench {tag} trace {i}``, ``bench {tag} run {i}``)."""


def big_table(kernels: int) -> KernelTable:
    """A timeline of ``kernels`` kernels: the sample's synthetic one repeated, ids renumbered,
    launch times shifted so the repeats follow each other."""
    base = load_sample().synthetic_table
    reps = -(-kernels // len(base))
    span = float(np.nanmax(base["start_ns"] + base["duration_ns"])) + 1_000.0
    parts = []
    for r in range(reps):
        part = base.take(slice(0, len(base)))
        for col in ("host_launch_ns", "start_ns"):
            part[col] = np.asarray(part[col], dtype=np.float64) + r * span
        parts.append(part)
    table = KernelTable.concat(parts).take(slice(0, kernels))
    table["kernel_id"] = np.arange(1, kernels + 1, dtype=np.int64)
    return table


async def store_big_trace(bus: Any, storage: Storage, kernels: int, *, trace_id: str,
                          created_at: float) -> TraceRecord:
    """Upload a ``kernels``-kernel bundle and record its trace as ready."""
    table = await asyncio.to_thread(big_table, kernels)
    npz = await asyncio.to_thread(table_to_npz, table)
    manifest = BundleManifest(trace_id=trace_id, source_gpu="SM90_H100", kind="timeline",
                              workload="facebook/opt-125m eager greedy generation (bench)",
                              kernel_count=kernels,
                              kernel_hashes_sha256=hashlib.sha256(npz).hexdigest(),
                              files={KERNELS_NAME: hashlib.sha256(npz).hexdigest()})
    digest = bundle_hash(manifest)
    prefix = bundle_prefix(trace_id, digest)
    await storage.put_bytes(prefix + KERNELS_NAME, npz)
    await storage.put_bytes(prefix + MANIFEST_NAME, msgspec.json.encode(manifest),
                            content_type="application/json")
    record = TraceRecord(
        id=trace_id, name=f"bench {kernels:,}-kernel timeline", source_gpu="SM90_H100",
        kind="timeline", workload=manifest.workload, state="ready", sealed=True,
        created_at=created_at, updated_at=created_at, kernels_total=kernels,
        kernels_prepared=kernels, bundle_key=prefix, bundle_hash=digest, bundle_kernels=kernels)
    traces = await bus.kv(subjects.KV_TRACES)
    await traces.put(trace_id, record)
    return record


async def _bounded(calls: Iterable[Awaitable[Any]], limit: int = CONCURRENCY) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[Any]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))


async def seed_state(bus: Any, storage: Storage, *, traces: int, runs: int, kernels: int,
                     tag: str | None = None) -> Seeded:
    """Write ``traces`` traces (one of them the ``kernels``-kernel ready trace when
    ``kernels`` > 0) and ``runs`` completed runs of it into KV (and the bundle into S3)."""
    started = time.perf_counter()
    tag = tag or uuid.uuid4().hex[:8]
    now = time.time()
    big_id = f"tr-bench{tag}big"
    big: TraceRecord | None = None
    if kernels > 0:
        big = await store_big_trace(bus, storage, kernels, trace_id=big_id, created_at=now)
    kv_traces = await bus.kv(subjects.KV_TRACES)
    trace_ids = [f"tr-bench{tag}{i:06d}" for i in range(max(0, traces - (kernels > 0)))]
    # a long-lived store: finished traces (nine in ten ready, sharing the big trace's bundle;
    # failed ones long settled), so ingest's reconcile pass has nothing to redo
    failed = TraceRecord(id="-", name="-", source_gpu="SM90_H100", kind="timeline",
                         state="failed", sealed=True, updated_at=now - 86_400.0,
                         errors=["bench: seeded as failed"])
    ready = failed if big is None else msgspec.structs.replace(
        big, errors=[], updated_at=now - 86_400.0)
    records = [
        msgspec.structs.replace(failed if i % 10 == 9 else ready, id=tid,
                                name=f"bench {tag} trace {i}", created_at=now - 1 - i * 0.001)
        for i, tid in enumerate(trace_ids)
    ]
    await _bounded(kv_traces.put(r.id, r) for r in records)
    kv_runs = await bus.kv(subjects.KV_RUNS)
    run_ids = [f"run-bench{tag}{i:06d}" for i in range(runs)]
    await _bounded(
        kv_runs.put(rid, RunRecord(id=rid, trace_id=big_id, configs=["SM90_H100"],
                                   state="completed", created_at=now - 1 - i * 0.001,
                                   updated_at=now, finished_at=now, name=f"bench {tag} run {i}"))
        for i, rid in enumerate(run_ids))
    ids = ([big_id] if kernels > 0 else []) + trace_ids
    return Seeded(big_trace_id=big_id if kernels > 0 else "", kernels=kernels, trace_ids=ids,
                  run_ids=run_ids, seconds=time.perf_counter() - started, tag=tag)
