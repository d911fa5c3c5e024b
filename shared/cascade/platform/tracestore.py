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

The records and the rules of a trace's life (what arrived, what is prepared, when it is complete)
are pure domain code in :mod:`cascade.traces.lifecycle`; this module keeps them in the bucket.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from cascade.errors import NotFoundError
from cascade.platform import subjects
from cascade.platform.bus import KV, Bus
from cascade.platform.keys import declared_key, expected_key, file_key, record_key, unit_key
from cascade.platform.state import TraceRecord
from cascade.traces.lifecycle import (
    Assessment,
    DeclaredUpload,
    ExpectedSet,
    FileRecord,
    FileSource,
    FileState,
    UnitRecord,
    UnitState,
    assess,
    declared_mismatch,
    overwrite_note,
)

T = TypeVar("T")


#: Longest error/missing lists kept on a TraceRecord (the rest is counted).
MAX_LISTED = 100


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


__all__ = ["MAX_LISTED", "Assessment", "DeclaredUpload", "ExpectedSet", "FileRecord", "FileSource", "FileState",
           "TraceStore", "UnitRecord", "UnitState", "assess", "capped", "declared_mismatch", "overwrite_note",
           "replace"]
