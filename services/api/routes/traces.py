"""Traces: create, presigned uploads, upload callbacks, seal, progress, kernels, delete.

Uploads go straight to S3 with short-lived presigned URLs scoped to
``traces/{id}/raw/{name}`` (multipart part URLs above
``multipart_threshold_bytes``). The api never writes trace state that the
ingest service owns: an upload callback is verified with a HEAD request and
published as an ``UploadReported`` event; ingest records it.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import Annotated, Any, Literal, get_args

import msgspec
import numpy as np
from aiohttp import web

from cascade.errors import (
    ConflictError,
    NotFoundError,
    StorageError,
    TooLargeError,
    ValidationError,
)
from cascade.gpus import default_registry, known_gpu_names
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.bundlecache import cache_dir_for
from cascade.platform.keys import bundles_prefix, raw_key, trace_prefix
from cascade.platform.messages.trace import TraceCreated, TraceDeleted, TraceSealed, UploadReported
from cascade.platform.state import TraceRecord, TraceStateName
from cascade.platform.storage import MAX_PARTS, MIN_PART_SIZE, Storage, UploadedPart
from cascade.platform.tracestore import (
    DeclaredUpload,
    ExpectedSet,
    FileRecord,
    TraceStore,
    capped,
    declared_mismatch,
    replace,
)
from cascade.runs.plan import resolve_config
from cascade.traces.files import MAX_NAME_LENGTH, NAME_PATTERN, check_name
from services.api.http import doc, json_response, query_choice, query_int, read_json
from services.api.kernel_views import KernelViews
from services.api.keys import BUS, SETTINGS, STORAGE
from services.api.paging import page_query, page_request
from services.api.spec_index import install as install_specs
from services.api.spec_index import spec_index
from services.api.trace_index import TraceIndex, trace_index
from services.api.trace_index import install as install_traces

routes = web.RouteTableDef()

TRACE_STORE = web.AppKey("trace_store", TraceStore)
KERNEL_VIEWS = web.AppKey("kernel_views", KernelViews)
TRACE_STATES: tuple[str, ...] = get_args(TraceStateName)

MiB = 1024 * 1024
#: Columns of the per-kernel summaries (GET /api/traces/{id}/kernels).
SUMMARY_COLUMNS: tuple[str, ...] = (
    "kernel_id", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "regs", "smem_bytes", "stream", "warps", "warp_insts", "gmem_requests", "gmem_sectors",
    "footprint_lines", "smem_accesses", "tensor_flops", "duration_ns",
)

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
S3_TOKEN = r'^[!#-~]+$'
"""Printable ASCII without spaces or double quotes: S3 upload ids and ETags."""
SCHEMA_MAX_UPLOAD = 64 * 1024**3
"""File size limit the OpenAPI document states (the default ``max_upload_bytes``)."""
FileName = Annotated[str, msgspec.Meta(extra_json_schema={
    "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH})]
"""A raw file name (validated by :func:`cascade.platform.tracefiles.check_name`; the schema says which)."""
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


#: S3 error codes of a complete-multipart call that are the client's fault, not the server's.
_CLIENT_FAULTS = ("NoSuchUpload", "InvalidPart", "InvalidPartOrder", "MalformedXML",
                  "EntityTooSmall", "InvalidArgument", "InvalidRequest", "NoSuchKey")


def _storage(request: web.Request) -> Storage:
    storage: Storage = request.app[STORAGE]
    return storage


def _store(request: web.Request) -> TraceStore:
    return request.app[TRACE_STORE]


def _index(request: web.Request) -> TraceIndex:
    return trace_index(request.app)


def setup(app: web.Application) -> None:
    """The trace index reads answer from, the kernel views of ready bundles, and the trace
    store writes go through (opened at startup)."""
    install_traces(app)
    install_specs(app)
    app[KERNEL_VIEWS] = KernelViews(
        app[STORAGE], cache_dir_for(app[SETTINGS].data_path),
        columns=(*SUMMARY_COLUMNS, *BUNDLE_EXTRA_COLUMNS), build=_view_extras)

    async def open_store(app: web.Application) -> None:
        app[TRACE_STORE] = await TraceStore.open(app[BUS])

    app.on_startup.append(open_store)


def _trace_id(request: web.Request) -> str:
    tid = request.match_info["trace_id"]
    try:
        return check_token(tid, "trace_id")
    except ValidationError:
        raise NotFoundError(f"no trace {tid!r}") from None


def _part_size(size: int, threshold: int) -> int:
    """Part size for a multipart upload of ``size`` bytes: the threshold (at most 16 MiB,
    at least S3's 5 MiB), grown in whole MiB when the file would need over MAX_PARTS parts."""
    need = math.ceil(math.ceil(size / MAX_PARTS) / MiB) * MiB
    return max(MIN_PART_SIZE, min(16 * MiB, threshold), need)


@routes.post("/api/traces")
@doc(request=CreateTrace, response=TraceRecord, status=201, tags=("traces",),
     responses={400: "invalid body or unknown source GPU (the answer lists the known ones)"})
async def create_trace(request: web.Request) -> web.Response:
    """Register a new trace (an upload session); returns its record with the new id."""
    body = await read_json(request, CreateTrace)
    spec = default_registry().resolve(body.source_gpu)
    if spec is None:  # custom specs (POST /api/configs) are valid sources too
        custom = await spec_index(request.app).fresh()
        spec = resolve_config(body.source_gpu, custom=custom, where="source_gpu").spec
    now = time.time()
    record = TraceRecord(
        id=f"tr-{uuid.uuid4().hex[:16]}", name=body.name.strip() or body.name, source_gpu=spec.id,
        kind=body.kind, workload=body.workload, state="receiving", created_at=now, updated_at=now,
    )
    await _store(request).create(record)
    await request.app[BUS].publish(
        subjects.trace_event(record.id, "created"),
        TraceCreated(trace_id=record.id, name=record.name, source_gpu=record.source_gpu,
                     kind=record.kind, workload=record.workload),
        msg_id=f"created:{record.id}",
    )
    # reads of this instance answer from its KV-fed index: let it see the new trace first
    await _index(request).caught_up(record.id, lambda r: r is not None)
    return json_response(record, status=201)


@routes.get("/api/traces")
@doc(response=TraceList, tags=("traces",), query=page_query("traces", list(TRACE_STATES)),
     responses={400: "bad limit, cursor, state or name"})
async def list_traces(request: web.Request) -> web.Response:
    """Traces, newest first, a page at a time (``limit``, ``cursor``), optionally only one
    state or those whose name or id contains ``name``."""
    page = _index(request).page(page_request(request, TRACE_STATES))
    return json_response(TraceList(traces=page.items, next_cursor=page.next_cursor,
                                   total=page.total))


@routes.post("/api/traces/{trace_id}/uploads")
@doc(request=UploadsRequest, response=UploadsResponse, tags=("traces",),
     responses={400: "bad file name", 404: "no such trace", 409: "trace already ready",
                413: "file over max_upload_bytes"})
async def request_uploads(request: web.Request) -> web.Response:
    """Presigned PUT URLs (multipart part URLs for big files) under traces/{id}/raw/."""
    tid = _trace_id(request)
    body = await read_json(request, UploadsRequest)
    settings = request.app[SETTINGS]
    record = await _store(request).require(tid)
    if record.state == "ready":
        raise ConflictError(f"trace {tid} is ready: it takes no more uploads", state=record.state)
    seen: set[str] = set()
    unique: list[UploadFile] = []
    for i, f in enumerate(body.files):
        check_name(f.name, field=f"files[{i}].name")
        if f.size > settings.max_upload_bytes:
            raise ValidationError(f"{f.name} is declared as {f.size} bytes, over the limit of "
                                  f"{settings.max_upload_bytes} bytes (max_upload_bytes)",
                                  field=f"files[{i}].size")
        if f.name in seen:
            continue  # listed twice: one upload target (the first)
        seen.add(f.name)
        unique.append(f)
    storage = _storage(request)
    ttl = settings.presign_ttl_s
    put_ttl = min(settings.presign_put_ttl_s, ttl)
    now = time.time()
    targets: list[UploadTarget] = []
    store = _store(request)
    for start in range(0, len(unique), 256):  # ingest checks each arrival against these
        await asyncio.gather(*(
            store.declare(tid, DeclaredUpload(
                name=f.name, size=f.size, issued_at=now,
                expires_at=now + (put_ttl if f.size < settings.multipart_threshold_bytes else ttl)))
            for f in unique[start:start + 256]))
    for f in unique:
        key = raw_key(tid, f.name)
        if f.size < settings.multipart_threshold_bytes:
            targets.append(UploadTarget(name=f.name, key=key, size=f.size,
                                        url=await storage.presign_put(key, ttl=put_ttl,
                                                                      size=f.size)))
            continue
        part_size = _part_size(f.size, settings.multipart_threshold_bytes)
        count = max(1, math.ceil(f.size / part_size))
        upload_id = await storage.create_multipart(key)
        sizes = [min(part_size, f.size - (n - 1) * part_size) for n in range(1, count + 1)]
        parts = [
            PartUrl(part_number=n, size=sizes[n - 1],
                    url=await storage.presign_upload_part(key, upload_id, n, ttl=ttl,
                                                          size=sizes[n - 1]))
            for n in range(1, count + 1)
        ]
        targets.append(UploadTarget(
            name=f.name, key=key, size=f.size,
            multipart=MultipartUpload(upload_id=upload_id, part_size=part_size, parts=parts),
        ))
    shortest = put_ttl if any(t.multipart is None for t in targets) else ttl
    return json_response(UploadsResponse(trace_id=tid, expires_in=shortest, uploads=targets))


async def _report(request: web.Request, tid: str, name: str, key: str, etag: str,
                  size: int) -> UploadedResponse:
    await request.app[BUS].publish(
        subjects.trace_event(tid, "uploaded"),
        UploadReported(trace_id=tid, key=key, etag=etag, size=size, file=name),
        msg_id=f"uploaded:{tid}:{name}:{etag}",
    )
    return UploadedResponse(name=name, key=key, etag=etag, size=size)


async def _check_declared(request: web.Request, tid: str, name: str, size: int) -> None:
    """A 409 naming both sizes when the object is not the size its upload was declared with
    (ingest, told through the report, fails the file with the same reason)."""
    declared = await _store(request).declared(tid, name)
    why = declared_mismatch(declared, size) if declared is not None else ""
    if why:
        raise ConflictError(why, state="size-mismatch")


@routes.post("/api/traces/{trace_id}/uploads/complete")
@doc(request=CompleteRequest, response=UploadedResponse, status=202, tags=("traces",),
     responses={404: "no such trace",
                409: "no such upload in progress, or not the declared size",
                413: "file over max_upload_bytes"})
async def complete_upload(request: web.Request) -> web.Response:
    """Assemble a multipart upload from its parts; counts as the upload callback too."""
    tid = _trace_id(request)
    body = await read_json(request, CompleteRequest)
    check_name(body.name, field="name")
    await _store(request).require(tid)
    key = raw_key(tid, body.name)
    storage = _storage(request)
    parts = {p.part_number: p for p in body.parts}  # a part listed twice: the last one
    try:
        etag = await storage.complete_multipart(
            key, body.upload_id,
            [UploadedPart(part_number=n, etag=parts[n].etag) for n in sorted(parts)],
        )
    except (StorageError, NotFoundError) as exc:
        if isinstance(exc, StorageError) and not any(c in str(exc) for c in _CLIENT_FAULTS):
            raise
        raise ConflictError(f"upload_id: no multipart upload of {body.name!r} in progress with "
                            f"these parts ({exc})", state="no-upload") from None
    info = await storage.head(key)
    if info is None:
        raise NotFoundError(f"s3 object {key} is missing after completing its upload")
    settings = request.app[SETTINGS]
    if info.size > settings.max_upload_bytes:
        await storage.delete(key)
        raise TooLargeError(f"{body.name}", info.size, settings.max_upload_bytes)
    answer = await _report(request, tid, body.name, key, info.etag or etag, info.size)
    await _check_declared(request, tid, body.name, info.size)
    return json_response(answer, status=202)


@routes.post("/api/traces/{trace_id}/uploaded")
@doc(request=UploadedRequest, response=UploadedResponse, status=202, tags=("traces",),
     responses={404: "no such trace",
                409: "not uploaded yet, ETag mismatch, or not the declared size"})
async def report_uploaded(request: web.Request) -> web.Response:
    """Upload callback: the object is checked with HEAD and handed to ingest."""
    tid = _trace_id(request)
    body = await read_json(request, UploadedRequest)
    check_name(body.name, field="name")
    await _store(request).require(tid)
    key = raw_key(tid, body.name)
    info = await _storage(request).head(key)
    if info is None:
        raise ConflictError(f"name: {body.name!r} has not been uploaded yet (no object {key})",
                            state="not-uploaded")
    claimed = body.etag.strip('"')
    if claimed and claimed != info.etag:
        raise ConflictError(
            f"etag: {body.name!r} is stored with ETag {info.etag}, not {claimed} "
            "(the upload was replaced or did not finish)"
        )
    answer = await _report(request, tid, body.name, key, info.etag, info.size)
    await _check_declared(request, tid, body.name, info.size)
    return json_response(answer, status=202)


@routes.post("/api/traces/{trace_id}/seal")
@doc(request=SealRequest, response=TraceRecord, status=202, request_required=False,
     tags=("traces",), responses={404: "no such trace"})
async def seal_trace(request: web.Request) -> web.Response:
    """Declare the upload complete (optionally listing every file or the kernel count)."""
    tid = _trace_id(request)
    body = await read_json(request, SealRequest) if await request.read() else SealRequest()
    files = list(dict.fromkeys(body.expected_files or []))
    for i, name in enumerate(files):
        check_name(name, field=f"expected_files[{i}]")
    store = _store(request)
    record = await store.require(tid)
    if files or body.expected_kernels is not None:
        await store.set_expected(
            tid, ExpectedSet(files=files, kernels=body.expected_kernels, source="seal"), override=True
        )

    def seal(current: TraceRecord) -> TraceRecord | None:
        changes: dict[str, Any] = {}
        if not current.sealed:
            changes.update(sealed=True, sealed_at=time.time())
        if current.state == "receiving":
            changes["state"] = "preparing"
        if body.expected_kernels is not None and current.expected_kernels != body.expected_kernels:
            changes["expected_kernels"] = body.expected_kernels
        if body.skipped_files:
            notes = [f"{name}: skipped ({why})" for name, why in sorted(body.skipped_files.items())]
            merged = capped(list(dict.fromkeys([*current.warnings, *notes])), 200)
            if merged != current.warnings:
                changes["warnings"] = merged
        return replace(current, **changes) if changes else None

    record = await store.mutate(tid, seal) or record
    await _index(request).caught_up(tid, lambda r: r is None or r.sealed)
    await request.app[BUS].publish(
        subjects.trace_event(tid, "sealed"),
        TraceSealed(trace_id=tid, expected_files=files[:1000], expected_kernels=body.expected_kernels),
        msg_id=f"sealed:{tid}:{len(files)}:{body.expected_kernels}",
    )
    return json_response(record, status=202)


@routes.get("/api/traces/{trace_id}")
@doc(tags=("traces",), responses={404: "no such trace"}, response=TraceDetails,
     query={"details": ("false: the record only, without per-file and per-kernel lists",
                        {"type": "string", "enum": ["true", "false", "1", "0"]})})
async def get_trace(request: web.Request) -> web.Response:
    """The trace record with per-file and per-kernel progress and errors."""
    tid = _trace_id(request)
    index = _index(request)
    record = await index.require(tid)
    details = request.query.get("details", "true").lower()
    if details not in ("true", "false", "1", "0"):
        raise ValidationError("expected true or false", field="details")
    if details in ("false", "0"):
        return json_response(record)
    files = index.files(tid)
    units = index.units(tid)
    expected = index.expected(tid)
    out: dict[str, Any] = msgspec.to_builtins(record)
    out["files"] = msgspec.to_builtins(files)
    out["kernels"] = [
        {
            "unit": u.unit, "kind": u.kind, "file": u.file, "state": u.state,
            "kernel_id": u.kernel_id, "name": u.name, "etag": u.etag, "attempts": u.attempts,
            "error": u.error, "warnings": u.warnings, "rows": u.rows, **u.summary,
        }
        for u in units
    ]
    # per-kernel counts from the unit records themselves (the record's counters are kept
    # by workers and reconciled periodically; the units are the truth)
    out["kernels_prepared"] = sum(1 for u in units if u.kernel_id is not None and u.state == "prepared")
    out["kernels_failed"] = sum(1 for u in units if u.kernel_id is not None and u.state == "failed")
    out["progress"] = {
        "files": len(files),
        "units": len(units),
        "prepared": sum(1 for u in units if u.state == "prepared"),
        "failed": sum(1 for u in units if u.state == "failed"),
        "queued": sum(1 for u in units if u.state in ("queued", "preparing")),
    }
    out["expected"] = msgspec.to_builtins(expected) if expected is not None else None
    return json_response(out)


#: Bundle columns listed besides the summary ones (the step a kernel belongs to, its op).
BUNDLE_EXTRA_COLUMNS: tuple[str, ...] = ("step", "step_kind", "op")
#: Columns the kernel list sorts by (progress rows, bundle rows and their family).
KERNEL_SORT_COLUMNS: tuple[str, ...] = (*SUMMARY_COLUMNS, *BUNDLE_EXTRA_COLUMNS, "family",
                                        "state", "unit", "error")

#: Instruction-count columns summed into a trace's instruction mix.
INSTRUCTION_COLUMNS: tuple[str, ...] = (
    "insts_int", "insts_fp32", "insts_fp64", "insts_fp16", "insts_sfu", "insts_tensor",
    "insts_ld_global", "insts_st_global", "insts_ld_shared", "insts_st_shared", "insts_local",
    "insts_atomic", "insts_barrier", "insts_branch", "insts_other", "insts_const", "insts_tex",
)


def _family_names(table: Any) -> Any:
    from cascade.engine.ops import FAMILIES, families

    n = len(table)
    op = table["op"] if table.has("op") else np.full(n, "", dtype=object)
    codes = families(op, table["name"])
    return np.asarray(FAMILIES, dtype=object)[codes.astype(np.int64)] if n else np.zeros(0, object)


def trace_summary(table: Any) -> dict[str, Any]:
    """Totals of a kernel table for charts: time by family, per step, instruction mix."""
    n = len(table)
    duration = np.nan_to_num(np.asarray(table["duration_ns"], dtype=np.float64), nan=0.0) \
        if table.has("duration_ns") else np.zeros(n)
    fams = _family_names(table)
    by_family: dict[str, dict[str, float]] = {}
    for fam in sorted(set(fams.tolist())):
        mask = fams == fam
        by_family[str(fam)] = {"count": int(mask.sum()), "time_ns": float(duration[mask].sum())}
    steps: list[dict[str, Any]] = []
    if table.has("step") and n:
        step = np.asarray(table["step"], dtype=np.int64)
        kinds = table["step_kind"] if table.has("step_kind") else np.full(n, "", dtype=object)
        start = np.asarray(table["start_ns"], dtype=np.float64) if table.has("start_ns") else None
        for value in np.unique(step[step >= 0]).tolist():
            mask = step == value
            first = int(np.argmax(mask))
            entry: dict[str, Any] = {"step": int(value), "kind": str(kinds[first]),
                                     "kernels": int(mask.sum()), "time_ns": float(duration[mask].sum())}
            if start is not None:
                s = start[mask]
                ends = s + duration[mask]
                entry["start_ns"] = float(np.nanmin(s)) if np.any(~np.isnan(s)) else None
                entry["end_ns"] = float(np.nanmax(ends)) if np.any(~np.isnan(ends)) else None
            steps.append(entry)
    mix = {c: float(np.nansum(table[c])) for c in INSTRUCTION_COLUMNS if table.has(c)}
    mix = {c: v for c, v in mix.items() if v > 0}
    return {"kernels": n, "time_ns": float(duration.sum()), "families": by_family, "steps": steps,
            "instruction_mix": mix}


def _sort_key(column: str, value: Any) -> tuple[int, Any]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0)
    return (0, value)


