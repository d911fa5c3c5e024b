"""Ingest: turns raw trace objects landing in S3 into recorded files and prepare jobs.

It learns of uploads three ways, all idempotent (de-duplicated on key + ETag):

- S3 event notifications on ``cascade.s3.events`` (MinIO's AWS-format records);
- the api's upload callbacks (``UploadReported`` on ``cascade.trace.{id}.uploaded``);
- a periodic reconcile that lists ``traces/{id}/raw/`` of every unfinished trace.

For each object it validates the key (``traces/{id}/raw/{name}`` of a known
trace, an accepted name) and the size, records a :class:`FileRecord`, and
enqueues one :class:`PrepareJob` per kernel or timeline file (``Nats-Msg-Id`` =
trace + key + ETag). ``kernelslist[.g]`` tells which kernels to expect. Once a
trace is sealed it is either bundled (``BundleJob`` when everything is
prepared) or, after a grace period, marked ``incomplete`` with what is missing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cascade.errors import CascadeError, NotFoundError, ValidationError
from cascade.platform import subjects
from cascade.platform.bus import Delivery
from cascade.platform.keys import raw_prefix, split_raw_key
from cascade.platform.messages.jobs import BundleJob, PrepareJob
from cascade.platform.messages.trace import (
    FileReceived,
    TraceSealed,
    TraceStateChanged,
    UploadReported,
)
from cascade.platform.runtime import ServiceContext
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import (
    ExpectedSet,
    FileRecord,
    FileSource,
    TraceStore,
    UnitRecord,
    assess,
    capped,
    declared_mismatch,
    overwrite_note,
    replace,
)
from cascade.traces.baseline import read_baseline
from cascade.traces.files import check_name, kernel_stems
from services.ingest.s3events import S3Notification, created_objects

#: Traces in these states are reconciled against their S3 listing.
ACTIVE_STATES = frozenset({"receiving", "preparing", "incomplete"})
#: A failed trace is still reconciled for this many intervals after its last change: its
#: other units may still be finishing, and their counts settle from the unit records.
SETTLE_INTERVALS = 10


def grace_period_s(reconcile_interval_s: float) -> float:
    """How long after a seal missing files are waited for before the trace is incomplete."""
    return 2.0 * reconcile_interval_s


class IngestService:
    """The ingest service's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.platform.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack), so tests can pass their own.
    """

    name = "ingest"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.storage = ctx.require_storage()
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="ingest")
        self.started = False
        self.store: TraceStore | None = None
        self.counts: dict[str, int] = {
            "files": 0, "duplicates": 0, "refused": 0, "jobs": 0, "reconciles": 0,
            "bundle_jobs": 0, "incomplete": 0,
        }

    async def start(self) -> None:
        """Register consumers and the reconcile loop (their stops go on ``ctx.stack``)."""
        self.store = await TraceStore.open(self.bus)
        for subject, msg_type, handler, durable in (
            (subjects.S3_EVENTS, S3Notification, self.on_s3_event, subjects.DURABLE_INGEST_S3),
            (subjects.trace_event("*", "uploaded"), UploadReported, self.on_uploaded,
             subjects.DURABLE_INGEST_TRACES),
            (subjects.trace_event("*", "sealed"), TraceSealed, self.on_sealed,
             subjects.DURABLE_INGEST_SEALS),
        ):
            await self.ctx.subscribe(
                subject, msg_type, handler, durable=durable, deliver_new=False,
                concurrency=4, ack_wait=30.0, max_deliver=5,
            )
        self.ctx.spawn(self.reconcile_loop(), name="ingest-reconcile")
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "ingest", "started": self.started, **self.counts}

    @property
    def _store(self) -> TraceStore:
        assert self.store is not None, "IngestService.start() was not called"
        return self.store

    # -- intake ----------------------------------------------------------------------------
    async def on_s3_event(self, note: S3Notification, delivery: Delivery) -> None:
        """An S3 bucket notification: handle every ObjectCreated record."""
        for bucket, key, size, etag in created_objects(note):
            if bucket and bucket != self.storage.bucket:
                self._refuse(key, f"bucket {bucket!r} is not {self.storage.bucket!r}", "s3-event")
                continue
            await self.handle_object(key, etag=etag, size=size, source="s3-event")

    async def on_uploaded(self, event: UploadReported, delivery: Delivery) -> None:
        """An upload callback relayed by the api."""
        await self.handle_object(event.key, etag=event.etag, size=event.size, source="callback",
                                 trace_hint=event.trace_id)

    def _refuse(self, key: str, reason: str, source: str) -> None:
        self.counts["refused"] += 1
        self.log.warning("object refused", key=key, reason=reason, source=source)

    async def handle_object(
        self, key: str, *, etag: str, size: int, source: FileSource, trace_hint: str | None = None
    ) -> FileRecord | None:
        """Record one raw object and queue its preparation; idempotent on key + ETag.

        Returns the stored FileRecord, or None when the object was refused.
        """
        try:
            tid, name = split_raw_key(key)
        except ValidationError as exc:
            self._refuse(key, str(exc), source)
            return None
        if trace_hint is not None and trace_hint != tid:
            self._refuse(key, f"reported for trace {trace_hint} but lies under {tid}", source)
            return None
        record = await self._store.get(tid)
        if record is None:
            self._refuse(key, f"no trace {tid!r}", source)
            return None
        log = self.log.bind(trace_id=tid, file=name, source=source)
        if not etag:
            info = await self.storage.head(key)
            if info is None:
                log.warning("object vanished before it was recorded", key=key)
                return None
            etag, size = info.etag, info.size
        tf = check_name(name)
        existing = await self._store.get_file(tid, name)
        if existing is not None and existing.etag == etag:
            self.counts["duplicates"] += 1
            return existing
        if record.state == "ready":
            log.warning("upload after the trace is ready ignored", etag=etag)
            return None
        if size > self.settings.max_upload_bytes:
            return await self._reject(
                tid, name, key, size=size, etag=etag, source=source,
                error=f"{name} is {size} bytes, over the limit of {self.settings.max_upload_bytes}")
        declared = await self._store.declared(tid, name)
        why = declared_mismatch(declared, size) if declared is not None else ""
        if not why and existing is not None:
            why = overwrite_note(existing, etag, declared)
        if why:
            return await self._reject(tid, name, key, size=size, etag=etag, source=source,
                                      error=why)
        if tf.unit:
            job = PrepareJob(trace_id=tid, key=key, etag=etag, size=size)
            await self.bus.publish(subjects.JOB_PREPARE, job, msg_id=f"prepare:{tid}:{key}:{etag}")
            self.counts["jobs"] += 1

            def queue(cur: UnitRecord | None) -> UnitRecord | None:
                if cur is not None and cur.etag == etag:
                    return None
                return UnitRecord(
                    unit=tf.unit, kind="kernel" if tf.kind == "kernel" else "timeline",
                    file=name, key=key, etag=etag, state="queued", kernel_id=tf.kernel_id,
                    updated_at=time.time(),
                )

            await self._store.mutate_unit(tid, tf.unit, queue)
        elif tf.kind == "kernelslist":
            await self._read_kernelslist(tid, key, name)
        elif tf.kind == "baseline":
            await self._read_baseline(tid, key, name)

        new = FileRecord(
            name=name, key=key, size=size, etag=etag, kind=tf.kind, unit=tf.unit,
            source=source, received_at=time.time(),
        )

        def put(cur: FileRecord | None) -> FileRecord | None:
            if cur is not None and cur.etag == etag:
                return None
            return new

        stored = await self._store.mutate_file(tid, name, put)
        first = existing is None

        def count(r: TraceRecord) -> TraceRecord:
            old_size = existing.size if existing is not None and existing.state == "received" else 0
            changes: dict[str, Any] = {
                "files_received": r.files_received + (1 if first else 0),
                "bytes_received": max(0, r.bytes_received + size - old_size),
            }
            if first and tf.kind == "kernel":
                changes["kernels_total"] = r.kernels_total + 1
            if r.state == "incomplete":
                changes["state"] = "preparing"
            return replace(r, **changes)

        await self._store.mutate(tid, count)
        await self.bus.publish(
            subjects.trace_event(tid, "file"),
            FileReceived(trace_id=tid, key=key, etag=etag, size=size, file=name,
                         kernel_index=tf.kernel_id),
            msg_id=f"file:{tid}:{name}:{etag}",
        )
        self.counts["files"] += 1
        log.info("file recorded", size=size, etag=etag, kind=tf.kind)
        if record.sealed:
            await self.evaluate(tid)
        return stored or new

    async def _reject(self, tid: str, name: str, key: str, *, size: int, etag: str,
                      source: FileSource, error: str) -> FileRecord:
        """Record ``name`` as rejected with ``error`` (also in the trace's errors); it is not
        prepared, and a sealed trace waits for it (missing) until it is re-uploaded."""
        tf = check_name(name)
        rejected = FileRecord(
            name=name, key=key, size=size, etag=etag, kind=tf.kind, unit=tf.unit,
            state="rejected", source=source, received_at=time.time(), error=error,
        )
        await self._store.mutate_file(tid, name, lambda _cur: rejected)
        await self._store.mutate(tid, lambda r: replace(
            r, errors=capped([*r.errors, error])
        ) if error not in r.errors else None)
        self._refuse(key, error, source)
        return rejected

    async def _read_kernelslist(self, tid: str, key: str, name: str) -> None:
        try:
            text = (await self.storage.get_bytes(key, max_bytes=64 * 1024 * 1024)).decode(
                "utf-8", "replace"
            )
        except NotFoundError:
            return
        stems = kernel_stems(text)
        files = [f"{stem}.traceg" if name.endswith(".g") else f"{stem}.trace" for stem in stems]
        await self._store.set_expected(
            tid, ExpectedSet(files=files, source="kernelslist"), override=False
        )
        self.log.info("kernelslist read", trace_id=tid, kernels=len(stems))

    async def _read_baseline(self, tid: str, key: str, name: str) -> None:
        try:
            data = await self.storage.get_bytes(key, max_bytes=16 * 1024 * 1024)
            values = read_baseline(data, name).record_values()
        except NotFoundError:
            return
        except ValidationError as exc:
            why = str(exc)
            self.log.warning("baseline ignored", trace_id=tid, error=why)
            await self._store.mutate(tid, lambda r: replace(
                r, warnings=capped([*r.warnings, why])) if why not in r.warnings else None)
            return
        await self._store.mutate(tid, lambda r: replace(r, baseline={**r.baseline, **values}))
        self.log.info("baseline read", trace_id=tid, e2e_ms=values.get("e2e_ms"))

    # -- seal, completeness ---------------------------------------------------------------
    async def on_sealed(self, event: TraceSealed, delivery: Delivery) -> None:
        """The client sealed the trace: catch up with S3 now, then evaluate completeness."""
        record = await self._store.get(event.trace_id)
        if record is None:
            return
        await self.reconcile_trace(record)

    async def reconcile_trace(self, record: TraceRecord) -> None:
        """List the trace's raw/ prefix, record anything missed, then evaluate it."""
        tid = record.id
        files = {f.name: f for f in await self._store.files(tid)}
        async for info in self.storage.list(raw_prefix(tid)):
            name = info.key[len(raw_prefix(tid)):]
            known = files.get(name)
            if known is not None and known.etag == info.etag:
                continue
            await self.handle_object(info.key, etag=info.etag, size=info.size, source="reconcile")
        await self.evaluate(tid)

    async def evaluate(self, tid: str) -> None:
        """Recount the trace from its records; queue the bundle or mark it incomplete/failed."""
        store = self._store
        record = await store.get(tid)
        if record is None or record.state == "ready":
            return
        expected, files, units = await asyncio.gather(
            store.expected(tid), store.files(tid), store.units(tid)
        )
        a = assess(record, expected, files, units)
        now = time.time()
        overdue = (
            record.sealed and bool(a.missing)
            and now - (record.sealed_at or record.updated_at) >= grace_period_s(
                self.settings.reconcile_interval_s)
        )

        def update(r: TraceRecord) -> TraceRecord | None:
            if r.state == "ready":
                return None
            # Prepare workers count units as they finish (fast, but a count can land twice
            # when this scan saw the unit first, or never when a worker crashed between the
            # unit and the count); the unit records are the truth, so every reconcile sets
            # the per-kernel counts from them and the record converges.
            changes: dict[str, Any] = {
                "files_received": max(r.files_received, a.files_received),
                "bytes_received": a.bytes_received,
                "kernels_total": max(r.kernels_total, a.kernels_total),
                "kernels_prepared": a.kernels_prepared,
                "kernels_failed": a.kernels_failed,
                "missing": capped(a.missing) if r.sealed else [],
            }
            if expected is not None and expected.kernels is not None:
                changes["expected_kernels"] = expected.kernels
            elif expected is not None and expected.files and r.expected_kernels is None:
                changes["expected_kernels"] = sum(
                    1 for n in expected.files if n.startswith("kernel-"))
            if a.failed:  # failures are named; only a trace where nothing prepared fails
                changes["errors"] = capped(list(dict.fromkeys([*r.errors, *a.errors])))
            if a.all_failed:
                changes["state"] = "failed"
            elif overdue:
                changes["state"] = "incomplete"
            elif r.sealed and r.state in ("receiving", "incomplete"):
                changes["state"] = "preparing"
            if all(getattr(r, k) == v for k, v in changes.items()):
                return None  # nothing new: leave the record (and its updated_at) alone
            return replace(r, **changes)

        new = await store.mutate(tid, update)
        if new is not None and new.state != record.state:
            if new.state == "incomplete":
                self.counts["incomplete"] += 1
            self.log.info("trace state", trace_id=tid, state=new.state, previous=record.state,
                          missing=len(a.missing))
            await self.bus.publish(
                subjects.trace_event(tid, "state"),
                TraceStateChanged(trace_id=tid, state=new.state, previous=record.state,
                                  reason="; ".join(capped(a.missing, 10)) if a.missing else ""),
            )
        if record.sealed and a.complete:
            await self.bus.publish(
                subjects.JOB_PREPARE,
                BundleJob(trace_id=tid, reason="ingest: every unit prepared"),
                # One job per reconcile interval at most: an attempt that found the trace not
                # quite complete (an object ingest had not recorded yet) must not make every
                # later attempt a duplicate that JetStream drops for the whole de-dup window.
                msg_id=f"bundle:{tid}:{len(a.prepared)}:{record.sealed_at}:"
                       f"{int(now // self.settings.reconcile_interval_s)}",
            )
            self.counts["bundle_jobs"] += 1

    # -- reconcile -------------------------------------------------------------------------
    async def reconcile_once(self) -> int:
        """One pass over every unfinished trace; returns how many were reconciled."""
        done = 0
        settle_s = SETTLE_INTERVALS * self.settings.reconcile_interval_s
        now = time.time()
        for record in await self._store.records():
            settling = record.state == "failed" and now - record.updated_at < settle_s
            if (record.state not in ACTIVE_STATES and not settling) or record.provenance.read_only:
                continue
            try:
                await self.reconcile_trace(record)
                done += 1
            except CascadeError as exc:
                self.log.warning("reconcile failed", trace_id=record.id, error=str(exc))
        self.counts["reconciles"] += 1
        return done

    async def reconcile_loop(self) -> None:
        """Reconcile every ``reconcile_interval_s`` until the service stops."""
        interval = self.settings.reconcile_interval_s
        while not self.ctx.stop.is_set():
            try:
                await asyncio.wait_for(self.ctx.stop.wait(), timeout=interval)
                return
            except TimeoutError:
                pass
            try:
                await self.reconcile_once()
            except CascadeError as exc:
                self.log.warning("reconcile pass failed", error=str(exc))
