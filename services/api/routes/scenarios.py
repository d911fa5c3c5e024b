"""Serving scenarios on finished sims: ``POST /api/scenarios``, ``GET /api/scenarios/{id}``.

Body of ``POST /api/scenarios`` (every field but the model is optional)::

    {"sim": "<sim id>"} | {"run": "<run id>", "config": "SM90_H100"} | {"model": "cascade/<trace>/<config>"},
    "arrival": {"pattern": "poisson"|"gamma"|"constant"|"burst"|"trace", "rate": 20, "cv": 2,
                "csv": "arrived_at,prompt_tokens,output_tokens\\n..."   # trace replay, inline},
    "lengths": {"prompt": {"kind": "fixed", "tokens": 128} | {"kind": "uniform", "lo": 1, "hi": 9}
                          | {"kind": "lognormal", "median": 180, "p90": 600} | {"kind": "trace"} | 128,
                "output": (same)},
    "n_requests": 1000 | "duration": 60,
    "replicas": 4, "router": "round_robin" | "least_outstanding",
    "scheduler": {"name": "vllm", "settings": {"max_num_batched_tokens": 8192, ...}},
    "slos": {"ttft_ms": 200, "tpot_ms": 50, "e2e_ms": 2000, "attainment": 0.99},
    "seed": 0,
    "capacity_search": {"kind": "max_rate" | "min_replicas", "rel_tol": 0.02, "max_replicas": 64},
    "kv": {"model": "opt-125m" | {"layers", "kv_heads", "head_dim", "weights_bytes"},
           "gpu_memory_utilization": 0.9, "block_size": 16, "num_gpu_blocks_override": null},
    "include_records": false, "background": false}

One spelling per field, exactly as the OpenAPI document describes it (the request Structs
below; their settings are the serving library's config fields): a body off the schema is a
400 whose ``field`` names the field; one on it whose fields cannot go together (``hi < lo``,
trace lengths without a trace arrival, a capacity search without an SLO, both ``duration``
and ``n_requests``, more arrivals within ``duration`` than a scenario may simulate, a KV
cache that does not fit, drawn requests longer than the trace's model context window, as
its server would refuse them) is a 422 naming the field.

Answer (200): ``{"model", "sim", "run", "config", "trace", "result": <ScenarioResult>,
"summary": "<vllm bench serve-like text>", "capacity": <CapacityResult or null>}``, computed
in a worker thread (the simulation, the answer's builtins and its JSON), never on the event
loop. At most :data:`MAX_JOBS` background jobs run per api instance (then 429).

Large scenarios (``n_requests`` over :data:`JOB_THRESHOLD`, a capacity search over
:data:`JOB_THRESHOLD` / 10 requests, or ``"background": true``) run as a job: 202
``{"id", "state", "progress", ...}``; ``GET /api/scenarios/{id}`` reports progress and,
once completed, the same answer under ``response``. Jobs live in KV (``cascade-meta``,
key ``scenarios.{id}``; the answer in S3 at ``scenarios/{id}/response.json``) so every
api replica agrees. A job whose api instance stopped is reported failed after
:data:`STALE_AFTER_S` without a heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from aiohttp import web

from cascade.errors import (
    CancelledRunError,
    ConflictError,
    NotFoundError,
    TooManyError,
    UnprocessableError,
    ValidationError,
)
from cascade.gpus import get_gpu
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.log import get_logger
from cascade.serving.arrivals import (
    Burst,
    Constant,
    Fixed,
    FromTrace,
    Gamma,
    LogNormal,
    Poisson,
    Trace,
    Uniform,
    rate_of,
)
from cascade.serving.capacity import CapacityResult, max_rate, min_replicas
from cascade.serving.kv import MODEL_SHAPES, KVConfig, ModelShape
from cascade.serving.report import format_summary
from cascade.serving.routers import LeastOutstanding, RoundRobin
from cascade.serving.scenario import (
    MAX_REPLICAS,
    MAX_REQUESTS,
    Scenario,
    ScenarioResult,
    expected_arrivals,
    resolve,
    run_scenario,
)
from cascade.serving.schedulers import Static, Vllm
from services.api.http import doc, json_response, read_json
from services.api.keys import BUS, get_storage
from services.api.openapi import extend_schema
from services.api.sim_models import ModelEntry, install, sim_models

routes = web.RouteTableDef()
_ENCODER = msgspec.json.Encoder()
log = get_logger("cascade.api.scenarios")

#: Scenarios with more requests than this run as background jobs.
JOB_THRESHOLD = 20_000
#: A running job without a heartbeat for this long is reported failed.
STALE_AFTER_S = 60.0
#: Background scenarios running at once on one api instance (more: 429).
MAX_JOBS = 4
#: Largest inline trace CSV accepted (bytes).
MAX_TRACE_CSV = 8 * 1024 * 1024
JOB_PREFIX = "scenarios"

Pos = Annotated[int, msgspec.Meta(ge=1)]
PosF = Annotated[float, msgspec.Meta(gt=0)]


def _settings_struct(name: str, library: type[msgspec.Struct], *, tag: str | None = None,
                     tag_field: str | None = None, drop: tuple[str, ...] = (),
                     add: tuple[tuple[Any, ...], ...] = ()) -> type[msgspec.Struct]:
    """A request Struct with the fields of a serving-library config Struct (one definition)."""
    fields: list[Any] = []
    for f in msgspec.structs.fields(library):
        if f.name in drop:
            continue
        if f.required:
            fields.append((f.name, f.type))
        else:
            default = f.default if f.default is not msgspec.NODEFAULT else msgspec.field(
                default_factory=f.default_factory)
            fields.append((f.name, f.type, default))
    fields.extend(add)
    return msgspec.defstruct(name, fields, kw_only=True, frozen=True, forbid_unknown_fields=True,
                             tag=tag, tag_field=tag_field, module=__name__)


# ``arrival``: tagged by ``pattern``, the serving library's settings; a trace is sent inline.
PoissonArrival = _settings_struct("PoissonArrival", Poisson, tag="poisson", tag_field="pattern")
GammaArrival = _settings_struct("GammaArrival", Gamma, tag="gamma", tag_field="pattern")
ConstantArrival = _settings_struct("ConstantArrival", Constant, tag="constant", tag_field="pattern")
BurstArrival = _settings_struct("BurstArrival", Burst, tag="burst", tag_field="pattern")
TraceArrival = _settings_struct(
    "TraceArrival", Trace, tag="trace", tag_field="pattern", drop=("path",),
    add=(("csv", Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TRACE_CSV,
                                             pattern=r"\S",
                                             description="arrived_at,prompt_tokens,output_tokens rows")]),))
Arrival: Any = (PoissonArrival | GammaArrival | ConstantArrival
                | BurstArrival | TraceArrival)

# ``lengths.prompt`` / ``lengths.output``: a token count or a length law tagged by ``kind``.
FixedLength = _settings_struct("FixedLength", Fixed, tag="fixed", tag_field="kind")
UniformLength = _settings_struct("UniformLength", Uniform, tag="uniform", tag_field="kind")
LogNormalLength = _settings_struct("LogNormalLength", LogNormal, tag="lognormal", tag_field="kind")
TraceLength = _settings_struct("TraceLength", FromTrace, tag="trace", tag_field="kind")
_NULL, _NUMBER = {"type": "null"}, {"type": "number"}
extend_schema("LogNormalLength", {"oneOf": [
    {"required": ["mean", "sigma"], "properties": {"mean": _NUMBER, "sigma": _NUMBER,
                                                   "median": _NULL, "p90": _NULL}},
    {"required": ["median", "p90"], "properties": {"median": _NUMBER, "p90": _NUMBER,
                                                   "mean": _NULL, "sigma": _NULL}},
]})
Length: Any = (Pos | FixedLength | UniformLength
               | LogNormalLength | TraceLength | None)

# ``scheduler``: a name, or ``{"name", "settings"}`` with that scheduler's settings.
VllmSettings = _settings_struct("VllmSettings", Vllm)
StaticSettings = _settings_struct("StaticSettings", Static)


class VllmScheduler(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
                    tag="vllm", tag_field="name"):
    """vLLM's scheduler (continuous batching, chunked prefill) and its settings."""

    settings: VllmSettings = msgspec.field(default_factory=VllmSettings)  # type: ignore[valid-type]


