"""Current trace state of the api, kept in memory from one KV watch (as runs are).

:class:`TraceIndex` is the api's one owner of the ``cascade-traces`` bucket as it is now:
every TraceRecord, ExpectedSet, FileRecord and unit of preparation (without its full kernel
row, which only the bundle builder needs), fed by a single watch over the whole bucket that
starts with the current values. Reads (lists, details, progress kernel pages, the /v1 model
index, domain metrics) answer from memory and never create a JetStream consumer; a miss waits
for the watch to apply every write made before it (:meth:`TraceIndex.sync`: one stream-info
request), so a trace written a moment ago by another process is found, not refused. Several
api replicas each keep their own view of the same bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from aiohttp import web

from cascade.errors import NotFoundError
from cascade.platform import subjects
from cascade.platform.bus import KV, Bus
from cascade.platform.log import get_logger
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import ExpectedSet, FileRecord, UnitState
from services.api.paging import NewestFirst, Page, PageRequest

log = get_logger("cascade.api.traces")


class UnitStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A UnitRecord as the api shows it: progress and summary, not the full kernel row."""

    unit: str
    kind: Literal["kernel", "timeline"] = "kernel"
    file: str = ""
    etag: str = ""
    state: UnitState = "queued"
    attempts: int = 0
    kernel_id: int | None = None
    name: str = ""
    summary: dict[str, Any] = {}
    warnings: list[str] = []
    error: str = ""
    rows: int = 0


_RECORD = msgspec.json.Decoder(TraceRecord)
_EXPECTED = msgspec.json.Decoder(ExpectedSet)
_FILE = msgspec.json.Decoder(FileRecord)
_UNIT = msgspec.json.Decoder(UnitStatus)


