"""A trace's life as pure rules: the records of what arrived (files), what was prepared (units)
and what was announced (the expected set), and the assessment of how far a trace is from its
bundle (:func:`assess`). No I/O: :mod:`cascade.platform.tracestore` keeps these records in the
``cascade-traces`` KV bucket; ingest and prepare decide with :func:`assess`."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

from cascade.errors import ValidationError
from cascade.traces.files import FileKind, check_name

FileSource = Literal["s3-event", "callback", "reconcile"]
FileState = Literal["received", "rejected"]
UnitState = Literal["queued", "preparing", "prepared", "failed"]


class TraceFacts(Protocol):
    """What :func:`assess` reads of a trace's own record."""

    @property
    def kind(self) -> str: ...

    @property
    def expected_kernels(self) -> int | None: ...


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
    record: TraceFacts,
    expected: ExpectedSet | None,
    files: list[FileRecord],
    units: list[UnitRecord],
) -> Assessment:
    """Pure view of a trace's completeness from its records (used by ingest and prepare)."""
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