class StaticScheduler(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
                      tag="static", tag_field="name"):
    """Fixed batches run to completion, and their settings."""

    settings: StaticSettings = msgspec.field(default_factory=StaticSettings)  # type: ignore[valid-type]


RouterName = Literal["round_robin", "least_outstanding"]
RoundRobinRouter = _settings_struct("RoundRobinRouter", RoundRobin, tag="round_robin", tag_field="kind")
LeastOutstandingRouter = _settings_struct("LeastOutstandingRouter", LeastOutstanding,
                                          tag="least_outstanding", tag_field="kind")
ModelShapeName = Literal[tuple(sorted(MODEL_SHAPES))]  # type: ignore[valid-type]
ModelShapeSpec = _settings_struct("ModelShapeSpec", ModelShape)


class SloSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Per-request SLOs in ms (unset ones are not checked)."""

    ttft_ms: PosF | None = None
    tpot_ms: PosF | None = None
    e2e_ms: PosF | None = None
    attainment: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.99


class CapacitySpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What to search: the highest rate, or the fewest replicas, meeting the SLOs."""

    kind: Literal["max_rate", "min_replicas"] = "max_rate"
    rel_tol: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.02
    max_probes: Annotated[int, msgspec.Meta(ge=2, le=60)] = 30
    max_replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1024


class KVSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """KV-cache sizing of a replica: model shape and vLLM memory settings."""

    model: ModelShapeName | ModelShapeSpec | None = None  # type: ignore[valid-type]
    """A name in MODEL_SHAPES or {layers, kv_heads, head_dim, weights_bytes, kv_dtype_bytes};
    default: recognised from the trace's workload / name."""
    gpu_memory_utilization: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.9
    block_size: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 16
    num_gpu_blocks_override: Annotated[int, msgspec.Meta(ge=1, le=2**40)] | None = None


class LengthsSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Prompt and output length laws (default: from the trace when replaying one, else 128)."""

    prompt: Length = None
    output: Length = None


class ScenarioRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/scenarios (see the module doc)."""

    sim: str | None = None
    run: str | None = None
    config: str | None = None
    model: str | None = None
    arrival: Arrival = msgspec.field(default_factory=lambda: PoissonArrival(rate=1.0))
    lengths: LengthsSpec = LengthsSpec()
    n_requests: Annotated[int, msgspec.Meta(ge=1, le=MAX_REQUESTS)] | None = None
    duration: PosF | None = None
    duration_s: PosF | None = None
    replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1
    router: RouterName | RoundRobinRouter | LeastOutstandingRouter = "round_robin"  # type: ignore[valid-type]
    scheduler: Literal["vllm", "static"] | VllmScheduler | StaticScheduler = msgspec.field(
        default_factory=VllmScheduler)
    """A scheduler name, or {"name": "vllm"|"static", "settings": {...}}."""
    slos: SloSpec = SloSpec()
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0
    capacity_search: CapacitySpec | None = None
    kv: KVSpec = KVSpec()
    include_records: bool = False
    background: bool = False


class JobRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A background scenario, as kept in KV."""

    id: str
    state: Literal["queued", "running", "completed", "failed"] = "queued"
    created_at: float
    updated_at: float
    done: int = 0
    total: int = 0
    percent: float = 0.0
    model: str = ""
    sim: str = ""
    capacity_search: bool = False
    probes: int = 0
    error: str | None = None
    response_key: str | None = None
    instance: str = ""


class ScenarioAnswer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The 200 answer of POST /api/scenarios (and a completed job's ``response``)."""

    model: str
    sim: str
    run: str
    config: str
    trace: str
    result: ScenarioResult
    capacity: CapacityResult | None
    """The capacity search's outcome (null without ``capacity_search``)."""
    summary: str
    """The metrics as text, as `vllm bench serve` prints them."""


class JobProgress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    done: int
    total: int
    percent: float
    probes: int


class JobView(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A background scenario: 202 answer of POST /api/scenarios, GET /api/scenarios/{id}."""

    id: str
    state: Literal["queued", "running", "completed", "failed"]
    progress: JobProgress
    model: str
    sim: str
    capacity_search: bool
    created_at: float
    updated_at: float
    error: str | None
    url: str
    response: ScenarioAnswer | msgspec.UnsetType = msgspec.UNSET
    """The answer, once completed (GET only)."""


# ---- request -> Scenario --------------------------------------------------------------------

def _law(value: Any) -> Any:
    """A request Struct as the serving library's ``{"kind": ...}`` object."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return {"kind": "fixed", "tokens": value}
    return msgspec.to_builtins(value)


def _arrival(raw: msgspec.Struct, tmpdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(raw)
    kind = out.pop("pattern")
    if isinstance(raw, TraceArrival):
        path = tmpdir / "arrivals.csv"
        path.write_text(out.pop("csv"))
        out["path"] = str(path)
    return {"kind": kind, **out}


def _scheduler(raw: Any) -> Any:
    if isinstance(raw, str):
        return raw
    return {"kind": type(raw).__struct_config__.tag, **msgspec.to_builtins(raw.settings)}


def _remap_field(exc: ValidationError) -> UnprocessableError:
    fld = exc.field or ""
    head = fld.split(".", 1)[0]
    mapped = {"prompt": "lengths.prompt", "output": "lengths.output", "slo": "slos",
              "duration_s": "duration"}.get(head)
    message = str(exc)
    if message.startswith(f"{fld}: "):
        message = message[len(fld) + 2:]
    new = mapped + fld[len(head):] if mapped is not None else (fld or None)
    return UnprocessableError(message, field=new)


def build_scenario(req: ScenarioRequest, tmpdir: Path) -> Scenario:
    """The serving library's Scenario for a decoded request.

    The body already matches the schema; what is left are rules across fields (both
    ``duration`` and ``n_requests``, ``hi < lo``, trace lengths without a trace, a capacity
    search without an SLO): :class:`UnprocessableError` (422) naming the field."""
    if req.duration is not None and req.duration_s is not None:
        raise UnprocessableError("give duration or duration_s, not both", field="duration")
    raw = {
        "arrival": _arrival(req.arrival, tmpdir),
        "prompt": _law(req.lengths.prompt),
        "output": _law(req.lengths.output),
        "n_requests": req.n_requests,
        "duration_s": req.duration if req.duration is not None else req.duration_s,
        "replicas": req.replicas,
        "router": _law(req.router),
        "scheduler": _scheduler(req.scheduler),
        "slo": msgspec.to_builtins(req.slos),
        "seed": req.seed,
        "include_records": req.include_records,
    }
    raw = {k: v for k, v in raw.items() if v is not None}
    try:
        rs = resolve(raw)
    except ValidationError as exc:
        raise _remap_field(exc) from None
    expected = expected_arrivals(rs)
    if expected is not None and expected > MAX_REQUESTS:
        raise UnprocessableError(f"about {expected:.3g} requests arrive within it at "
                                 f"{rate_of(rs.arrival):g}/s, more than {MAX_REQUESTS}",
                                 field="duration")
    if req.capacity_search is not None and rs.scenario.slo.is_empty():
        raise UnprocessableError("a capacity search needs at least one SLO (ttft_ms, tpot_ms or e2e_ms)",
                                 field="slos")
    return rs.scenario


def _shape(req: KVSpec, entry: ModelEntry, workload: str) -> ModelShape:
    value = req.model
    if isinstance(value, str):
        return MODEL_SHAPES[value]
    if value is not None:
        return msgspec.convert(msgspec.to_builtins(value), ModelShape)
    text = f"{workload} {entry.trace_id}".lower()
    for name in sorted(MODEL_SHAPES, key=len, reverse=True):
        if name in text:
            return MODEL_SHAPES[name]
    raise UnprocessableError(
        f"the model shape of trace {entry.trace_id} is not known, so its KV cache cannot be sized: "
        f"give kv.model as one of {', '.join(sorted(MODEL_SHAPES))} or as "
        "{layers, kv_heads, head_dim, weights_bytes}", field="kv.model")


def kv_config(req: KVSpec, entry: ModelEntry, workload: str) -> KVConfig:
    """KV sizing for a replica of ``entry``'s GPU config."""
    shape = _shape(req, entry, workload)
    try:
        spec = get_gpu(entry.config)
        memory = int(spec.memory_gb * 1e9)
    except Exception as exc:  # noqa: BLE001 - custom specs: the user gives blocks instead
        if req.num_gpu_blocks_override is None:
            raise UnprocessableError(f"GPU config {entry.config!r} has no known memory size ({exc}); "
                                     "give kv.num_gpu_blocks_override", field="kv") from None
        memory = 1
    cfg = KVConfig(model=shape, gpu_memory_bytes=max(1, memory),
                   gpu_memory_utilization=req.gpu_memory_utilization, block_size=req.block_size,
                   num_gpu_blocks_override=req.num_gpu_blocks_override)
    try:
        cfg.num_blocks()  # raises a ValidationError when nothing is left for the KV cache
    except ValidationError as exc:
        raise _remap_field(exc) from None
    return cfg


# ---- running ---------------------------------------------------------------------------------

def _check_selection(req: ScenarioRequest) -> None:
    """Exactly one of sim, run (+ config) or model (the schema's ``oneOf``): else a 400."""
    given = [n for n in ("sim", "run", "model") if getattr(req, n) is not None]
    if len(given) != 1:
        raise ValidationError("give exactly one of sim, run (+ config) or model", field="sim")
    if req.config is not None and req.run is None:
        raise ValidationError("config goes with run", field="config")


async def _entry(request: web.Request, req: ScenarioRequest) -> ModelEntry:
    _check_selection(req)
    models = sim_models(request.app)
    try:
        if req.sim is not None:
            return await models.by_sim(req.sim)
        if req.run is not None:
            return await models.by_run(req.run, req.config)
        assert req.model is not None
        return await models.by_model(req.model)
    except ValidationError as exc:
        if exc.field not in ("sim", "run", "model"):
            raise
        raise NotFoundError(str(exc)) from None  # a malformed id names nothing that exists


def _work(req: ScenarioRequest, scenario: Scenario) -> float:
    """Requests to simulate (times 10 for a capacity search): large ones run as jobs."""
    n: float | None = scenario.n_requests
    if n is None:
        rate = scenario.arrival.get("rate") if isinstance(scenario.arrival, dict) else getattr(
            scenario.arrival, "rate", None)
        dur = scenario.duration_s
        n = float(rate) * dur if rate and dur else 1000.0
    return n * (10 if req.capacity_search is not None else 1)


def compute(req: ScenarioRequest, scenario: Scenario, model: Any, kv: KVConfig,
            progress: Any = None) -> tuple[ScenarioResult, CapacityResult | None]:
    """Run the scenario (or the capacity search); CPU-bound, call in a thread.

    A rule only the run can check (no request arrives within ``duration``, too many
    arrive) is an :class:`UnprocessableError` naming the field."""
    try:
        return _compute(req, scenario, model, kv, progress)
    except UnprocessableError:
        raise
    except ValidationError as exc:
        raise _remap_field(exc) from None


def _compute(req: ScenarioRequest, scenario: Scenario, model: Any, kv: KVConfig,
             progress: Any = None) -> tuple[ScenarioResult, CapacityResult | None]:
    if req.capacity_search is None:
        return run_scenario(scenario, model, kv, progress=progress), None
    cs = req.capacity_search

    def probe(p: Any) -> None:
        if progress is not None:
            progress(-1, -1)

    if cs.kind == "max_rate":
        cap = max_rate(scenario, model, kv, rel_tol=cs.rel_tol, max_probes=cs.max_probes, progress=probe)
    else:
        cap = min_replicas(scenario, model, kv, max_replicas=cs.max_replicas, progress=probe)
    if cap.result is None:
        return run_scenario(scenario, model, kv), cap
    return cap.result, cap


def response_body(entry: ModelEntry, result: ScenarioResult, cap: CapacityResult | None) -> dict[str, Any]:
    """The 200 answer (and a completed job's ``response``)."""
    summary = format_summary(result)
    if cap is not None:
        extra = [f"{' Capacity search ':=^50}"]
        if cap.found and cap.rate is not None:
            extra.append(f"{'Highest rate meeting the SLOs (req/s):':<40} {cap.rate:<10.3f}")
        elif cap.found and cap.replicas is not None:
            extra.append(f"{'Fewest replicas meeting the SLOs:':<40} {cap.replicas:<10}")
        else:
            extra.append("No probed point met the SLOs.")
        extra.append(f"{'Probes:':<40} {len(cap.probes):<10}")
        summary = summary + "\n" + "\n".join(extra)
    header = f"Model: {entry.id} (sim {entry.sim.id}, config {entry.config})"
    if result.extrapolated:
        header += "\nNOTE: step shapes outside the step model's calibration range (extrapolated)."
    return {"model": entry.id, "sim": entry.sim.id, "run": entry.run.id, "config": entry.config,
            "trace": entry.trace_id, "result": msgspec.to_builtins(result),
            "capacity": msgspec.to_builtins(cap) if cap is not None else None,
            "summary": header + "\n" + summary}


async def _prepare(request: web.Request, req: ScenarioRequest, tmpdir: Path
                   ) -> tuple[ModelEntry, Scenario, Any, KVConfig]:
    _check_selection(req)
    scenario = build_scenario(req, tmpdir)
    entry = await _entry(request, req)
    # as the model's server would: no request longer than its context window
    scenario = msgspec.structs.replace(scenario, max_context_tokens=entry.context_length)
    models = sim_models(request.app)
    sm = await models.step_model(entry)
    kv = kv_config(req.kv, entry, sm.stored.workload)
    return entry, scenario, sm.model, kv


def _one_of(name: str) -> dict[str, Any]:
    others = [n for n in ("sim", "run", "model") if n != name]
    props: dict[str, Any] = {name: {"type": "string"}, **{n: {"type": "null"} for n in others}}
    if name != "run":
        props["config"] = {"type": "null"}
    return {"required": [name], "properties": props}


_ANY_SLO = {"anyOf": [{"required": [name], "properties": {name: {"type": "number"}}}
                      for name in ("ttft_ms", "tpot_ms", "e2e_ms")]}
#: The request schema also says that exactly one of sim, run (+ config) or model is given,
#: and that a capacity search names at least one SLO.
SCENARIO_REQUEST = Annotated[ScenarioRequest, msgspec.Meta(extra_json_schema={
    "oneOf": [_one_of("sim"), _one_of("run"), _one_of("model")],
    "if": {"required": ["capacity_search"], "properties": {"capacity_search": {"type": "object"}}},
    "then": {"required": ["slos"], "properties": {"slos": _ANY_SLO}}})]


@routes.post("/api/scenarios")
@doc(request=SCENARIO_REQUEST, response=ScenarioAnswer, bodies={202: JobView}, tags=("scenarios",),
     responses={202: "queued as a background job", 400: "the body does not match the schema",
                404: "unknown sim/run/model",
                409: "the sim has no per-step results to serve as a request model",
                422: "valid fields that cannot go together (the field is named)",
                429: f"{MAX_JOBS} background scenarios already running on this api instance"})
async def post_scenario(request: web.Request) -> web.Response:
    """Simulate serving traffic on replicas of a finished sim; metrics as `vllm bench serve` names them."""
    req = await read_json(request, ScenarioRequest)
    tmp: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(prefix="cascade-scenario-")
    assert tmp is not None
    try:
        entry, scenario, model, kv = await _prepare(request, req, Path(tmp.name))
        if req.background or _work(req, scenario) > JOB_THRESHOLD:
            running = len(request.app[JOBS])
            if running >= MAX_JOBS:
                raise TooManyError(f"{running} background scenarios are running on this api "
                                   "instance; retry when one has finished", limit=MAX_JOBS)
            job = await _start_job(request.app, req, entry, scenario, model, kv, tmp)
            tmp = None  # the job owns it now
            return json_response(_job_view(job), status=202,
                                 headers={"Location": f"/api/scenarios/{job.id}"})

        def answer() -> bytes:
            result, cap = compute(req, scenario, model, kv)
            return _ENCODER.encode(response_body(entry, result, cap))

        # The simulation, the answer's builtins and its JSON: all off the event loop.
        body = await asyncio.to_thread(answer)
        return web.Response(body=body, content_type="application/json")
    finally:
        if tmp is not None:
            tmp.cleanup()


# ---- jobs -------------------------------------------------------------------------------------

JOBS: web.AppKey[set[asyncio.Task[None]]] = web.AppKey("scenario_jobs", set)


def _job_key(job_id: str) -> str:
    return subjects.kv_key(JOB_PREFIX, job_id)


def _response_key(job_id: str) -> str:
    return f"{JOB_PREFIX}/{job_id}/response.json"


def _job_view(job: JobRecord) -> dict[str, Any]:
    state = job.state
    error = job.error
    if state in ("queued", "running") and time.time() - job.updated_at > STALE_AFTER_S:
        state = "failed"
        error = (f"no progress for {STALE_AFTER_S:g} s: the api instance running it stopped; "
                 "post the scenario again")
    return {"id": job.id, "state": state, "progress": {"done": job.done, "total": job.total,
                                                       "percent": job.percent, "probes": job.probes},
            "model": job.model, "sim": job.sim, "capacity_search": job.capacity_search,
            "created_at": job.created_at, "updated_at": job.updated_at, "error": error,
            "url": f"/api/scenarios/{job.id}"}


async def _start_job(app: web.Application, req: ScenarioRequest, entry: ModelEntry,
                     scenario: Scenario, model: Any, kv_cfg: KVConfig,
                     tmp: tempfile.TemporaryDirectory[str]) -> JobRecord:
    bus = app[BUS]
    meta = await bus.kv(subjects.KV_META)
    now = time.time()
    job = JobRecord(id=f"scn-{uuid.uuid4().hex[:12]}", created_at=now, updated_at=now,
                    model=entry.id, sim=entry.sim.id, total=scenario.n_requests or 0,
                    capacity_search=req.capacity_search is not None, instance=str(id(app)))
    await meta.create(_job_key(job.id), job)
    task = asyncio.create_task(_run_job(app, job, req, entry, scenario, model, kv_cfg, tmp),
                               name=f"scenario:{job.id}")
    app[JOBS].add(task)
    task.add_done_callback(app[JOBS].discard)
    return job


async def _run_job(app: web.Application, job: JobRecord, req: ScenarioRequest, entry: ModelEntry,
                   scenario: Scenario, model: Any, kv_cfg: KVConfig,
                   tmp: tempfile.TemporaryDirectory[str]) -> None:
    meta = await app[BUS].kv(subjects.KV_META)
    loop = asyncio.get_running_loop()
    state = {"done": 0, "total": job.total, "probes": 0}
    finished = asyncio.Event()
    stop = threading.Event()

    def progress(done: int, total: int) -> None:
        if stop.is_set():
            raise CancelledRunError(f"scenario {job.id} stopped with the api")
        if done < 0:
            state["probes"] += 1
        else:
            state["done"], state["total"] = done, total

    async def beat() -> None:
        while not finished.is_set():
            await _update(meta, job.id, state="running", done=state["done"], total=state["total"],
                          probes=state["probes"],
                          percent=100.0 * state["done"] / state["total"] if state["total"] else 0.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), 1.0)

    beater = loop.create_task(beat())
    try:
        result, cap = await asyncio.to_thread(compute, req, scenario, model, kv_cfg, progress)
        body = response_body(entry, result, cap)
        key = _response_key(job.id)
        await get_storage(app).put_bytes(key, msgspec.json.encode(body), content_type="application/json")
        finished.set()
        await beater
        await _update(meta, job.id, state="completed", done=result.completed, total=result.completed,
                      percent=100.0, probes=state["probes"], response_key=key)
    except asyncio.CancelledError:
        stop.set()  # the worker thread ends at its next progress report
        finished.set()
        await _update(meta, job.id, state="failed", error="the api stopped while the scenario ran")
        raise
    except Exception as exc:  # noqa: BLE001 - reported on the job
        finished.set()
        log.warning("scenario job failed", job=job.id, error=str(exc))
        await _update(meta, job.id, state="failed", error=str(exc) or type(exc).__name__)
    finally:
        finished.set()
        beater.cancel()
        with contextlib.suppress(BaseException):
            await beater
        tmp.cleanup()


async def _update(meta: Any, job_id: str, **changes: Any) -> None:
    def change(cur: JobRecord | None) -> JobRecord | None:
        if cur is None or cur.state in ("completed", "failed"):
            return None
        return msgspec.structs.replace(cur, updated_at=time.time(), **changes)

    with contextlib.suppress(Exception):
        await meta.mutate(_job_key(job_id), JobRecord, change)


@routes.get("/api/scenarios/{id}")
@doc(tags=("scenarios",), response=JobView, responses={404: "unknown scenario job"})
async def get_scenario(request: web.Request) -> web.Response:
    """A background scenario's progress, and its answer once completed (under ``response``)."""
    job_id = request.match_info["id"]
    try:
        check_token(job_id, "id")
    except ValidationError:
        raise NotFoundError(f"no scenario job {job_id[:80]!r}") from None
    meta = await request.app[BUS].kv(subjects.KV_META)
    entry = await meta.get(_job_key(job_id), JobRecord)
    if entry is None:
        raise NotFoundError(f"no scenario job {job_id!r}")
    view = _job_view(entry.value)
    if entry.value.state == "completed" and entry.value.response_key:
        data = await get_storage(request.app).get_bytes(entry.value.response_key, max_bytes=512 * 1024 * 1024)
        view["response"] = await asyncio.to_thread(msgspec.json.decode, data)
    return json_response(view)


async def _jobs_ctx(app: web.Application) -> Any:
    yield
    jobs: set[asyncio.Task[None]] = app[JOBS]
    tasks = list(jobs)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task


def setup(app: web.Application) -> None:
    """Model index, background-job bookkeeping and the sample loader (unless CASCADE_SAMPLES=false)."""
    install(app)
    app[JOBS] = set()
    app.cleanup_ctx.append(_jobs_ctx)
    from services.api.samples import install_sample_loader

    install_sample_loader(app)


__all__ = ["ConflictError", "routes", "setup"]