@routes.get("/api/traces/{trace_id}/kernels")
@doc(tags=("traces",), response=KernelPage, responses={404: "no such trace"}, query={
    "offset": ("first row (default 0)", {"type": "integer", "minimum": 0, "maximum": 2**31}),
    "limit": ("rows per page (default 100, max 1000)",
              {"type": "integer", "minimum": 1, "maximum": 1000}),
    "sort": ("column to sort by (default kernel_id)",
             {"type": "string", "enum": list(KERNEL_SORT_COLUMNS)}),
    "order": ("asc or desc", {"type": "string", "enum": ["asc", "desc"]}),
    "q": ("only kernels whose name (or family) contains this text, case-insensitive",
          {"type": "string", "maxLength": 200}),
})
async def list_kernels(request: web.Request) -> web.Response:
    """Paged, sortable per-kernel summaries (from the bundle once ready, else from progress)."""
    tid = _trace_id(request)
    offset = query_int(request, "offset", 0, 0, 2**31)
    limit = query_int(request, "limit", 100, 1, 1000)
    order = query_choice(request, "order", ("asc", "desc"))
    sort = request.query.get("sort", "kernel_id").strip()
    needle = request.query.get("q", "").strip().lower()
    if len(needle) > 200:
        raise ValidationError("at most 200 characters", field="q")
    index = _index(request)
    record = await index.require(tid)
    if record.state == "ready" and record.bundle_key:
        view = await request.app[KERNEL_VIEWS].get(record)
        if sort not in view.columns and sort not in KERNEL_SORT_COLUMNS:
            raise ValidationError(f"unknown column {sort!r}; known: {', '.join(view.columns)}",
                                  field="sort")
        rows_at = view.order(sort, order, needle)
        return json_response({
            "trace_id": tid, "state": record.state, "source": "bundle", "total": len(rows_at),
            "offset": offset, "limit": limit, "sort": sort, "order": order,
            "columns": view.columns, "kernels": view.rows(rows_at[offset:offset + limit]),
        })
    rows = [
        {"kernel_id": u.kernel_id, "name": u.name, **u.summary, "state": u.state,
         "unit": u.unit, "error": u.error}
        for u in index.units(tid) if u.kind == "kernel"
    ]
    columns = [*SUMMARY_COLUMNS, "state", "unit", "error"]
    if sort not in columns and sort not in KERNEL_SORT_COLUMNS:
        raise ValidationError(f"unknown column {sort!r}; known: {', '.join(columns)}", field="sort")
    if needle:
        rows = [r for r in rows if needle in str(r.get("name") or "").lower()
                or needle in str(r.get("family") or "").lower()]
    present = [r for r in rows if _sort_key(sort, r.get(sort))[0] == 0]
    absent = [r for r in rows if _sort_key(sort, r.get(sort))[0] == 1]
    present.sort(key=lambda r: r[sort], reverse=order == "desc")
    ordered = present + absent
    return json_response({
        "trace_id": tid, "state": record.state, "source": "progress", "total": len(ordered),
        "offset": offset, "limit": limit, "sort": sort, "order": order, "columns": columns,
        "kernels": ordered[offset : offset + limit],
    })


