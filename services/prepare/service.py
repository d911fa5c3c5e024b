"""Prepare: post-processes raw kernel traces and timelines into simulation bundles.

Pulls jobs from the ``cascade.jobs.prepare`` work queue (several workers may
run; each job goes to one of them):

- :class:`PrepareJob`: stream one raw object from S3 (xz decompressed on the
  fly by the parser), parse it into per-kernel features (or import a
  timeline), store the result as ``traces/{id}/parts/{unit}/{etag}.msgpack``
  (addressed by the raw object's ETag, so a redelivery never duplicates),
  and mark the unit prepared in KV. A malformed line fails that kernel with
  the parser's ``file:line: expected ...`` message; a truncated xz is
  reported as such.
- :class:`BundleJob`: once the trace is sealed and every unit is prepared,
  assemble the content-addressed bundle (``bundles/{id}/{hash}/``:
  ``kernels.npz`` first, ``manifest.json`` last), copy it into the local cache
  (``{data_dir}/cache/bundles/{hash}/``), and only then flip the trace to
  ``ready`` and publish :class:`BundleReady`.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from cascade.errors import TraceFormatError, ValidationError
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable
from cascade.platform import subjects
from cascade.platform.bundlecache import cache_dir_for
from cascade.platform.bus import Delivery
from cascade.platform.keys import bundle_prefix, part_key, raw_prefix, split_raw_key
from cascade.platform.messages.jobs import BundleJob, PrepareJob
from cascade.platform.messages.trace import (
    BundleReady,
    KernelFailed,
    KernelPrepared,
    TraceStateChanged,
)
from cascade.platform.runtime import ServiceContext
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import FileRecord, TraceStore, UnitRecord, assess, capped, replace
from cascade.traces.bundle import KERNELS_NAME, MANIFEST_NAME, BundleBuilder, table_to_npz
from cascade.traces.files import check_name
from cascade.traces.jsonstream import JsonLimits, use_limits
from cascade.traces.parse import KernelFeatures, KernelTraceParser
from cascade.traces.timeline import import_timeline
from cascade.traces.xzstream import BoundedDecompressor

#: KernelTable columns copied into a unit's progress record.
SUMMARY_COLUMNS: tuple[str, ...] = (
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "regs", "smem_bytes",
    "stream", "warps", "warp_insts", "gmem_requests", "gmem_sectors", "footprint_lines",
    "smem_accesses", "tensor_flops",
)
#: Jobs one worker process runs at once (one parses while another downloads).
CONCURRENCY = 2
#: Parts downloaded at once while assembling a bundle.
PART_FETCH_CONCURRENCY = 16

_FEATURES = msgspec.msgpack.Decoder(KernelFeatures)
_ENC = msgspec.msgpack.Encoder()


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in SUMMARY_COLUMNS:
        v = row.get(c)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out[c] = v.item() if hasattr(v, "item") else v
    return out


class PrepareService:
    """The prepare service's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.platform.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack), so tests can pass their own.
    """

    name = "prepare"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.storage = ctx.require_storage()
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="prepare")
        self.started = False
        self.store: TraceStore | None = None
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.cache_dir = cache_dir_for(self.settings.data_path)
        self.counts: dict[str, int] = {
            "prepared": 0, "skipped": 0, "failed": 0, "bundles": 0, "bytes": 0,
        }

    async def start(self) -> None:
        """Start the work-queue worker (its stop goes on ``ctx.stack``)."""
        self.store = await TraceStore.open(self.bus)
        await self.ctx.run_worker(
            subjects.JOB_PREPARE, subjects.DURABLE_PREPARE_JOBS, PrepareJob | BundleJob,
            self.handle, concurrency=CONCURRENCY, on_exhausted=self.on_exhausted,
            permanent=(ValidationError,),
        )
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "prepare", "started": self.started, **self.counts}

    @property
    def _store(self) -> TraceStore:
        assert self.store is not None, "PrepareService.start() was not called"
        return self.store

    async def handle(self, job: PrepareJob | BundleJob, delivery: Delivery) -> None:
        """Dispatch one job."""
        match job:
            case PrepareJob():
                await self.prepare_unit(job, delivery)
            case BundleJob():
                await self.assemble(job.trace_id, reason=job.reason)

    # -- one unit ----------------------------------------------------------------------------
    async def prepare_unit(self, job: PrepareJob, delivery: Delivery) -> None:
        """Parse one kernel trace (or import one timeline) and record the result."""
        tid, name = split_raw_key(job.key)
        if tid != job.trace_id:
            raise ValidationError(f"job for trace {job.trace_id} names key {job.key}", field="key")
        tf = check_name(name)
        if not tf.unit:
            return
        log = self.log.bind(trace_id=tid, file=name, attempt=delivery.attempt)
        record = await self._store.get(tid)
        if record is None:
            log.info("job for a deleted trace dropped")
            return
        current = await self._store.get_unit(tid, tf.unit)
        if current is not None and current.etag == job.etag and current.state in ("prepared", "failed"):
            self.counts["skipped"] += 1
            log.info("unit already done", state=current.state)
            await self._maybe_bundle(tid, tf.kind == "timeline", f"{tf.unit}:{job.etag}")
            return
        info = await self.storage.head(job.key)
        if info is None or info.etag != job.etag:
            self.counts["skipped"] += 1
            log.info("stale job skipped", stored_etag=info.etag if info else None)
            return
        started = time.perf_counter()

        def preparing(cur: UnitRecord | None) -> UnitRecord:
            base = cur if cur is not None and cur.etag == job.etag else UnitRecord(
                unit=tf.unit, kind="kernel" if tf.kind == "kernel" else "timeline",
                file=name, key=job.key, etag=job.etag, kernel_id=tf.kernel_id,
            )
            return replace(base, state="preparing", attempts=base.attempts + 1,
                           updated_at=time.time())

        await self._store.mutate_unit(tid, tf.unit, preparing)
        pkey = part_key(tid, tf.unit, job.etag)
        prepared: dict[str, Any]
        try:
            if tf.kind == "kernel":
                features = await self._parse_kernel(job.key, name, record, tf.kernel_id)
                body = _ENC.encode(features)
                row = features.row
                prepared = {"name": str(row.get("name", "")), "summary": _summary(row),
                            "row": {k: v.item() if hasattr(v, "item") else v for k, v in row.items()},
                                "warnings": capped(list(features.warnings), 20), "rows": 1,
                                "kernel_id": int(row.get("kernel_id", tf.kernel_id or -1))}
            else:
                table = await self._import_timeline(job.key, name)
                body = table_to_npz(table)
                prepared = {"name": name, "summary": {"kernels": len(table)}, "rows": len(table)}
        except TraceFormatError as exc:
            await self._fail_unit(tid, tf.unit, job.etag, str(exc), tf.kernel_id, name)
            return
        await self.storage.put_bytes(pkey, body)
        previous: list[UnitRecord | None] = []

        def done(cur: UnitRecord | None) -> UnitRecord | None:
            previous.append(cur)
            if cur is not None and cur.etag != job.etag:
                return None
            base = cur or UnitRecord(unit=tf.unit, file=name, key=job.key, etag=job.etag)
            return replace(base, state="prepared", part_key=pkey, error="",
                           updated_at=time.time(), **prepared)

        stored = await self._store.mutate_unit(tid, tf.unit, done)
        before = previous[-1] if previous else None
        transitioned = stored is not None and stored.state == "prepared" and stored.etag == job.etag and not (
            before is not None and before.etag == job.etag and before.state == "prepared"
        )
        seconds = time.perf_counter() - started
        if transitioned:
            is_kernel = tf.kind == "kernel"
            was_failed = (is_kernel and before is not None and before.etag == job.etag
                          and before.state == "failed")
            await self._store.mutate(tid, lambda r: replace(
                r, kernels_prepared=r.kernels_prepared + (1 if is_kernel else 0),
                kernels_failed=max(0, r.kernels_failed - (1 if was_failed else 0)),
                prepared_bytes=r.prepared_bytes + job.size,
                prepare_seconds=r.prepare_seconds + seconds,
            ))
        self.counts["prepared"] += 1
        self.counts["bytes"] += job.size
        log.info("unit prepared", unit=tf.unit, seconds=round(seconds, 3),
                 bytes=job.size)
        await self.bus.publish(
            subjects.trace_event(tid, "kernel"),
            KernelPrepared(trace_id=tid, kernel_index=max(0, tf.kernel_id or 0),
                           name=str(prepared["name"]), features_key=pkey,
                           instructions=int(prepared.get("summary", {}).get("warp_insts", 0) or 0),
                           bytes=job.size, seconds=seconds),
            msg_id=f"kernel:{tid}:{tf.unit}:{job.etag}",
        )
        await self._maybe_bundle(tid, tf.kind == "timeline", f"{tf.unit}:{job.etag}")

    async def _parse_kernel(self, key: str, name: str, record: TraceRecord,
                            kernel_id: int | None) -> KernelFeatures:
        spec = default_registry().resolve(record.source_gpu)
        parser = KernelTraceParser(name, source_sm=spec.sm_version if spec else None,
                                   kernel_id=kernel_id)
        async for chunk in self.storage.get_stream(key):
            await asyncio.to_thread(parser.feed, chunk)
        return await asyncio.to_thread(parser.finish)

    async def _import_timeline(self, key: str, name: str) -> KernelTable:
        with tempfile.TemporaryDirectory(prefix="cascade-timeline-") as tmp:
            gz = name.endswith(".gz")
            path = Path(tmp) / (name[:-3] if gz else name)
            # A .gz is decompressed here, bounded (size and ratio: compression bombs fail the
            # file naming the limit), so the reader only ever sees plain bytes.
            bounded = BoundedDecompressor(name, "gzip") if gz else None
            with path.open("wb") as fh:
                async for chunk in self.storage.get_stream(key):
                    data = await asyncio.to_thread(bounded.feed, chunk) if bounded else chunk
                    await asyncio.to_thread(fh.write, data)
            if bounded is not None:
                bounded.finish()
            try:
                return await asyncio.to_thread(_import_bounded, path,
                                               JsonLimits.from_settings(self.settings))
            except TraceFormatError as exc:
                raise TraceFormatError(name, exc.line, exc.expected, exc.got) from None
            except (ValueError, OSError) as exc:
                raise TraceFormatError(name, None, "a readable timeline file", str(exc)) from None

    async def _fail_unit(self, tid: str, unit: str, etag: str, error: str,
                         kernel_id: int | None, name: str) -> None:
        previous: list[UnitRecord | None] = []

        def failed(cur: UnitRecord | None) -> UnitRecord | None:
            previous.append(cur)
            if cur is not None and cur.etag != etag:
                return None
            base = cur or UnitRecord(unit=unit, file=name, etag=etag, kernel_id=kernel_id)
            return replace(base, state="failed", error=error, updated_at=time.time())

        stored = await self._store.mutate_unit(tid, unit, failed)
        before = previous[-1] if previous else None
        if stored is None or stored.state != "failed" or (
            before is not None and before.etag == etag and before.state == "failed"
        ):
            return
        self.counts["failed"] += 1
        self.log.warning("unit failed", trace_id=tid, unit=unit, error=error)
        old = await self._store.get(tid)

        def mark(r: TraceRecord) -> TraceRecord | None:
            # one bad unit fails only itself: the trace goes on to a bundle of the others
            # (assemble), and fails only when nothing could be prepared
            if r.state == "ready":
                return None
            return replace(
                r, kernels_failed=r.kernels_failed + (1 if kernel_id is not None else 0),
                errors=capped(list(dict.fromkeys([*r.errors, error]))),
            )

        new = await self._store.mutate(tid, mark)
        await self.bus.publish(
            subjects.trace_event(tid, "kernel-failed"),
            KernelFailed(trace_id=tid, kernel_index=kernel_id, file=name, error=error),
            msg_id=f"kernel-failed:{tid}:{unit}:{etag}",
        )
        if new is not None and old is not None and old.state != new.state:
            await self.bus.publish(
                subjects.trace_event(tid, "state"),
                TraceStateChanged(trace_id=tid, state=new.state, previous=old.state, reason=error),
            )
        await self._maybe_bundle(tid, True, f"{unit}:{etag}")

    async def on_exhausted(self, job: PrepareJob | BundleJob, error: BaseException, attempts: int) -> None:
        """A job that used up its deliveries: record the failure instead of dropping it."""
        message = f"gave up after {attempts} attempts: {error or type(error).__name__}"
        if isinstance(job, PrepareJob):
            try:
                tid, name = split_raw_key(job.key)
                tf = check_name(name)
            except ValidationError:
                self.log.error("malformed prepare job dropped", key=job.key, error=str(error))
                return
            if tf.unit:
                await self._fail_unit(tid, tf.unit, job.etag, f"{name}: {message}", tf.kernel_id, name)
            return
        await self._store.mutate(job.trace_id, lambda r: None if r.state == "ready" else replace(
            r, state="failed", errors=capped([*r.errors, f"bundle assembly {message}"])))

    # -- bundle ------------------------------------------------------------------------------
    async def _maybe_bundle(self, tid: str, always: bool, unit: str) -> None:
        """Queue the bundle job when the record's counts say the trace may be complete
        (``always``: a timeline or a failed unit, which the kernel counts do not show), after
        ``unit`` (``{unit}:{etag}``) was prepared or failed.

        The job's de-dup id names ``unit``: a redelivered unit's job is dropped, but each unit
        (and each new upload of one) queues its own. Timeline units change no count: with the
        counts alone in the id, the second of two timeline files queued a duplicate of the
        first one's job, which JetStream dropped, and the trace waited for ingest's
        reconcile (about 20 s).
        """
        record = await self._store.get(tid)
        if record is None or not record.sealed or record.state in ("ready", "failed"):
            return
        if not always and not (record.kernels_total and record.kernels_prepared
                               + record.kernels_failed >= record.kernels_total):
            return
        await self.bus.publish(
            subjects.JOB_PREPARE,
            BundleJob(trace_id=tid, reason="prepare: last unit prepared"),
            msg_id=(f"bundle:{tid}:{record.kernels_prepared}:{record.kernels_failed}:"
                    f"{record.sealed_at}:{unit}"),
        )

    async def assemble(self, tid: str, *, reason: str = "") -> TraceRecord | None:
        """Build, store and cache the bundle if the trace is complete; flip it to ready.

        Idempotent: a ready trace is left alone; an incomplete one is left for later.
        Returns the ready record, or None when nothing was done.
        """
        store = self._store
        t0 = time.perf_counter()
        record = await store.get(tid)
        if record is None or record.state in ("ready", "failed") or not record.sealed:
            return None
        expected, files, units = await asyncio.gather(
            store.expected(tid), store.files(tid), store.units(tid)
        )
        a = assess(record, expected, files, units)
        unrecorded = await self._unrecorded(tid, files)
        if unrecorded:
            # Ingest has not caught up with every uploaded object (a kernelslist may still
            # add expectations): it queues this job again once they are recorded.
            self.log.info("bundle waits for ingest", trace_id=tid, unrecorded=unrecorded[:5])
            return None
        if a.all_failed:
            await self._all_failed(tid, a.errors)
            return None
        if not a.complete:
            self.log.info("bundle not ready yet", trace_id=tid, pending=len(a.pending),
                          missing=len(a.missing), failed=len(a.failed), reason=reason)
            return None
        started = time.perf_counter()
        phases = {"check_s": started - t0}
        by_unit = {u.unit: u for u in units}
        chosen = [by_unit[u] for u in a.prepared]
        limit = asyncio.Semaphore(PART_FETCH_CONCURRENCY)

        async def fetch(u: UnitRecord) -> bytes:
            if u.kind == "kernel" and u.row:
                return b""
            async with limit:
                return await self.storage.get_bytes(u.part_key, max_bytes=512 * 1024 * 1024)

        bodies = await asyncio.gather(*(fetch(u) for u in chosen))
        phases["fetch_s"] = time.perf_counter() - started
        bundle_hash, manifest, npz = await asyncio.to_thread(
            self._build, record, chosen, bodies
        )
        phases["build_s"] = time.perf_counter() - started - phases["fetch_s"]
        prefix = bundle_prefix(tid, bundle_hash)
        if await self.storage.head(prefix + MANIFEST_NAME) is None:
            await self.storage.put_bytes(prefix + KERNELS_NAME, npz)
            await self.storage.put_bytes(prefix + MANIFEST_NAME, manifest,
                                         content_type="application/json")
        await asyncio.to_thread(self._cache, bundle_hash, manifest, npz)
        kernel_count = msgspec.json.decode(manifest).get("kernel_count", 0)
        old_state: list[str] = []

        def ready(r: TraceRecord) -> TraceRecord | None:
            old_state.append(r.state)
            if r.state in ("ready", "failed"):
                return None
            note = a.partial_note()
            return replace(
                r, state="ready", bundle_key=prefix, bundle_hash=bundle_hash,
                bundle_kernels=int(kernel_count), missing=[],
                kernels_total=a.kernels_total, kernels_prepared=a.kernels_prepared,
                kernels_failed=a.kernels_failed, files_received=a.files_received,
                bytes_received=a.bytes_received,
                errors=capped(list(dict.fromkeys([*r.errors, *a.errors]))),
                warnings=capped(list(dict.fromkeys([*r.warnings, note]))) if note else r.warnings,
            )

        new = await store.mutate(tid, ready)
        if new is None or new.state != "ready":
            return None
        self.counts["bundles"] += 1
        self.log.info("bundle ready", trace_id=tid, bundle_hash=bundle_hash, kernels=kernel_count,
                      seconds=round(time.perf_counter() - started, 3),
                      **{k: round(v, 3) for k, v in phases.items()})
        await self.bus.publish(
            subjects.trace_event(tid, "bundle"),
            BundleReady(trace_id=tid, bundle_key=prefix, bundle_hash=bundle_hash,
                        kernels=int(kernel_count)),
            msg_id=f"bundle-ready:{tid}:{bundle_hash}",
        )
        await self.bus.publish(
            subjects.trace_event(tid, "state"),
            TraceStateChanged(trace_id=tid, state="ready",
                              previous=old_state[-1] if old_state else None, reason=reason),
            msg_id=f"state:{tid}:ready:{bundle_hash}",
        )
        return new

    async def _all_failed(self, tid: str, errors: list[str]) -> None:
        """Every unit of a complete upload failed: the trace fails, naming why."""
        old_state: list[str] = []

        def fail(r: TraceRecord) -> TraceRecord | None:
            old_state.append(r.state)
            if r.state in ("ready", "failed"):
                return None
            return replace(r, state="failed", errors=capped(list(dict.fromkeys([*r.errors, *errors]))))

        new = await self._store.mutate(tid, fail)
        if new is not None and new.state == "failed" and old_state and old_state[-1] != "failed":
            await self.bus.publish(
                subjects.trace_event(tid, "state"),
                TraceStateChanged(trace_id=tid, state="failed", previous=old_state[-1],
                                  reason=errors[0] if errors else "every unit failed"),
            )

    async def _unrecorded(self, tid: str, files: list[FileRecord]) -> list[str]:
        """Valid raw objects in S3 that ingest has not recorded (with their current ETag)."""
        recorded = {f.name: f.etag for f in files}
        prefix = raw_prefix(tid)
        out = []
        async for info in self.storage.list(prefix):
            name = info.key[len(prefix):]
            try:
                check_name(name)
            except ValidationError:
                continue
            if recorded.get(name) != info.etag:
                out.append(name)
        return out

    def _build(self, record: TraceRecord, units: list[UnitRecord],
               bodies: list[bytes]) -> tuple[str, bytes, bytes]:
        builder = BundleBuilder(trace_id=record.id, source_gpu=record.source_gpu,
                                workload=record.workload, kind=record.kind)
        for unit, body in zip(units, bodies, strict=True):
            if unit.kind == "kernel" and unit.row:
                builder.add_kernel(unit.unit, unit.row, unit.warnings)
            elif unit.kind == "kernel":
                builder.add_features(_FEATURES.decode(body), key=unit.unit)
            else:
                builder.add_timeline(KernelTable.load_npz(io.BytesIO(body)), key=unit.unit)
        return builder.finalize()

    def _cache(self, bundle_hash: str, manifest: bytes, npz: bytes) -> None:
        target = self.cache_dir / bundle_hash
        target.mkdir(parents=True, exist_ok=True)
        for name, data in ((KERNELS_NAME, npz), (MANIFEST_NAME, manifest)):
            path = target / name
            if path.is_file() and path.stat().st_size == len(data):
                continue
            tmp = path.with_name(f".{name}.{os.getpid()}.part")
            tmp.write_bytes(data)
            os.replace(tmp, path)


def _import_bounded(path: Path, limits: JsonLimits) -> KernelTable:
    """:func:`import_timeline` under the JSON reader limits from the settings."""
    with use_limits(limits):
        return import_timeline(path)
