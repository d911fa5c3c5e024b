"""Traces: create, presigned uploads, upload callbacks, seal, progress, kernels, delete.

Uploads go straight to S3 with short-lived presigned URLs scoped to
``traces/{id}/raw/{name}`` (multipart part URLs above
``multipart_threshold_bytes``). The api never writes trace state that the
ingest service owns: an upload callback is verified with a HEAD request and
published as an ``UploadReported`` event; ingest records it (:mod:`services.api.uploads`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal, get_args

import msgspec
from aiohttp import web

from cascade.errors import ConflictError, NotFoundError, ValidationError
from cascade.gpus import default_registry
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.bundlecache import cache_dir_for
from cascade.platform.keys import bundles_prefix, trace_prefix
from cascade.platform.messages.trace import TraceCreated, TraceDeleted, TraceSealed
from cascade.platform.state import TraceRecord, TraceStateName
from cascade.platform.storage import Storage
from cascade.platform.tracestore import ExpectedSet, TraceStore, capped, replace
from cascade.runs.plan import resolve_config
from cascade.traces.files import check_name
from services.api.appkeys import BUS, SETTINGS, STORAGE
from services.api.http import doc, json_response, query_choice, query_int, read_json
from services.api.kernel_views import KernelViews
from services.api.paging import page_query, page_request
from services.api.schemas.traces import (
    CompleteRequest,
    CreateTrace,
    DeletedTrace,
    KernelPage,
    SealRequest,
    TraceDetails,
    TraceList,
    TraceTotals,
    UploadedRequest,
    UploadedResponse,
    UploadsRequest,
    UploadsResponse,
)
from services.api.spec_index import install as install_specs
from services.api.spec_index import spec_index
from services.api.trace_index import TraceIndex, trace_index
from services.api.trace_index import install as install_traces
from services.api.trace_views import (
    BUNDLE_EXTRA_COLUMNS,
    KERNEL_SORT_COLUMNS,
    SUMMARY_COLUMNS,
    no_totals,
    progress_page,
    trace_details,
    view_extras,
)
from services.api.uploads import (
    complete_multipart,
    report_upload,
    unique_files,
    upload_targets,
    uploaded_object,
)

routes = web.RouteTableDef()

TRACE_STORE = web.AppKey("trace_store", TraceStore)
KERNEL_VIEWS = web.AppKey("kernel_views", KernelViews)
TRACE_STATES: tuple[str, ...] = get_args(TraceStateName)


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
        columns=(*SUMMARY_COLUMNS, *BUNDLE_EXTRA_COLUMNS), build=view_extras)

    async def open_store(app: web.Application) -> None:
        app[TRACE_STORE] = await TraceStore.open(app[BUS])

    app.on_startup.append(open_store)


def _trace_id(request: web.Request) -> str:
    tid = request.match_info["trace_id"]
    try:
        return check_token(tid, "trace_id")
    except ValidationError:
        raise NotFoundError(f"no trace {tid!r}") from None


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
    files = unique_files(body.files, settings.max_upload_bytes, settings.multipart_threshold_bytes)
    return json_response(await upload_targets(_storage(request), _store(request), settings, tid, files))


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
    key, etag, size = await complete_multipart(_storage(request), request.app[SETTINGS], tid, body)
    answer = await report_upload(request.app[BUS], _store(request), tid, body.name, key, etag, size)
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
    key, etag, size = await uploaded_object(_storage(request), tid, body.name, body.etag)
    answer = await report_upload(request.app[BUS], _store(request), tid, body.name, key, etag, size)
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
    return json_response(trace_details(record, index.files(tid), index.units(tid), index.expected(tid)))


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
    order: Literal["asc", "desc"] = "desc" if query_choice(request, "order", ("asc", "desc")) == "desc" else "asc"
    sort = request.query.get("sort", "kernel_id").strip()
    needle = request.query.get("q", "").strip().lower()
    if len(needle) > 200:
        raise ValidationError("at most 200 characters", field="q")
    index = _index(request)
    record = await index.require(tid)
    if not (record.state == "ready" and record.bundle_key):
        return json_response(progress_page(record, index.units(tid), offset=offset, limit=limit, sort=sort,
                                           order=order, needle=needle))
    view = await request.app[KERNEL_VIEWS].get(record)
    if sort not in view.columns and sort not in KERNEL_SORT_COLUMNS:
        raise ValidationError(f"unknown column {sort!r}; known: {', '.join(view.columns)}", field="sort")
    rows_at = view.order(sort, order, needle)
    return json_response(KernelPage(
        trace_id=tid, state=record.state, source="bundle", total=len(rows_at), offset=offset, limit=limit,
        sort=sort, order=order, columns=view.columns, kernels=view.rows(rows_at[offset:offset + limit])))


@routes.get("/api/traces/{trace_id}/summary")
@doc(tags=("traces",), response=TraceTotals, responses={404: "no such trace"})
async def trace_summary_route(request: web.Request) -> web.Response:
    """Totals for charts once the trace is ready: kernels and source-GPU time by family, per
    step (kind, kernels, time, start/end), and the instruction mix where instruction traces exist
    (``ready: false`` and empty totals before that)."""
    tid = _trace_id(request)
    record = await _index(request).require(tid)
    if record.state != "ready" or not record.bundle_key:
        return json_response(no_totals(tid))
    view = await request.app[KERNEL_VIEWS].get(record)
    return json_response(msgspec.structs.replace(view.summary, trace_id=tid))


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
    return json_response(DeletedTrace(id=tid, deleted=True, objects=objects, keys=keys))