class TraceIndex:
    """Every trace's current records, from one watch of the ``cascade-traces`` bucket."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.records: NewestFirst[TraceRecord] = NewestFirst(
            created=lambda r: r.created_at, state=lambda r: r.state, name=lambda r: r.name)
        self._expected: dict[str, ExpectedSet] = {}
        self._files: dict[str, dict[str, FileRecord]] = {}
        self._units: dict[str, dict[str, UnitStatus]] = {}
        self._applied = 0
        """Revision (stream sequence) of the last change applied."""
        self._kv: KV | None = None
        self._task: asyncio.Task[None] | None = None
        self._loaded = asyncio.Event()
        self._changed = asyncio.Condition()
        self._listeners: list[Callable[[str], None]] = []

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        """Start the watch; returns once the bucket's current values are in."""
        self._kv = await self.bus.kv(subjects.KV_TRACES)
        self._task = asyncio.create_task(self._watch(self._kv), name="traces:index")
        try:
            await asyncio.wait_for(self._loaded.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(f"the trace index did not load within {timeout:g} s") from None

    async def stop(self) -> None:
        """Stop the watch (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def loaded(self) -> bool:
        """True once the bucket's current values are in."""
        return self._loaded.is_set()

    def on_record_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(trace_id)`` after a TraceRecord is added, changed or deleted."""
        self._listeners.append(listener)

    async def _watch(self, kv: KV) -> None:
        while True:
            try:
                async with kv.watch_raw(">") as watcher:
                    seen: set[str] | None = set() if self._loaded.is_set() else None
                    async for entry in watcher:
                        if entry is None:
                            if seen is not None:  # a watch again: what went meanwhile goes
                                self._forget_unseen(seen)
                                seen = None
                            self._loaded.set()
                        else:
                            if seen is not None:
                                seen.add(entry.key)
                            self._apply(entry.key, entry.operation, entry.value, entry.revision)
                        if self._loaded.is_set():
                            async with self._changed:
                                self._changed.notify_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnects: watch again from the current values
                log.warning("trace index watch failed, retrying", error=str(exc))
                await asyncio.sleep(1.0)

    def _forget_unseen(self, seen: set[str]) -> None:
        """Drop what a fresh watch's current values no longer hold (deleted while the watch
        was down, so no delete marker reached it)."""
        for trace_id in [t.id for t in self.records.values() if t.id not in seen]:
            self._apply(trace_id, "DEL", None, None)
        for kind, table in (("files", self._files), ("units", self._units)):
            for trace_id, entries in table.items():
                for token in [t for t in entries if f"{trace_id}.{kind}.{t}" not in seen]:
                    entries.pop(token, None)
        for trace_id in [t for t in self._expected if f"{t}.expected" not in seen]:
            self._expected.pop(trace_id, None)

    def _apply(self, key: str, operation: str | None, value: bytes | None, revision: int | None) -> None:
        self._applied = max(self._applied, int(revision or 0))
        deleted = operation in ("DEL", "PURGE") or not value
        trace_id, _, rest = key.partition(".")
        kind, _, token = rest.partition(".")
        try:
            if not rest:
                if deleted:
                    self.records.remove(trace_id)
                    # the record goes last (TraceStore.delete): its details go with it
                    self._expected.pop(trace_id, None)
                    self._files.pop(trace_id, None)
                    self._units.pop(trace_id, None)
                else:
                    self.records.put(trace_id, _RECORD.decode(value or b""))
                for listener in self._listeners:
                    listener(trace_id)
            elif kind == "expected":
                if deleted:
                    self._expected.pop(trace_id, None)
                else:
                    self._expected[trace_id] = _EXPECTED.decode(value or b"")
            elif kind in ("files", "units") and token:
                table: dict[str, dict[str, Any]] = self._files if kind == "files" else self._units
                if deleted:
                    table.get(trace_id, {}).pop(token, None)
                else:
                    table.setdefault(trace_id, {})[token] = (
                        _FILE if kind == "files" else _UNIT).decode(value or b"")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("skipping unreadable trace key", key=key, error=str(exc))

    # -- freshness -------------------------------------------------------------------------
    async def sync(self, timeout: float = 2.0) -> bool:
        """Wait (bounded) until every write made to the bucket before this call is applied.
        False on timeout (the index then answers as it stands)."""
        if self._kv is None:
            return False
        target = await self._kv.last_revision()
        return await self.wait_until(lambda: self._applied >= target, timeout)

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
        """Wait (bounded) until ``predicate()`` holds after changes reach the index."""
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout)
        except TimeoutError:
            return False
        return True

    async def caught_up(self, trace_id: str, predicate: Callable[[TraceRecord | None], bool],
                        timeout: float = 2.0) -> bool:
        """Wait (bounded) until ``predicate(record)`` holds: a write this instance made is then
        visible to its reads."""
        return await self.wait_until(lambda: predicate(self.records.get(trace_id)), timeout)

    # -- reads -----------------------------------------------------------------------------
    def get(self, trace_id: str) -> TraceRecord | None:
        """The TraceRecord as last seen, or None."""
        return self.records.get(trace_id)

    async def require(self, trace_id: str) -> TraceRecord:
        """The TraceRecord; on a miss, once more after :meth:`sync`; else NotFoundError."""
        record = self.records.get(trace_id)
        if record is None and await self.sync():
            record = self.records.get(trace_id)
        if record is None:
            raise NotFoundError(f"no trace {trace_id!r}")
        return record

    def page(self, want: PageRequest) -> Page[TraceRecord]:
        """One page of traces, newest first."""
        return self.records.page(want)

    def expected(self, trace_id: str) -> ExpectedSet | None:
        """The trace's ExpectedSet, or None."""
        return self._expected.get(trace_id)

    def files(self, trace_id: str) -> list[FileRecord]:
        """Every FileRecord of the trace, by name."""
        return sorted(self._files.get(trace_id, {}).values(), key=lambda f: f.name)

    def units(self, trace_id: str) -> list[UnitStatus]:
        """Every unit of the trace, kernels by id then timelines by name."""
        return sorted(
            self._units.get(trace_id, {}).values(),
            key=lambda u: (u.kind != "kernel", u.kernel_id if u.kernel_id is not None else 0, u.unit))

    def counts(self) -> dict[str, int]:
        """How much the index holds (traces, files, units)."""
        return {"traces": len(self.records),
                "files": sum(len(v) for v in self._files.values()),
                "units": sum(len(v) for v in self._units.values())}


TRACE_INDEX = web.AppKey("trace_index", TraceIndex)


def trace_index(app: web.Application) -> TraceIndex:
    """The app's trace index (see :func:`install`)."""
    return app[TRACE_INDEX]


def install(app: web.Application) -> TraceIndex:
    """Create the app's trace index once (idempotent; call from a route module's sync
    ``setup``); it starts with the app and stops at cleanup."""
    from services.api.appkeys import BUS, install_running

    return install_running(app, TRACE_INDEX, lambda: TraceIndex(app[BUS]))
