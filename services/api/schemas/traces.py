"""Bodies of ``/api/traces``: the trace and upload requests, and the answers."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from cascade.gpus import known_gpu_names
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import ExpectedSet, FileRecord
from cascade.platform.uploadlimits import MAX_PARTS
from cascade.traces.files import MAX_NAME_LENGTH, NAME_PATTERN

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
S3_TOKEN = r'^[!#-~]+$'
"""Printable ASCII without spaces or double quotes: S3 upload ids and ETags."""
SCHEMA_MAX_UPLOAD = 64 * 1024**3
"""File size limit the OpenAPI document states (the default ``max_upload_bytes``)."""
FileName = Annotated[str, msgspec.Meta(extra_json_schema={
    "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH})]
"""A raw file name (validated by :func:`cascade.traces.files.check_name`; the schema says which)."""
KernelRow = dict[str, str | int | float | bool | list[str] | None]
"""One kernel of a list: its columns (the page's ``columns``) and their values (null: unknown)."""


class TraceProgress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    files: int
    units: int
    prepared: int
    failed: int
    queued: int


class TraceDetails(TraceRecord, frozen=True, kw_only=True):
    """GET /api/traces/{id}: the record and, unless ``details=false``, per-file and per-kernel
    progress (``kernels`` rows: unit, kind, file, state, kernel_id, name, etag, attempts, error,
    warnings, rows and the kernel's summary columns)."""

    files: list[FileRecord] | msgspec.UnsetType = msgspec.UNSET
    kernels: list[KernelRow] | msgspec.UnsetType = msgspec.UNSET
    progress: TraceProgress | msgspec.UnsetType = msgspec.UNSET
    expected: ExpectedSet | None | msgspec.UnsetType = msgspec.UNSET


class KernelPage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GET /api/traces/{id}/kernels: one page of per-kernel summaries."""

    trace_id: str
    state: str
    source: Literal["bundle", "progress"]
    """``bundle`` once the trace is ready, else the preparation progress records."""
    total: int
    offset: int
    limit: int
    sort: str
    order: Literal["asc", "desc"]
    columns: list[str]
    kernels: list[KernelRow]


class FamilyTotal(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    count: int
    time_ns: float


class StepTotal(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    step: int
    kind: str
    kernels: int
    time_ns: float
    start_ns: float | None | msgspec.UnsetType = msgspec.UNSET
    end_ns: float | None | msgspec.UnsetType = msgspec.UNSET


class TraceTotals(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GET /api/traces/{id}/summary: totals for charts (empty until the trace is ready)."""

    trace_id: str
    ready: bool
    kernels: int
    time_ns: float
    families: dict[str, FamilyTotal]
    steps: list[StepTotal]
    instruction_mix: dict[str, float]


class DeletedTrace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    deleted: bool
    objects: int
    """S3 objects deleted."""
    keys: int
    """KV keys deleted."""


class CreateTrace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/traces."""

    name: Name
    """Human name of the trace."""
    source_gpu: Annotated[str, msgspec.Meta(min_length=1, max_length=200,
                                            extra_json_schema={"enum": known_gpu_names()})]
    """GPU spec id (SM90_H100) or the device name a driver reports (NVIDIA H100 80GB HBM3)."""
    workload: Annotated[str, msgspec.Meta(max_length=4000)] = ""
    """Free-form workload description."""
    kind: Literal["instructions", "timeline", "both"] = "instructions"
    """What the trace will hold."""


class UploadFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One file the client wants to upload."""

    name: FileName
    size: Annotated[int, msgspec.Meta(ge=0, extra_json_schema={"maximum": SCHEMA_MAX_UPLOAD})]


class UploadsRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/traces/{id}/uploads."""

    files: Annotated[list[UploadFile], msgspec.Meta(min_length=1, max_length=20000)]


class PartUrl(msgspec.Struct, frozen=True, kw_only=True):
    """A presigned URL for one part of a multipart upload."""

    part_number: int
    url: str
    size: int
    """Bytes this part must carry."""


class MultipartUpload(msgspec.Struct, frozen=True, kw_only=True):
    """Presigned multipart upload: PUT each part, then POST .../uploads/complete."""

    upload_id: str
    part_size: int
    parts: list[PartUrl]


class UploadTarget(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where one file goes: a single presigned PUT or a multipart upload."""

    name: str
    key: str
    size: int
    method: str = "PUT"
    url: str | None = None
    multipart: MultipartUpload | None = None


class UploadsResponse(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of POST /api/traces/{id}/uploads."""

    trace_id: str
    expires_in: int
    """Seconds the shortest-lived URL of the answer stays valid (single PUTs:
    presign_put_ttl_s; multipart part URLs: presign_ttl_s)."""
    uploads: list[UploadTarget]


class CompletedPart(msgspec.Struct, frozen=True, kw_only=True):
    """One uploaded part (its ETag from the PUT response)."""

    part_number: Annotated[int, msgspec.Meta(ge=1, le=MAX_PARTS)]
    etag: Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=S3_TOKEN)]


class CompleteRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/traces/{id}/uploads/complete."""

    name: FileName
    upload_id: Annotated[str, msgspec.Meta(min_length=1, max_length=1024, pattern=S3_TOKEN)]
    parts: Annotated[list[CompletedPart], msgspec.Meta(min_length=1, max_length=MAX_PARTS)]


class UploadedRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/traces/{id}/uploaded."""

    name: FileName
    etag: str = ""
    """ETag the client got from S3 (checked against the object when given)."""


class UploadedResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A verified upload, reported to ingest."""

    name: str
    key: str
    etag: str
    size: int


class SealRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/traces/{id}/seal: nothing more is coming."""

    expected_files: list[FileName] | None = None
    """Every file of the trace (else kernelslist[.g] says which kernels to expect)."""
    expected_kernels: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """Number of kernels traced."""
    skipped_files: dict[Annotated[str, msgspec.Meta(max_length=255)],
                        Annotated[str, msgspec.Meta(max_length=300)]] | None = None
    """Files of the uploaded folder that are not part of the trace, with the reason each was
    left out (kept in the trace's warnings)."""


class TraceList(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/traces: one page of traces, newest first."""

    traces: list[TraceRecord]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page (null: this is the last)."""
    total: int = 0
    """Traces matching the filters, on every page together."""
