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
import csv
import io
import math
import time
from collections import OrderedDict
from typing import Annotated, Any, get_args

import msgspec
import nats.errors
import nats.js.errors
from aiohttp import web
from nats.js import api as jsapi

from cascade.calibration.accuracy import AccuracyEstimate
from cascade.engine.registry import ModelConfig, model_names
from cascade.errors import ConflictError, NotFoundError, TooManyError, ValidationError
from cascade.gpus import known_gpu_names
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.accelsim import MODEL as ACCELSIM
from cascade.platform.accelsim import discover_with, refuse_timeline_trace, require
from cascade.platform.messages.run import (
    RunCancelRequested,
    RunCompleted,
    RunFailed,
    RunStateChanged,
    decode_run_event,
)
from cascade.platform.messages.sim import (
    KernelSimulated,
    SimCancelled,
    SimCompleted,
    SimFailed,
    SimProgress,
    SimQueued,
    SimStarted,
    decode_sim_event,
)
from cascade.platform.runs import new_run, run_requested
from cascade.platform.runstore import read_kernels, read_result
from cascade.platform.samples import is_recorded_run, list_samples, load_reference, refuse_rerun
from cascade.platform.state import (
    TERMINAL_RUN_STATES,
    RunRecord,
    RunStateName,
    SimRecord,
    SimStateName,
    TraceRecord,
)
from cascade.runs.plan import (
    MAX_REPLICAS,
    ReplayOptions,
    new_run_id,
    plan_sims,
)
from cascade.runs.results import AccelSimKernel, SimResult, SimulatorProvenance
from cascade.tableio import write_csv_text, write_table
from services.api.http import doc, json_response, query_choice, query_int, read_json
from services.api.keys import BUS, SETTINGS, STORAGE
from services.api.paging import page_query, page_request
from services.api.sim_models import install as install_models
from services.api.sim_models import sim_models
from services.api.spec_index import spec_index

routes = web.RouteTableDef()

RUN_STATES: tuple[str, ...] = get_args(RunStateName)

HEARTBEAT_S = 15.0
"""Seconds between ``: ping`` comments on an idle event stream."""
RESULT_CACHE = web.AppKey("run_result_cache", OrderedDict)

ModelName = Annotated[str, msgspec.Meta(extra_json_schema={"enum": model_names()})]
"""A kernel model by name, with its default settings (the names come from the model registry)."""


ConfigName = Annotated[str, msgspec.Meta(extra_json_schema={"enum": known_gpu_names()})]
"""A built-in GPU spec id or alias (a stored custom spec's name is accepted too)."""
InlineSpec = Annotated[dict[str, Any], msgspec.Meta(
    extra_json_schema={"$ref": "#/components/schemas/GPUSpec"})]
"""A custom GPU spec given inline."""