@routes.get("/api/traces/{trace_id}/summary")
@doc(tags=("traces",), response=TraceTotals, responses={404: "no such trace"})
async def trace_summary_route(request: web.Request) -> web.Response:
    """Totals for charts once the trace is ready: kernels and source-GPU time by family, per
    step (kind, kernels, time, start/end), and the instruction mix where instruction traces exist
    (``ready: false`` and empty totals before that)."""
    tid = _trace_id(request)
    record = await _index(request).require(tid)
    if record.state != "ready" or not record.bundle_key:
        return json_response({"trace_id": tid, "ready": False, "kernels": 0, "time_ns": 0.0,
                              "families": {}, "steps": [], "instruction_mix": {}})
    view = await request.app[KERNEL_VIEWS].get(record)
    return json_response({"trace_id": tid, "ready": True, **view.summary})


def _view_extras(table: Any) -> tuple[Any, dict[str, Any]]:
    """Each kernel's family and the chart totals of a bundle's kernel table."""
    return _family_names(table), trace_summary(table)


@routes.delete("/api/traces/{trace_id}")
@doc(tags=("traces",), response=DeletedTrace,
     responses={404: "no such trace", 409: "read-only sample trace"})
async def delete_trace(request: web.Request) -> web.Response:
    """Delete the trace: its raw files, prepared parts, bundles and state."""
    tid = _trace_id(request)
    store = _store(request)
    record = await store.require(tid)
    if record.provenance.read_only:
        raise ConflictError(
            f"trace {tid} is a read-only {record.provenance.badge or 'sample'}; it cannot be deleted",
            state=record.state,
        )
    storage = _storage(request)
    objects = await storage.delete_prefix(trace_prefix(tid))
    objects += await storage.delete_prefix(bundles_prefix(tid))
    keys = await store.delete(tid)
    await _index(request).caught_up(tid, lambda r: r is None)
    await request.app[BUS].publish(
        subjects.trace_event(tid, "deleted"), TraceDeleted(trace_id=tid), msg_id=f"deleted:{tid}"
    )
    return json_response({"id": tid, "deleted": True, "objects": objects, "keys": keys})
