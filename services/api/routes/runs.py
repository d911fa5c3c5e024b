"""Runs: create, list, inspect, cancel, stream progress, results.

Endpoints:

- ``POST /api/runs`` ``{trace_id, configs, replicas, model, options, name}`` -> 202 ``{id, state, run}``.
- ``GET /api/runs?limit=&cursor=&state=&name=`` -> ``{"runs": [RunRecord...], "next_cursor",
  "total"}`` (newest first, paged).
- ``GET /api/runs/{id}`` -> ``{"run": RunRecord, "sims": [SimRecord...]}``.
- ``POST /api/runs/{id}/cancel`` -> 202 ``{id, state, cancel_requested}``.
- ``GET /api/runs/{id}/events`` -> ``text/event-stream`` (see below).
- ``GET /api/runs/{id}/results[?format=csv]`` -> per configuration and replica.
- ``GET /api/runs/{id}/results/{sim}/kernels?offset=&limit=[&format=csv|parquet]`` -> paged kernels.

Progress events
---------------

Everything a run does is published on the ``CASCADE`` JetStream stream, where
NATS subscribers can follow it directly:

- ``cascade.run.requested``: ``run.requested.v1`` (a new run).
- ``cascade.run.{run_id}.cancel``: ``run.cancel.v1``.
- ``cascade.run.{run_id}.state``: ``run.state.v1`` (queued -> running; ``cancelled``).
- ``cascade.run.{run_id}.completed`` / ``.failed``: ``run.completed.v1`` / ``run.failed.v1``
  (exactly one final event per run).
- ``cascade.sim.{sim_id}.queued|started|progress|completed|failed|cancelled``:
  ``sim.*.v1`` events; progress carries kernels done/total, percent, simulated ns,
  ETA and the attempt. Sim ids are ``{run_id}-{config}-r{replica}``.

``GET /api/runs/{id}/events`` serves the same events for one run as
server-sent events: ``event: sim`` (data: the sim's fields as in
``SimRecord``, e.g. ``{"id", "run_id", "state", "percent", "kernels_done",
"kernels_total", "eta_s", "attempts", ...}``) and ``event: run`` (data:
``{"id", "state", ...}``); every event has ``id:`` = its stream sequence, so
a reconnecting client resumes with ``Last-Event-ID``. A ``: ping`` comment
goes out every 15 s; the stream ends after the run's final event.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import time
from typing import Any, get_args

import msgspec
from aiohttp import web

from cascade.errors import NotFoundError, TooManyError, ValidationError
from cascade.platform.runevents import RunFollower
from cascade.platform.runs import cancel_run as request_cancel
from cascade.platform.runs import submit_run
from cascade.platform.runstore import read_kernels
from cascade.platform.state import TERMINAL_RUN_STATES, RunRecord, RunStateName
from cascade.runs.summary import results_csv
from cascade.tableio import write_csv_text, write_table
from services.api.appkeys import BUS, SETTINGS, STORAGE
from services.api.http import doc, json_response, query_choice, query_int, read_json
from services.api.paging import page_query, page_request
from services.api.run_reads import current_run, run_sims
from services.api.run_reads import install as install_reads
from services.api.run_reads import run_results as read_results
from services.api.schemas.runs import (
    CSV_CONTENT,
    PARQUET_CONTENT,
    SSE_EVENTS,
    CancelAccepted,
    CreateRun,
    KernelRows,
    RunAccepted,
    RunDetail,
    RunList,
    RunResults,
)
from services.api.sim_models import sim_models
from services.api.spec_index import spec_index

routes = web.RouteTableDef()

RUN_STATES: tuple[str, ...] = get_args(RunStateName)

HEARTBEAT_S = 15.0
"""Seconds between ``: ping`` comments on an idle event stream."""
#: Largest Last-Event-ID accepted (JetStream sequences are unsigned 64-bit; one less, +1 fits).
MAX_EVENT_ID = 2**63 - 2
#: Event streams one api process serves at once (each holds a JetStream consumer).
MAX_EVENT_STREAMS = 256
EVENT_STREAMS = web.AppKey("run_event_streams", dict)


# --------------------------------------------------------------------------- create / list / get


@routes.post("/api/runs")
@doc(request=CreateRun, response=RunAccepted, status=202, tags=("runs",),
     responses={202: "accepted", 400: "invalid request, unknown config (lists the known ones), or "
                "accel-sim asked where it is not configured (names the setting and the "
                "configs that can run it) or on a timeline-only trace",
                404: "no such trace", 409: "trace not ready, or a read-only sample"})
async def create_run(request: web.Request) -> web.Response:
    """Simulate a ready trace on GPU configurations x replicas."""
    body = await read_json(request, CreateRun)
    custom = await spec_index(request.app).fresh()
    record = await submit_run(request.app[BUS], request.app[SETTINGS], trace_id=body.trace_id,
                              configs=body.configs, replicas=body.replicas, model=body.model,
                              replay=body.options, name=body.name, custom=custom)
    # reads of this instance answer from its KV-fed index: let it see the new run first
    await sim_models(request.app).caught_up("runs", record.id, lambda r: r is not None)
    return json_response(RunAccepted(id=record.id, state=record.state, run=record), status=202,
                         headers={"Location": f"/api/runs/{record.id}"})


@routes.get("/api/runs")
@doc(response=RunList, tags=("runs",), query=page_query("runs", list(RUN_STATES)),
     responses={400: "bad limit, cursor, state or name"})
async def list_runs(request: web.Request) -> web.Response:
    """Runs, newest first, a page at a time (``limit``, ``cursor``), optionally only one state
    or those whose name, id or trace id contains ``name``: ``{"runs": [...], "next_cursor",
    "total"}``."""
    want = page_request(request, RUN_STATES)
    page = sim_models(request.app).run_page(want)  # the KV-fed index: no consumer per request
    return json_response(RunList(runs=page.items, next_cursor=page.next_cursor, total=page.total))


@routes.get("/api/runs/{run_id}")
@doc(response=RunDetail, tags=("runs",), responses={404: "no such run"})
async def get_run(request: web.Request) -> web.Response:
    """One run and every sim: state, percent, kernels done/total, ETA, attempts, error."""
    run = await current_run(request.app, request.match_info["run_id"])
    return json_response(RunDetail(run=run, sims=await run_sims(request.app, run)))


@routes.post("/api/runs/{run_id}/cancel")
@doc(response=CancelAccepted, status=202, tags=("runs",),
     responses={202: "cancel requested", 404: "no such run",
                                409: "the run already finished, or is a read-only sample"})
async def cancel_run(request: web.Request) -> web.Response:
    """Cancel a run: queued and running sims stop, the run ends ``cancelled``."""
    run = await current_run(request.app, request.match_info["run_id"])
    updated = await request_cancel(request.app[BUS], run)
    await sim_models(request.app).caught_up(
        "runs", run.id, lambda r: r is None or r.cancel_requested or r.state in TERMINAL_RUN_STATES)
    state = updated.state if updated is not None else run.state
    return json_response(CancelAccepted(id=run.id, state=state, cancel_requested=True), status=202)


# --------------------------------------------------------------------------- events (SSE)


_JSON = msgspec.json.Encoder()


def _frame(event: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + _JSON.encode(data) + b"\n\n"


def parse_last_event_id(value: str, field: str = "Last-Event-ID") -> int:
    """The stream sequence to resume from (``value + 1``); 400 naming the range otherwise."""
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_EVENT_ID:
        raise ValidationError(f"expected an event id from this stream: an integer from 0 to "
                              f"{MAX_EVENT_ID}, got {value[:40]!r}", field=field)
    return int(text) + 1


@routes.get("/api/runs/{run_id}/events")
@doc(tags=("runs",), sse=SSE_EVENTS,
     responses={200: "server-sent events", 400: "bad Last-Event-ID", 404: "no such run",
                429: "too many open event streams"},
     query={"last_event_id": ("resume after this event id (as the Last-Event-ID header)",
                              {"type": "string", "pattern": "^[0-9]{1,18}$"})})
async def run_events(request: web.Request) -> web.StreamResponse:
    """Server-sent progress and state events of one run (resumable with ``Last-Event-ID``)."""
    run = await current_run(request.app, request.match_info["run_id"])
    header = request.headers.get("Last-Event-ID", "").strip()
    if header:
        start_seq: int | None = parse_last_event_id(header, "Last-Event-ID")
    elif "last_event_id" in request.query:
        start_seq = parse_last_event_id(request.query["last_event_id"], "last_event_id")
    else:
        start_seq = None
    streams: dict[str, int] = request.app[EVENT_STREAMS]
    if streams["open"] >= streams["limit"]:
        raise TooManyError(f"{streams['limit']} event streams are already open on this api; "
                           "retry later", limit=streams["limit"])
    streams["open"] += 1
    try:
        return await _stream_events(request, run, start_seq)
    finally:
        streams["open"] -= 1


async def _stream_events(request: web.Request, run: RunRecord, start_seq: int | None) -> web.StreamResponse:
    follower = RunFollower(request.app[BUS], run, start_seq)
    await follower.open()
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    })
    last_write = time.monotonic()
    try:
        await response.prepare(request)
        if start_seq is None:
            await response.write(_frame("run", run))
        while (events := await follower.next()) is not None:
            for event in events:
                await response.write(_frame(event.kind, event.data, event.seq))
                last_write = time.monotonic()
            now = time.monotonic()
            if now - last_write >= HEARTBEAT_S:
                await response.write(b": ping\n\n")
                last_write = now
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        await follower.close()
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


# --------------------------------------------------------------------------- results


@routes.get("/api/runs/{run_id}/results")
@doc(tags=("runs",), response=RunResults, content=CSV_CONTENT,
     query={"format": ("json (default) or csv", {"type": "string", "enum": ["json", "csv"]})},
     responses={404: "no such run"})
async def run_results(request: web.Request) -> web.Response:
    """Per configuration and replica: predicted e2e and per-step times, baseline/error, top kernels."""
    run = await current_run(request.app, request.match_info["run_id"])
    fmt = query_choice(request, "format", ("json", "csv"))
    answer, results = await read_results(request.app, run, coverage=fmt == "json")
    if fmt == "csv":
        return web.Response(text=results_csv(answer.configs, results), content_type="text/csv", headers={
            "Content-Disposition": f'attachment; filename="{run.id}-results.csv"'})
    return json_response(answer)


KERNEL_COLUMNS = ("kernel_id", "name", "stream", "step", "step_kind", "op", "dtype", "duration_ns",
                  "predicted_ns", "regime", "pred_start_ns", "pred_end_ns", "extrapolation")


@routes.get("/api/runs/{run_id}/results/{sim_id}/kernels")
@doc(tags=("runs",), response=KernelRows, content={**CSV_CONTENT, **PARQUET_CONTENT}, query={
    "offset": ("first row (default 0)", {"type": "integer", "minimum": 0, "maximum": 2**31}),
    "limit": ("rows (default 100, max 10000)", {"type": "integer", "minimum": 1, "maximum": 10000}),
    "format": ("json (default), csv or parquet",
               {"type": "string", "enum": ["json", "csv", "parquet"]})},
     responses={404: "no such run, sim or result"})
async def sim_kernels(request: web.Request) -> web.Response:
    """One sim's per-kernel predictions, paged (source and predicted ns, regime, start/end,
    extrapolation bits: 1 target / 2 source GPU not calibrated, 4 GEMM shape outside the
    calibration data, 8 launch/roofline bound only, 16 not simulated by Accel-Sim; empty for
    results that predate them; ``sim_cycles`` with model accel-sim, -1 where not simulated)."""
    run = await current_run(request.app, request.match_info["run_id"])
    sim_id = request.match_info["sim_id"]
    if sim_id not in run.sim_ids:
        raise NotFoundError(f"run {run.id} has no sim {sim_id!r}")
    offset = query_int(request, "offset", 0, 0, 2**31)
    limit = query_int(request, "limit", 100, 1, 10000)
    fmt = query_choice(request, "format", ("json", "csv", "parquet"))
    table = await read_kernels(request.app[STORAGE], run.id, sim_id)
    page = table.take(slice(offset, offset + limit))
    columns = KERNEL_COLUMNS + (("sim_cycles",) if "sim_cycles" in table else ())
    if fmt == "parquet":
        buf = io.BytesIO()
        await asyncio.to_thread(write_table, page, buf, columns, "parquet")
        return web.Response(body=buf.getvalue(), content_type="application/vnd.apache.parquet",
                            headers={"X-Total-Count": str(len(table)),
                                     "Content-Disposition":
                                         f'attachment; filename="{sim_id}-kernels.parquet"'})
    if fmt == "csv":
        out = io.StringIO()
        write_csv_text(page, out, columns)
        return web.Response(text=out.getvalue(), content_type="text/csv", headers={
            "X-Total-Count": str(len(table)),
            "Content-Disposition": f'attachment; filename="{sim_id}-kernels.csv"'})
    rows = []
    cols = {c: page[c] for c in columns}
    for i in range(len(page)):
        row: dict[str, Any] = {}
        for c, arr in cols.items():
            v = arr[i]
            v = v.item() if hasattr(v, "item") else v
            if isinstance(v, float) and math.isnan(v):
                v = None
            row[c] = v
        rows.append(row)
    return json_response(KernelRows(run_id=run.id, sim_id=sim_id, total=len(table), offset=offset, limit=limit,
                                    columns=list(columns), kernels=rows))


def setup(app: web.Application) -> None:
    """The KV-fed run/sim index reads answer from, the per-app result cache (results are
    immutable once written) and the event-stream count."""
    install_reads(app)
    app[EVENT_STREAMS] = {"open": 0, "limit": MAX_EVENT_STREAMS}