class CreateRun(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/runs."""

    trace_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    """A ready trace."""
    configs: Annotated[list[ConfigName | InlineSpec], msgspec.Meta(min_length=1, max_length=64)]
    """GPU spec ids / aliases / custom spec names, or custom specs given inline."""
    replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1
    """Independent simulations per configuration."""
    model: ModelName | ModelConfig = "auto"  # type: ignore[valid-type]
    """Kernel model: a name, or ``{"kind": name, ...settings}``."""
    options: ReplayOptions = ReplayOptions()
    """Replay options (``chunk_delay_s`` paces a simulation, for demos and tests)."""
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    """Human label."""


class RunAccepted(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of POST /api/runs."""

    id: str
    state: str
    run: RunRecord


class RunList(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/runs: one page of runs, newest first."""

    runs: list[RunRecord]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page (null: this is the last)."""
    total: int = 0
    """Runs matching the filters, on every page together."""


class RunDetail(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/runs/{id}: the run and each of its sims."""

    run: RunRecord
    sims: list[SimRecord]


class CancelAccepted(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of POST /api/runs/{id}/cancel."""

    id: str
    state: str
    cancel_requested: bool


class SimEventData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``event: sim``: a sim event as the SimRecord fields it changes."""

    id: str
    run_id: str
    type: str
    """The event's tag (``sim.progress.v1``, ...)."""
    at: float
    state: SimStateName | msgspec.UnsetType = msgspec.UNSET
    config: str | msgspec.UnsetType = msgspec.UNSET
    replica: int | msgspec.UnsetType = msgspec.UNSET
    percent: float | msgspec.UnsetType = msgspec.UNSET
    attempts: int | msgspec.UnsetType = msgspec.UNSET
    worker: str | msgspec.UnsetType = msgspec.UNSET
    kernels_total: int | msgspec.UnsetType = msgspec.UNSET
    kernels_done: int | msgspec.UnsetType = msgspec.UNSET
    simulated_ns: float | msgspec.UnsetType = msgspec.UNSET
    eta_s: float | None | msgspec.UnsetType = msgspec.UNSET
    kernel: KernelSimulated | msgspec.UnsetType = msgspec.UNSET
    result_key: str | msgspec.UnsetType = msgspec.UNSET
    predicted_e2e_ns: float | None | msgspec.UnsetType = msgspec.UNSET
    error: str | None | msgspec.UnsetType = msgspec.UNSET


class RunEventData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``event: run`` from the event log: the run fields it changes."""

    id: str
    type: str
    at: float
    state: str | msgspec.UnsetType = msgspec.UNSET
    previous: str | None | msgspec.UnsetType = msgspec.UNSET
    reason: str | msgspec.UnsetType = msgspec.UNSET
    sims_completed: int | msgspec.UnsetType = msgspec.UNSET
    sims_failed: int | msgspec.UnsetType = msgspec.UNSET
    error: str | msgspec.UnsetType = msgspec.UNSET
    cancel_requested: bool | msgspec.UnsetType = msgspec.UNSET


#: ``event: sim`` (id: the event's sequence) and ``event: run`` (the whole RunRecord first
#: and when it changes, or a run event's fields).
SSE_EVENTS: dict[str | None, Any] = {"sim": SimEventData, "run": (RunRecord, RunEventData)}
CSV_CONTENT = {"text/csv": {"schema": {"type": "string"}}}
PARQUET_CONTENT = {"application/vnd.apache.parquet": {"schema": {"type": "string",
                                                                 "format": "binary"}}}


# --------------------------------------------------------------------------- helpers


async def _run(request: web.Request, run_id: str) -> RunRecord:
    """The run as KV holds it now: a client that saw the run finish in its event stream must
    not then read it as still running from the KV-fed index, which can trail the record by a
    moment. So an unfinished (or unseen) run is one direct KV get; a run the index already
    shows finished is served from the index: its state never changes again (the orchestrator
    ends a run once; runs are not deleted), and the busiest read costs no KV round trip."""
    try:
        check_token(run_id, "run_id")
    except ValidationError:
        raise NotFoundError(f"no run {run_id!r}") from None
    models = sim_models(request.app)
    if models.loaded():
        seen: RunRecord | None = models.run_record(run_id)
        if seen is not None and seen.state in TERMINAL_RUN_STATES:
            return seen
    kv = await request.app[BUS].kv(subjects.KV_RUNS)
    entry = await kv.get(run_id, RunRecord)
    if entry is None:
        raise NotFoundError(f"no run {run_id!r}")
    return entry.value


async def _sims(request: web.Request, run: RunRecord) -> list[SimRecord]:
    """The run's sims from the KV-fed index, re-read from KV where the index has not seen them
    or, for a finished run, still shows them unfinished (the index trails KV); the rest planned."""
    models = sim_models(request.app)
    known: dict[str, SimRecord] = {}
    if models.loaded():
        known = {s: r for s in run.sim_ids if (r := models.sim_record(s)) is not None}
    stale = [s for s in run.sim_ids if s not in known
             or (run.state in TERMINAL_RUN_STATES and known[s].state not in TERMINAL_RUN_STATES)]
    if stale:
        kv = await request.app[BUS].kv(subjects.KV_SIMS)
        for sid, entry in zip(stale, await asyncio.gather(*(kv.get(s, SimRecord) for s in stale)),
                              strict=True):
            if entry is not None:
                known[sid] = entry.value
    out = []
    for sid in run.sim_ids:
        if sid in known:
            out.append(known[sid])
        else:
            config, replica = _planned(run).get(sid, ("", 0))
            out.append(SimRecord(id=sid, run_id=run.id, config=config, replica=replica, model=run.model))
    return out


def _planned(run: RunRecord) -> dict[str, tuple[str, int]]:
    return {s: (c, r) for s, c, r in plan_sims(run.id, run.configs, run.replicas)}


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
    bus = request.app[BUS]
    traces = await bus.kv(subjects.KV_TRACES)
    try:
        check_token(body.trace_id, "trace_id")
    except ValidationError:
        raise NotFoundError(f"no trace {body.trace_id!r}") from None
    entry = await traces.get(body.trace_id, TraceRecord)
    if entry is None:
        refuse_rerun(body.trace_id)
        raise NotFoundError(f"no trace {body.trace_id!r}")
    trace = entry.value
    if trace.provenance.read_only:
        raise ConflictError(
            trace.provenance.rerun_refusal
            or f"trace {trace.id} is a read-only recorded sample and cannot be simulated again",
            state="read-only")
    if trace.state != "ready" or not trace.bundle_key:
        raise ConflictError(
            f"trace {trace.id} is {trace.state}, not ready: runs need a prepared bundle "
            f"({trace.kernels_prepared}/{trace.kernels_total or trace.expected_kernels or '?'} "
            "kernels prepared)", state=trace.state)
    run_id = new_run_id()
    custom = await spec_index(request.app).fresh()
    record, plan = await new_run(bus, run_id=run_id, trace_id=trace.id, configs=body.configs,
                                 replicas=body.replicas, model=body.model, replay=body.options,
                                 name=body.name, custom=custom)
    if record.model == ACCELSIM:
        refuse_timeline_trace(trace.id, trace.kind)
        require(await asyncio.to_thread(discover_with, request.app[SETTINGS], list(custom.values())),
                record.configs)
    runs = await bus.kv(subjects.KV_RUNS)
    await runs.create(run_id, record)
    try:
        await bus.publish(subjects.RUN_REQUESTED, run_requested(record, plan),
                          msg_id=f"{run_id}:requested")
    except BaseException:
        await runs.delete(run_id)
        raise
    # reads of this instance answer from its KV-fed index: let it see the new run first
    await sim_models(request.app).caught_up("runs", run_id, lambda r: r is not None)
    return json_response(RunAccepted(id=run_id, state=record.state, run=record), status=202,
                         headers={"Location": f"/api/runs/{run_id}"})


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
    run = await _run(request, request.match_info["run_id"])
    return json_response(RunDetail(run=run, sims=await _sims(request, run)))


@routes.post("/api/runs/{run_id}/cancel")
@doc(response=CancelAccepted, status=202, tags=("runs",),
     responses={202: "cancel requested", 404: "no such run",
                                409: "the run already finished, or is a read-only sample"})
async def cancel_run(request: web.Request) -> web.Response:
    """Cancel a run: queued and running sims stop, the run ends ``cancelled``."""
    run_id = request.match_info["run_id"]
    run = await _run(request, run_id)
    if run.provenance.read_only:
        raise ConflictError(run.provenance.rerun_refusal or f"run {run_id} is a read-only sample",
                            state="read-only")
    if run.state in TERMINAL_RUN_STATES:
        raise ConflictError(f"run {run_id} already finished ({run.state})", state=run.state)
    bus = request.app[BUS]
    kv = await bus.kv(subjects.KV_RUNS)

    def flag(cur: RunRecord | None) -> RunRecord | None:
        if cur is None or cur.cancel_requested or cur.state in TERMINAL_RUN_STATES:
            return None
        return msgspec.structs.replace(cur, cancel_requested=True, updated_at=time.time())

    updated = await kv.mutate(run_id, RunRecord, flag)
    await bus.publish(subjects.run_event(run_id, "cancel"), RunCancelRequested(run_id=run_id),
                      msg_id=f"{run_id}:cancel")
    await sim_models(request.app).caught_up(
        "runs", run_id, lambda r: r is None or r.cancel_requested or r.state in TERMINAL_RUN_STATES)
    state = updated.state if updated is not None else run.state
    return json_response(CancelAccepted(id=run_id, state=state, cancel_requested=True), status=202)


# --------------------------------------------------------------------------- events (SSE)


def sim_event_data(data: bytes) -> dict[str, Any] | None:
    """A sim event as the SimRecord-like fields the UI merges into its row."""
    ev = decode_sim_event(data)
    base: dict[str, Any] = {"id": ev.sim_id, "run_id": ev.run_id, "type": type(ev).__struct_config__.tag,
                            "at": ev.at}
    match ev:
        case SimQueued():
            base.update(state="queued", config=ev.config, replica=ev.replica, percent=0.0)
        case SimStarted():
            base.update(state="running", attempts=ev.attempt, worker=ev.worker)
            if ev.kernels_total:
                base["kernels_total"] = ev.kernels_total
        case SimProgress():
            base.update(state="running", percent=ev.percent, kernels_done=ev.kernels_done,
                        kernels_total=ev.kernels_total, simulated_ns=ev.simulated_ns,
                        eta_s=ev.eta_s, attempts=ev.attempt)
            if ev.kernel is not None:
                base["kernel"] = msgspec.to_builtins(ev.kernel)
        case SimCompleted():
            base.update(state="completed", percent=100.0, eta_s=0.0, result_key=ev.result_key,
                        predicted_e2e_ns=ev.predicted_e2e_ns, attempts=ev.attempt,
                        simulated_ns=ev.simulated_ns)
        case SimFailed():
            base.update(state="failed", error=ev.error, attempts=ev.attempts, eta_s=None)
        case SimCancelled():
            base.update(state="cancelled", error=ev.reason or None, eta_s=None)
        case _:
            return None
    return base


def run_event_data(data: bytes) -> dict[str, Any] | None:
    """A run event as ``{"id", "state", ...}`` (None for the request itself)."""
    ev = decode_run_event(data)
    base: dict[str, Any] = {"id": ev.run_id, "type": type(ev).__struct_config__.tag, "at": ev.at}
    match ev:
        case RunStateChanged():
            base.update(state=ev.state, previous=ev.previous, reason=ev.reason)
        case RunCompleted():
            base.update(state="partial" if ev.sims_failed and ev.sims_completed else "completed",
                        sims_completed=ev.sims_completed, sims_failed=ev.sims_failed)
        case RunFailed():
            base.update(state="failed", error=ev.error)
        case RunCancelRequested():
            base.update(cancel_requested=True, reason=ev.reason)
        case _:
            return None
    return base


_JSON = msgspec.json.Encoder()


def _frame(event: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + _JSON.encode(data) + b"\n\n"


@routes.get("/api/runs/{run_id}/events")
@doc(tags=("runs",), sse=SSE_EVENTS,
     responses={200: "server-sent events", 400: "bad Last-Event-ID", 404: "no such run",
                429: "too many open event streams"},
     query={"last_event_id": ("resume after this event id (as the Last-Event-ID header)",
                              {"type": "string", "pattern": "^[0-9]{1,18}$"})})
async def run_events(request: web.Request) -> web.StreamResponse:
    """Server-sent progress and state events of one run (resumable with ``Last-Event-ID``)."""
    run = await _run(request, request.match_info["run_id"])
    bus = request.app[BUS]
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
        return await _stream_events(request, bus, run, start_seq)
    finally:
        streams["open"] -= 1


#: Largest Last-Event-ID accepted (JetStream sequences are unsigned 64-bit; one less, +1 fits).
MAX_EVENT_ID = 2**63 - 2
#: Event streams one api process serves at once (each holds a JetStream consumer).
MAX_EVENT_STREAMS = 256
EVENT_STREAMS = web.AppKey("run_event_streams", dict)


def parse_last_event_id(value: str, field: str = "Last-Event-ID") -> int:
    """The stream sequence to resume from (``value + 1``); 400 naming the range otherwise."""
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_EVENT_ID:
        raise ValidationError(f"expected an event id from this stream: an integer from 0 to "
                              f"{MAX_EVENT_ID}, got {value[:40]!r}", field=field)
    return int(text) + 1


class _EventFeed:
    """A run's events from the CASCADE stream through one ephemeral consumer (memory, one
    replica: it lives on one NATS node). When that node goes away (a cluster node lost, the
    server restarted) the consumer is opened again right after the last sequence taken, so the
    client's stream goes on without a gap or a repeat."""

    def __init__(self, bus: Any, filters: list[str], start_seq: int | None) -> None:
        self.bus = bus
        self.filters = filters
        self.next_seq = start_seq
        """Sequence to start from when (re)opened (None: the stream's first)."""
        self.name = ""
        self.sub: Any = None
        self.broken_since: float | None = None
        self.checked_at = time.monotonic()

    async def open(self) -> None:
        config = jsapi.ConsumerConfig(
            ack_policy=jsapi.AckPolicy.NONE,
            deliver_policy=(jsapi.DeliverPolicy.BY_START_SEQUENCE if self.next_seq
                            else jsapi.DeliverPolicy.ALL),
            opt_start_seq=self.next_seq,
            filter_subjects=self.filters,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        info = await self.bus.jsm.add_consumer(subjects.EVENTS_STREAM, config=config)
        self.name = info.name
        self.bus.stats.consumer_opened("events")
        try:
            self.sub = await self.bus.js.pull_subscribe_bind(
                durable=None, stream=subjects.EVENTS_STREAM, name=self.name)
        except BaseException:
            await self.close()
            raise
        self.broken_since = None

    async def close(self) -> None:
        if not self.name:
            return
        self.bus.stats.consumer_closed("events")
        name, sub = self.name, self.sub
        self.name, self.sub = "", None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await self.bus.jsm.delete_consumer(subjects.EVENTS_STREAM, name)

    async def fetch(self) -> list[Any]:
        """The next messages (none after a second without any); a lost consumer is replaced."""
        if self.sub is None:
            try:
                await self.open()
            except (nats.errors.Error, TimeoutError, OSError):
                await asyncio.sleep(0.5)
                return []
        try:
            msgs = await self.sub.fetch(256, timeout=1.0)
        except (TimeoutError, nats.errors.TimeoutError):
            # a consumer whose node restarted is gone without an error on fetch: ask for it
            if time.monotonic() - self.checked_at >= CONSUMER_CHECK_S and not await self.alive():
                await self._lost()
            return []
        except (nats.errors.Error, OSError):
            await self._lost()
            return []
        self.checked_at = time.monotonic()
        fresh = [m for m in msgs if self.next_seq is None
                 or m.metadata.sequence.stream >= self.next_seq]
        if len(fresh) < len(msgs):
            # a memory consumer its restarted node made again replays from its first sequence:
            # what was sent already is dropped, and the feed starts over after it
            await self._lost()
        if fresh:
            self.next_seq = fresh[-1].metadata.sequence.stream + 1
        return fresh

    async def alive(self) -> bool:
        """Whether the server still has the consumer (a slow answer counts as alive)."""
        self.checked_at = time.monotonic()
        try:
            await self.sub.consumer_info()
        except (nats.js.errors.NotFoundError, nats.js.errors.ServiceUnavailableError,
                nats.errors.NoRespondersError):
            return False
        except (nats.errors.Error, TimeoutError, OSError):
            return True
        return True

    async def _lost(self) -> None:
        self.broken_since = self.broken_since or time.monotonic()
        await self.close()
        await asyncio.sleep(0.5)

    async def pending(self) -> int | None:
        """Messages not yet fetched (None when unknown)."""
        if self.sub is None:
            return None
        try:
            info = await self.sub.consumer_info()
        except (nats.errors.Error, TimeoutError, OSError):
            return None
        return int(info.num_pending)


#: Seconds without a message after which an event stream asks whether its consumer still exists.
CONSUMER_CHECK_S = 3.0
#: Seconds an event stream waits for its lost consumer to come back before it ends (the
#: client then reconnects, to this replica or another, with Last-Event-ID).
FEED_LOST_S = 30.0


async def _stream_events(request: web.Request, bus: Any, run: RunRecord,
                         start_seq: int | None) -> web.StreamResponse:
    filters = [subjects.run_events(run.id), *(subjects.sim_events(s) for s in run.sim_ids)]
    feed = _EventFeed(bus, filters, start_seq)
    await feed.open()
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    })
    last_write = time.monotonic()
    last_kv_check = 0.0
    try:
        await response.prepare(request)
        runs_kv = await bus.kv(subjects.KV_RUNS)
        if start_seq is None:
            await response.write(_frame("run", _run_view(run)))
        while True:
            msgs = await feed.fetch()
            finished = False
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                kind = "sim" if msg.subject.startswith(f"{subjects.PREFIX}.sim.") else "run"
                try:
                    data = sim_event_data(msg.data) if kind == "sim" else run_event_data(msg.data)
                except ValidationError:
                    continue
                if data is None:
                    continue
                await response.write(_frame(kind, data, seq))
                last_write = time.monotonic()
                if kind == "run" and data.get("state") in TERMINAL_RUN_STATES:
                    finished = True
            if finished:
                break
            now = time.monotonic()
            if feed.broken_since is not None and now - feed.broken_since > FEED_LOST_S:
                break
            if not msgs and feed.sub is not None and now - last_kv_check >= 2.0:
                last_kv_check = now
                with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                    entry = await runs_kv.get(run.id, RunRecord)
                    if (entry is not None and entry.value.state in TERMINAL_RUN_STATES
                            and await feed.pending() == 0):
                        await response.write(_frame("run", _run_view(entry.value)))
                        break
            if now - last_write >= HEARTBEAT_S:
                await response.write(b": ping\n\n")
                last_write = now
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        await feed.close()
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


def _run_view(run: RunRecord) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(run)
    return out


# --------------------------------------------------------------------------- results


async def _result(request: web.Request, run_id: str, sim_id: str) -> SimResult:
    cache: OrderedDict[tuple[str, str], SimResult] = request.app[RESULT_CACHE]
    key = (run_id, sim_id)
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    result = await read_result(request.app[STORAGE], run_id, sim_id)
    cache[key] = result
    while len(cache) > 512:
        cache.popitem(last=False)
    return result


def setup(app: web.Application) -> None:
    """Per-app result cache (results are immutable once written), event-stream count and the
    KV-fed run/sim index reads answer from."""
    install_models(app)
    app[RESULT_CACHE] = OrderedDict()
    app[EVENT_STREAMS] = {"open": 0, "limit": MAX_EVENT_STREAMS}


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def config_results(config: str, sims: list[SimRecord], results: dict[str, SimResult]) -> dict[str, Any]:
    """The results entry of one configuration: means over completed replicas, plus each replica."""
    done = [results[s.id] for s in sims if s.id in results]
    first = done[0] if done else None
    predicted = _mean([r.predicted_e2e_ns for r in done])
    baseline = first.baseline_e2e_ns if first else None
    error = (predicted - baseline) / baseline * 100 if predicted is not None and baseline else None
    replicas = []
    for s in sims:
        r = results.get(s.id)
        replicas.append({
            "sim_id": s.id, "replica": s.replica, "state": s.state, "error": s.error,
            "attempts": s.attempts,
            "predicted_e2e_ms": _ms(r.predicted_e2e_ns) if r else None,
            "gpu_busy_ms": _ms(r.gpu_busy_ns) if r else None,
            "wall_s": r.wall_s if r else None,
        })
    return {
        "config": config,
        "state": "completed" if len(done) == len(sims) and sims else
                 ("partial" if done else (sims[0].state if sims else "queued")),
        "predicted_e2e_ms": _ms(predicted),
        "baseline_e2e_ms": _ms(baseline),
        "error_pct": error,
        "counterfactual": error is None,
        "source_e2e_ms": _ms(first.source_e2e_ns) if first else None,
        "gpu_busy_ms": _ms(_mean([r.gpu_busy_ns for r in done])),
        "model": first.model if first else None,
        "spec_id": first.spec_id if first else config,
        "spec_hash": first.spec_hash if first else None,
        "source_spec_id": first.source_spec_id if first else None,
        "calibration": first.calibration if first else None,
        "kernel_count": first.kernel_count if first else None,
        "extrapolated": first.extrapolated if first else None,
        "extrapolation": first.extrapolation if first else {},
        "accuracy": msgspec.to_builtins(first.accuracy) if first and first.accuracy else None,
        "steps": [
            {"step": st.step, "kind": st.kind, "tokens": st.tokens, "batch": st.batch,
             "context": st.context, "predicted_ms": st.wall_ns / 1e6, "gpu_ms": st.gpu_ns / 1e6,
             "host_ms": st.host_ns / 1e6, "kernels": st.kernels}
            for st in (first.steps if first else [])
        ],
        "top_kernels": [
            {"name": k.name, "count": k.count, "predicted_ms": k.predicted_ns / 1e6,
             "source_ms": _ms(k.source_ns), "regime": k.regime, "family": k.family, "share": k.share}
            for k in (first.top_kernels if first else [])
        ],
        "families": {
            name: {"count": f.count, "predicted_ms": f.predicted_ns / 1e6,
                   "source_ms": _ms(f.source_ns), "share": f.share}
            for name, f in (first.families.items() if first else [])
        },
        "regimes": first.regimes if first else {},
        "simulator": msgspec.to_builtins(first.simulator) if first and first.simulator else None,
        "accelsim_kernels": [msgspec.to_builtins(k) for k in (first.accelsim_kernels if first else [])],
        "replicas": replicas,
    }


class ReplicaResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    sim_id: str
    replica: int
    state: str
    error: str | None
    attempts: int
    predicted_e2e_ms: float | None
    gpu_busy_ms: float | None
    wall_s: float | None


class StepTime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    step: int
    kind: str
    tokens: int
    batch: int
    context: int
    predicted_ms: float
    gpu_ms: float
    host_ms: float
    kernels: int


class TopKernel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    count: int
    predicted_ms: float
    source_ms: float | None
    regime: str
    family: str
    share: float


class FamilyTime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    count: int
    predicted_ms: float
    source_ms: float | None
    share: float


class ConfigResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One configuration of a run: means over its completed replicas, then each replica."""

    config: str
    state: str
    """completed, partial (some replicas), or the sims' state while none has finished."""
    predicted_e2e_ms: float | None
    baseline_e2e_ms: float | None
    error_pct: float | None
    counterfactual: bool
    source_e2e_ms: float | None
    gpu_busy_ms: float | None
    model: str | None
    spec_id: str | None
    spec_hash: str | None
    source_spec_id: str | None
    calibration: str | None
    kernel_count: int | None
    extrapolated: int | None
    extrapolation: dict[str, int]
    accuracy: AccuracyEstimate | None
    steps: list[StepTime]
    top_kernels: list[TopKernel]
    families: dict[str, FamilyTime]
    regimes: dict[str, int]
    simulator: SimulatorProvenance | None
    replicas: list[ReplicaResult]
    accelsim_kernels: list[AccelSimKernel] = []
    """Model accel-sim: per simulated kernel (first replica), Accel-Sim's statistics beside
    the built-in model's prediction for the same kernel."""
    recorded: bool | msgspec.UnsetType = msgspec.UNSET
    """True where a recorded sample run's figures stand in for result files."""


class ReferenceRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    config: str
    hardware: str
    real_e2e_ms: float | None
    simulated_e2e_ms: float
    error_pct: float | None
    counterfactual: bool
    note: str


class RecordedReference(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A recorded sample run's published figures."""

    badge: str
    title: str
    simulator: str
    kernel_model: str
    caveats: list[str]
    configs: list[ReferenceRow]


class TraceCoverage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What of the trace the results cover."""

    kernels_total: int
    kernels_prepared: int
    kernels_failed: int
    bundle_kernels: int
    partial: bool
    errors: list[str]
    warnings: list[str]


class RunResults(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GET /api/runs/{id}/results (JSON)."""

    run_id: str
    trace_id: str
    state: str
    configs: list[ConfigResult]
    reference: RecordedReference | None
    trace: TraceCoverage | None


class KernelRows(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GET /api/runs/{id}/results/{sim}/kernels (JSON): one page of per-kernel predictions."""

    run_id: str
    sim_id: str
    total: int
    offset: int
    limit: int
    columns: list[str]
    kernels: list[dict[str, str | int | float | bool | None]]
    """One object per kernel, keyed by ``columns`` (null: not known)."""


def _reference(run_id: str) -> dict[str, Any] | None:
    if not is_recorded_run(run_id):
        return None
    info = next(s for s in list_samples() if s.recorded_run_id == run_id)
    ref = load_reference(info.name)
    return {
        "badge": ref.badge, "title": ref.title, "simulator": ref.simulator,
        "kernel_model": ref.kernel_model, "caveats": ref.caveats,
        "configs": [
            {"config": r.config, "hardware": r.hardware, "real_e2e_ms": r.real_mean_e2e_ms,
             "simulated_e2e_ms": r.simulated_mean_e2e_ms, "error_pct": r.error_pct,
             "counterfactual": r.counterfactual, "note": r.note}
            for r in ref.results
        ],
    }


def with_reference(entry: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's config entry with the recorded figures where it has no result files:
    simulated and real mean E2E, the error, and counterfactual only where there is no baseline."""
    row = next((r for r in reference["configs"] if r["config"] == entry["config"]), None)
    if row is None or entry["predicted_e2e_ms"] is not None:
        return entry
    return {**entry, "predicted_e2e_ms": row["simulated_e2e_ms"], "baseline_e2e_ms": row["real_e2e_ms"],
            "error_pct": row["error_pct"], "counterfactual": bool(row["counterfactual"]),
            "model": reference.get("kernel_model"), "calibration": "recorded reference",
            "recorded": True}


RESULT_CSV_COLUMNS = (
    "config", "replica", "sim_id", "state", "predicted_e2e_ms", "baseline_e2e_ms", "error_pct",
    "counterfactual", "gpu_busy_ms", "model", "spec_id", "spec_hash", "calibration", "kernel_count",
)


@routes.get("/api/runs/{run_id}/results")
@doc(tags=("runs",), response=RunResults, content=CSV_CONTENT,
     query={"format": ("json (default) or csv", {"type": "string", "enum": ["json", "csv"]})},
     responses={404: "no such run"})
async def run_results(request: web.Request) -> web.Response:
    """Per configuration and replica: predicted e2e and per-step times, baseline/error, top kernels."""
    run = await _run(request, request.match_info["run_id"])
    fmt = query_choice(request, "format", ("json", "csv"))
    sims = await _sims(request, run)
    completed = [s for s in sims if s.state == "completed"]
    loaded = await asyncio.gather(*(_result(request, run.id, s.id) for s in completed),
                                  return_exceptions=True)
    results = {s.id: r for s, r in zip(completed, loaded, strict=True) if isinstance(r, SimResult)}
    by_config: dict[str, list[SimRecord]] = {c: [] for c in run.configs}
    for s in sims:
        by_config.setdefault(s.config, []).append(s)
    configs = [config_results(c, by_config[c], results) for c in by_config]
    reference = _reference(run.id)
    if reference is not None:
        configs = [with_reference(c, reference) for c in configs]
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(RESULT_CSV_COLUMNS)
        for c in configs:
            for rep in c["replicas"]:
                r = results.get(rep["sim_id"])
                w.writerow([
                    c["config"], rep["replica"], rep["sim_id"], rep["state"],
                    _num(rep["predicted_e2e_ms"]), _num(c["baseline_e2e_ms"]),
                    _num(r.error_pct if r else None), str(c["counterfactual"]).lower(),
                    _num(rep["gpu_busy_ms"]), c["model"] or "", c["spec_id"] or "",
                    c["spec_hash"] or "", c["calibration"] or "", c["kernel_count"] or "",
                ])
        return web.Response(text=out.getvalue(), content_type="text/csv", headers={
            "Content-Disposition": f'attachment; filename="{run.id}-results.csv"'})
    return json_response({"run_id": run.id, "trace_id": run.trace_id, "state": run.state,
                          "configs": configs, "reference": reference,
                          "trace": await _trace_coverage(request, run.trace_id)})


async def _trace_coverage(request: web.Request, trace_id: str) -> dict[str, Any] | None:
    """What of the trace the results cover: kernels prepared of those uploaded, the failed
    ones and why, and the trace's warnings (skipped files, partial bundles)."""
    traces = await request.app[BUS].kv(subjects.KV_TRACES)
    entry = await traces.get(trace_id, TraceRecord)
    if entry is None:
        return None
    t = entry.value
    return {"kernels_total": t.kernels_total, "kernels_prepared": t.kernels_prepared,
            "kernels_failed": t.kernels_failed, "bundle_kernels": t.bundle_kernels,
            "partial": t.kernels_failed > 0, "errors": list(t.errors), "warnings": list(t.warnings)}


def _num(v: float | None) -> str:
    return "" if v is None else repr(float(v))


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
    run = await _run(request, request.match_info["run_id"])
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
    return json_response({"run_id": run.id, "sim_id": sim_id, "total": len(table), "offset": offset,
                          "limit": limit, "columns": list(columns), "kernels": rows})
