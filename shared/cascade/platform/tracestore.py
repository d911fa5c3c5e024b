"""Current state of traces in the ``cascade-traces`` KV bucket.

Key layout (each part is one KV token; file names are escaped with
:func:`cascade.platform.keys.kv_token`)::

    {trace}                      TraceRecord: identity, state, counts, bundle
    {trace}.expected             ExpectedSet: what the seal request / kernelslist said is coming
    {trace}.files.{file}         FileRecord: one raw object (size, ETag, how we learned of it)
    {trace}.units.{unit}         UnitRecord: one unit of preparation (a kernel or a timeline file)
    {trace}.declared.{file}      DeclaredUpload: the size an upload URL was issued for, and when

Per-file and per-unit records live under their own keys, so a 10,000-kernel
trace never puts a big value on the bus; the TraceRecord only holds counts.
Every write is a compare-and-set (:meth:`cascade.platform.bus.KV.mutate`), so ingest,
prepare and api replicas can update the same trace concurrently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import msgspec

from cascade.errors import NotFoundError
from cascade.platform import subjects
from cascade.platform.bus import KV, Bus
from cascade.platform.keys import declared_key, expected_key, file_key, record_key, unit_key
from cascade.platform.state import TraceRecord
from cascade.traces.files import FileKind

T = TypeVar("T")

FileSource = Literal["s3-event", "callback", "reconcile"]
FileState = Literal["received", "rejected"]
UnitState = Literal["queued", "preparing", "prepared", "failed"]

#: Longest error/missing lists kept on a TraceRecord (the rest is counted).
MAX_LISTED = 100


class FileRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One raw object of a trace, as ingest recorded it."""

    name: str
    """File name relative to the trace's raw/ prefix."""
    key: str
    """Full S3 key."""
    size: int
    etag: str
    kind: FileKind
    unit: str = ""
    """Unit of preparation this file feeds (kernel stem or timeline file), empty if none."""
    state: FileState = "received"
    error: str = ""
    """Why the file was rejected."""
    source: FileSource = "callback"
    """How ingest first learned of this version of the file."""
    received_at: float = 0.0


class DeclaredUpload(msgspec.Struct, frozen=True, kw_only=True):
    """What the api issued upload URLs for: the declared size of one file, and when."""

    name: str
    """File name relative to the trace's raw/ prefix."""
    size: int
    """Bytes the client declared (and the presigned URL signs as its Content-Length)."""
    issued_at: float
    """When the URLs were issued; an object that replaces an arrived one without a later
    declaration came through an old URL (an overwrite), not a re-upload."""
    expires_at: float = 0.0
    """When the last URL issued for it expires."""


def declared_mismatch(declared: DeclaredUpload, size: int) -> str:
    """Why an object of ``size`` bytes does not match its declaration ('' when it does)."""
    if declared.size == size:
        return ""
    return (f"{declared.name}: declared {declared.size:,} bytes, uploaded {size:,} bytes; "
            "re-upload it")


def overwrite_note(existing: FileRecord, etag: str, declared: DeclaredUpload | None) -> str:
    """Why an object that replaces the arrived ``existing`` is an overwrite through an old URL
    ('' when a declaration issued after the arrival makes it a re-upload, or when no URL was
    ever issued for it: then it was written with the bucket's own credentials)."""
    if existing.state != "received" or existing.etag == etag or declared is None:
        return ""
    if declared.issued_at > existing.received_at:
        return ""
    return (f"{existing.name}: changed after it arrived (ETag {existing.etag} became {etag}) "
            "through an upload URL issued before; re-upload it (a new upload request)")


class UnitRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Preparation progress of one kernel (or timeline file)."""

    unit: str
    """Kernel stem ``kernel-N[-ctx_0x..]`` or timeline file name."""
    kind: Literal["kernel", "timeline"] = "kernel"
    file: str = ""
    key: str = ""
    etag: str = ""
    """ETag of the raw object this state refers to."""
    state: UnitState = "queued"
    attempts: int = 0
    kernel_id: int | None = None
    name: str = ""
    """Kernel (function) name once parsed."""
    summary: dict[str, Any] = {}
    """A few KernelTable columns (grid, block, warp_insts...) for progress pages."""
    warnings: list[str] = []
    error: str = ""
    """Why preparation failed (names file, line and what was expected)."""
    part_key: str = ""
    """S3 key of the prepared result."""
    rows: int = 0
    """Kernel rows the unit produced (1 per kernel trace; a timeline has many)."""
    row: dict[str, Any] = {}
    """The kernel's full KernelTable row (NaN stored as null), so a bundle is assembled
    from one KV scan instead of one S3 GET per kernel; empty for timelines."""
    updated_at: float = 0.0


class ExpectedSet(msgspec.Struct, frozen=True, kw_only=True):
    """What the trace is expected to contain once sealed."""

    files: list[str] = []
    """Every file name announced (seal request) or derived (kernelslist)."""
    kernels: int | None = None
    """Kernel count announced."""
    source: Literal["seal", "kernelslist"] = "seal"


_DEC_RECORD = msgspec.json.Decoder(TraceRecord)


def replace(record: T, **changes: Any) -> T:
    """A copy of a frozen Struct with fields changed."""
    return msgspec.structs.replace(record, **changes)  # type: ignore[type-var]


def capped(items: list[str], limit: int = MAX_LISTED) -> list[str]:
    """``items`` cut to ``limit`` entries, with a final "... and N more" entry."""
    if len(items) <= limit:
        return list(items)
    return [*items[:limit], f"... and {len(items) - limit} more"]


class TraceStore:
    """Typed access to the ``cascade-traces`` bucket (see the module doc for the layout)."""

    def __init__(self, kv: KV) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, bus: Bus) -> TraceStore:
        """The store on ``bus`` (the bucket must exist: ``bus.ensure_streams()``)."""
        return cls(await bus.kv(subjects.KV_TRACES))

    # -- records ---------------------------------------------------------------
    async def get(self, trace_id: str) -> TraceRecord | None:
        """The TraceRecord, or None."""
        entry = await self.kv.get(record_key(trace_id), TraceRecord)
        return entry.value if entry else None

    async def require(self, trace_id: str) -> TraceRecord:
        """The TraceRecord; :class:`NotFoundError` names the trace when absent."""
        record = await self.get(trace_id)
        if record is None:
            raise NotFoundError(f"no trace {trace_id!r}")
        return record

    async def create(self, record: TraceRecord) -> None:
        """Store a new record (ConflictError if the id is taken)."""
        await self.kv.create(record_key(record.id), record)

    async def mutate(
        self, trace_id: str, change: Callable[[TraceRecord], TraceRecord | None]
    ) -> TraceRecord | None:
        """Compare-and-set update of an existing record; None if the trace does not exist.

        ``change`` returns the new record or None to leave it; ``updated_at`` is set.
        """

        def wrapped(current: TraceRecord | None) -> TraceRecord | None:
            if current is None:
                return None
            new = change(current)
            if new is None or new == current:
                return None
            return replace(new, updated_at=time.time())

        return await self.kv.mutate(record_key(trace_id), TraceRecord, wrapped)

    async def records(self) -> list[TraceRecord]:
        """Every trace record (single-token keys), newest first."""
        found = await self._scan("*", _DEC_RECORD)
        return sorted(found.values(), key=lambda r: (-r.created_at, r.id))

    # -- expected ----------------------------------------------------------------
    async def expected(self, trace_id: str) -> ExpectedSet | None:
        """The ExpectedSet, or None when nothing was announced yet."""
        entry = await self.kv.get(expected_key(trace_id), ExpectedSet)
        return entry.value if entry else None

    async def set_expected(self, trace_id: str, expected: ExpectedSet, *, override: bool) -> ExpectedSet:
        """Store ``expected``; without ``override`` an existing seal-provided set is kept."""

        def change(current: ExpectedSet | None) -> ExpectedSet | None:
            if current is not None and not override and current.source == "seal" and (
                current.files or current.kernels is not None
            ):
                return None
            return None if current == expected else expected

        stored = await self.kv.mutate(expected_key(trace_id), ExpectedSet, change)
        return stored or expected

    # -- files -------------------------------------------------------------------
    async def get_file(self, trace_id: str, name: str) -> FileRecord | None:
        """One FileRecord, or None."""
        entry = await self.kv.get(file_key(trace_id, name), FileRecord)
        return entry.value if entry else None

    async def mutate_file(
        self, trace_id: str, name: str, change: Callable[[FileRecord | None], FileRecord | None]
    ) -> FileRecord | None:
        """Compare-and-set update of one FileRecord."""
        return await self.kv.mutate(file_key(trace_id, name), FileRecord, change)

    async def files(self, trace_id: str) -> list[FileRecord]:
        """Every FileRecord of the trace, by name."""
        found = await self._scan(
            subjects.kv_key(trace_id, "files") + ".*", msgspec.json.Decoder(FileRecord)
        )
        return sorted(found.values(), key=lambda f: f.name)

    # -- declared uploads ----------------------------------------------------------
    async def declared(self, trace_id: str, name: str) -> DeclaredUpload | None:
        """The last upload declaration of ``name``, or None (uploaded without the api)."""
        entry = await self.kv.get(declared_key(trace_id, name), DeclaredUpload)
        return entry.value if entry else None

    async def declare(self, trace_id: str, declared: DeclaredUpload) -> None:
        """Record that upload URLs for ``declared.name`` of ``declared.size`` bytes were issued."""
        await self.kv.put(declared_key(trace_id, declared.name), declared)

    # -- units -------------------------------------------------------------------
    async def get_unit(self, trace_id: str, unit: str) -> UnitRecord | None:
        """One UnitRecord, or None."""
        entry = await self.kv.get(unit_key(trace_id, unit), UnitRecord)
        return entry.value if entry else None

    async def mutate_unit(
        self, trace_id: str, unit: str, change: Callable[[UnitRecord | None], UnitRecord | None]
    ) -> UnitRecord | None:
        """Compare-and-set update of one UnitRecord."""
        return await self.kv.mutate(unit_key(trace_id, unit), UnitRecord, change)

    async def units(self, trace_id: str) -> list[UnitRecord]:
        """Every UnitRecord of the trace, kernels by id then timelines by name."""
        found = await self._scan(
            subjects.kv_key(trace_id, "units") + ".*", msgspec.json.Decoder(UnitRecord)
        )
        return sorted(
            found.values(),
            key=lambda u: (u.kind != "kernel", u.kernel_id if u.kernel_id is not None else 0, u.unit),
        )

    # -- delete ------------------------------------------------------------------
    async def delete(self, trace_id: str) -> int:
        """Delete every per-file/unit key (one purge request, no consumer), then the record
        (a delete marker, last: watchers drop the trace's details with it); returns how many
        stored values went."""
        purged = await self.kv.purge(subjects.kv_key(trace_id) + ".>")
        await self.kv.delete(record_key(trace_id))
        return purged + 1

    # -- helpers -----------------------------------------------------------------
    async def _scan(self, pattern: str, decoder: msgspec.json.Decoder[T]) -> dict[str, T]:
        """Current values of keys matching ``pattern`` in one ordered pass (no per-key gets)."""
        found = await self.kv.scan_raw(pattern)
        return {key: decoder.decode(value) for key, value in found.items() if value}


class Assessment(msgspec.Struct, frozen=True, kw_only=True):
    """How far a trace is from a bundle: what arrived, what is prepared, what is missing."""

    units: list[str]
    """Units (kernel stems, timeline files) received, in order."""
    prepared: list[str]
    failed: list[str]
    pending: list[str]
    """Received units not prepared (for their current ETag) nor failed."""
    missing: list[str]
    """Expected files (or kernel counts) that have not arrived."""
    kernels_total: int
    kernels_prepared: int
    kernels_failed: int
    files_received: int
    bytes_received: int
    errors: list[str]

    @property
    def complete(self) -> bool:
        """Everything expected arrived and every unit is finished, at least one prepared: the
        bundle can be built from the prepared units (a failed kernel fails only itself)."""
        return bool(self.prepared) and not self.missing and not self.pending

    @property
    def all_failed(self) -> bool:
        """Everything expected arrived and finished, and nothing could be prepared."""
        return bool(self.failed) and not self.prepared and not self.missing and not self.pending

    def partial_note(self) -> str:
        """'ready with N of M kernels; failed: ...' when some units failed ('' otherwise)."""
        if not self.failed:
            return ""
        head = (f"ready with {self.kernels_prepared} of {self.kernels_total} kernels"
                if self.kernels_total else f"ready with {len(self.prepared)} of "
                f"{len(self.prepared) + len(self.failed)} files")
        names = ", ".join(self.failed[:20]) + (" ..." if len(self.failed) > 20 else "")
        return f"{head}; failed: {names} (see errors)"


def assess(
    record: TraceRecord,
    expected: ExpectedSet | None,
    files: list[FileRecord],
    units: list[UnitRecord],
) -> Assessment:
    """Pure view of a trace's completeness from its records (used by ingest and prepare)."""
    from cascade.errors import ValidationError
    from cascade.traces.files import check_name

    received = [f for f in files if f.state == "received"]
    current: dict[str, str] = {}
    kernel_of: dict[str, int | None] = {}
    for f in received:
        if f.unit:
            current[f.unit] = f.etag
            kernel_of[f.unit] = check_name(f.name).kernel_id if f.kind == "kernel" else None
    names = {f.name for f in received}
    by_unit = {u.unit: u for u in units}
    order = sorted(
        current, key=lambda u: (kernel_of[u] is None, kernel_of[u] or 0, u)
    )
    prepared: list[str] = []
    failed: list[str] = []
    pending: list[str] = []
    errors: list[str] = []
    for unit in order:
        rec = by_unit.get(unit)
        if rec is not None and rec.etag == current[unit] and rec.state == "prepared":
            prepared.append(unit)
        elif rec is not None and rec.etag == current[unit] and rec.state == "failed":
            failed.append(unit)
            errors.append(rec.error or f"{unit}: preparation failed")
        else:
            pending.append(unit)
    missing: list[str] = []
    if expected is not None:
        for name in expected.files:
            try:
                tf = check_name(name)
            except ValidationError:
                continue
            if tf.unit:
                if tf.unit not in current:
                    missing.append(name)
            elif name not in names:
                missing.append(name)
    kernel_units = [u for u in current if kernel_of[u] is not None]
    want_kernels = expected.kernels if expected is not None else None
    if want_kernels is None and record.expected_kernels is not None:
        want_kernels = record.expected_kernels
    if want_kernels is not None and len(kernel_units) < want_kernels and not missing:
        missing.append(f"{want_kernels - len(kernel_units)} of {want_kernels} kernel files")
    if not current and not missing:
        missing.append(
            "a timeline file" if record.kind == "timeline" else "at least one kernel trace file"
        )
    return Assessment(
        units=order, prepared=prepared, failed=failed, pending=pending, missing=missing,
        kernels_total=len(kernel_units),
        kernels_prepared=sum(1 for u in prepared if kernel_of[u] is not None),
        kernels_failed=sum(1 for u in failed if kernel_of[u] is not None),
        files_received=len(received), bytes_received=sum(f.size for f in received),
        errors=errors,
    )
