"""Serving scenarios: ``POST /api/scenarios``, ``GET /api/scenarios/{id}``, ``GET /api/model-configs``.

Body of ``POST /api/scenarios``: :class:`cascade.serving.requests.ScenarioRequest` (every field
but the model optional): the model (``sim``, ``run`` + ``config``, ``model``, or a
``description``: ``{"config": <bundled name> | {config.json}, "gpu", "tp", "ep", "quant",
"moe_quant", "kv_dtype"}``), the traffic (``arrival`` or ``concurrency``, ``lengths``,
``n_requests`` | ``duration``), the serving setup (``replicas``, ``router``, ``scheduler``,
``kv``), ``slos``, ``capacity_search``, ``seed``, ``include_records``, ``background``.

The unions come from the serving registries (:mod:`cascade.serving.requests`). A body off the
schema is a 400 whose ``field`` names the field (an inline config whose fields a description
reads have the wrong type: ``description.config.<name>``; an unknown GPU: ``unknown_gpu`` with
the closest names); an inline config over :data:`~cascade.serving.description.MAX_CONFIG_BYTES`
is a 413; a body on the schema whose fields cannot go together (``hi < lo``, a capacity search
without an SLO, heads that do not split over ``tp``, weights that leave no KV cache, requests
longer than the model's context window) is a 422 naming the field.

Answer (200): :class:`~cascade.serving.requests.ScenarioAnswer`, with its ``basis`` (described
or traced, the GPU, the LLM calibration and the kernel model's expected error), computed in a
worker thread, never on the event loop. At most :data:`MAX_JOBS` background jobs run per api
instance (then 429).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec
from aiohttp import web

from cascade.errors import (
    CancelledRunError,
    NotFoundError,
    TooManyError,
    UnprocessableError,
    ValidationError,
)
from cascade.gpus import default_registry
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.log import get_logger
from cascade.runs.plan import resolve_config
from cascade.serving.capacity import CapacityResult
from cascade.serving.description import (
    ExampleConfig,
    ServingBasis,
    checked_config,
    describe_serving,
    example_config,
    example_configs,
    kv_engine,
    traced_basis,
)
from cascade.serving.jobs import STALE_AFTER_S, JobRecord, JobView, job_view
from cascade.serving.kvcache import KVConfig
from cascade.serving.requests import (
    SCENARIO_REQUEST_SCHEMA,
    ScenarioAnswer,
    ScenarioRequest,
    async_scheduling,
    build_scenario,
    check_selection,
    compute,
    for_gpu,
    remap_field,
    scenario_answer,
    scheduler_limits,
    traced_kv,
)
from cascade.serving.scenario import Scenario, ScenarioResult
from services.api.appkeys import BUS, get_storage
from services.api.http import doc, json_response, read_json
from services.api.openapi import extend_schema
from services.api.sim_models import ModelEntry, install, sim_models
from services.api.spec_index import install as install_specs
from services.api.spec_index import spec_index

routes = web.RouteTableDef()
_ENCODER = msgspec.json.Encoder()
log = get_logger("cascade.api.scenarios")

#: Scenarios with more requests than this run as background jobs.
JOB_THRESHOLD = 20_000
#: Background scenarios running at once on one api instance (more: 429).
MAX_JOBS = 4
JOB_PREFIX = "scenarios"

_NULL, _NUMBER = {"type": "null"}, {"type": "number"}
extend_schema("LognormalLength", {"oneOf": [
    {"required": ["mean", "sigma"], "properties": {"mean": _NUMBER, "sigma": _NUMBER,
                                                   "median": _NULL, "p90": _NULL}},
    {"required": ["median", "p90"], "properties": {"median": _NUMBER, "p90": _NUMBER,
                                                   "mean": _NULL, "sigma": _NULL}},
]})
SCENARIO_REQUEST = Annotated[ScenarioRequest, msgspec.Meta(extra_json_schema=SCENARIO_REQUEST_SCHEMA)]


class ModelConfigList(msgspec.Struct, frozen=True, kw_only=True):
    """The bundled example model configs a description may name."""

    configs: list[ExampleConfig]


@dataclass(frozen=True)
class Prepared:
    """What a scenario runs on, and the answer's identity."""

    scenario: Scenario
    model: Any
    kv: KVConfig
    basis: ServingBasis
    ids: dict[str, str]
    """model, sim, run, config and trace of the answer."""


async def _prepare(request: web.Request, req: ScenarioRequest, tmpdir: Path) -> Prepared:
    scenario = build_scenario(req, tmpdir)
    if req.description is not None:
        return await _described(request, req, scenario)
    models = sim_models(request.app)
    try:
        if req.sim is not None:
            entry = await models.by_sim(req.sim)
        elif req.run is not None:
            entry = await models.by_run(req.run, req.config)
        else:
            entry = await models.by_model(str(req.model))
    except ValidationError as exc:
        if exc.field not in ("sim", "run", "model"):
            raise
        raise NotFoundError(str(exc)) from None  # a malformed id names nothing that exists
    # as the model's server would: no request longer than its context window
    scenario = msgspec.structs.replace(scenario, max_context_tokens=entry.context_length)
    sm = await models.step_model(entry)
    spec = default_registry().resolve(entry.config)
    scenario = for_gpu(scenario, spec)
    kv = traced_kv(req.kv, spec, entry.config, f"{sm.stored.workload} {entry.trace_id}")
    basis = traced_basis(workload=entry.trace_id, spec_id=entry.config, spec=spec, step_model=sm.model.source,
                         kv=kv, context_tokens=entry.context_length)
    return Prepared(scenario, sm.model, kv, basis, _ids(entry))


def _ids(entry: ModelEntry) -> dict[str, str]:
    return {"model": entry.id, "sim": entry.sim.id, "run": entry.run.id, "config": entry.config,
            "trace": entry.trace_id}


async def _described(request: web.Request, req: ScenarioRequest, scenario: Scenario) -> Prepared:
    """A description's step-time source (timed off the event loop) and KV cache."""
    d = req.description
    assert d is not None
    name = d.config if isinstance(d.config, str) else ""
    config = example_config(name) if name else checked_config(d.config, "description.config")
    spec = resolve_config(d.gpu, custom=spec_index(request.app).specs(), where="description.gpu").spec
    scenario = for_gpu(scenario, spec)
    tokens, seqs = scheduler_limits(scenario)
    kv = req.kv
    prompt = getattr(req.lengths.prompt, "tokens", req.lengths.prompt)
    try:
        served = await asyncio.to_thread(
            describe_serving, config, spec, quant=d.quant, moe_quant=d.moe_quant, kv_dtype=d.kv_dtype, tp=d.tp,
            ep=d.ep, dp=d.dp, max_num_batched_tokens=tokens, max_num_seqs=seqs,
            gpu_memory_utilization=kv.gpu_memory_utilization,  # type: ignore[attr-defined]
            block_size=kv.block_size, num_gpu_blocks_override=kv.num_gpu_blocks_override,  # type: ignore[attr-defined]
            label=name or "inline config", typical_prompt=prompt if isinstance(prompt, int) else 1024,
            typical_batch=req.concurrency or 64, async_scheduling=async_scheduling(req),
            engine=kv_engine(scenario.scheduler))
        scenario = served.serve(scenario)
    except ValidationError as exc:
        raise _description_field(exc) from None
    ids = {"model": f"described/{name or 'config'}", "sim": "", "run": "", "config": spec.id, "trace": ""}
    return Prepared(scenario, served.cost, served.kv, served.basis, ids)


_SETTINGS = ("quant", "moe_quant", "kv_dtype", "tp", "ep", "dp")


def _description_field(exc: ValidationError) -> UnprocessableError:
    """A description the schema let through that cannot be served as given (422): its field
    under ``description`` (a setting) or ``description.config`` (a config field)."""
    fld = exc.field or ""
    if fld == "kv_config":
        return remap_field(exc)
    message = str(exc)[len(fld) + 2:] if fld and str(exc).startswith(f"{fld}: ") else str(exc)
    where = f"description.{fld}" if fld in _SETTINGS else f"description.config.{fld}" if fld else "description"
    return UnprocessableError(message, field=where)


def _work(req: ScenarioRequest, scenario: Scenario) -> float:
    """Requests to simulate (times 10 for a capacity search): large ones run as jobs."""
    n: float | None = scenario.n_requests
    if n is None and scenario.concurrency is not None:
        n = 10.0 * scenario.concurrency
    if n is None:
        rate = scenario.arrival.get("rate") if isinstance(scenario.arrival, dict) else getattr(
            scenario.arrival, "rate", None)
        dur = scenario.duration_s
        n = float(rate) * dur if rate and dur else 1000.0
    return n * (10 if req.capacity_search is not None else 1)


def response_body(prep: Prepared, result: ScenarioResult, cap: CapacityResult | None) -> ScenarioAnswer:
    """The 200 answer (and a completed job's ``response``)."""
    return scenario_answer(**prep.ids, result=result, cap=cap, basis=prep.basis)


@routes.get("/api/model-configs")
@doc(response=ModelConfigList, tags=("scenarios",))
async def get_model_configs(request: web.Request) -> web.Response:
    """The bundled example model configs (config.json) a scenario's description may name."""
    return json_response(ModelConfigList(configs=await asyncio.to_thread(example_configs)))


@routes.post("/api/scenarios")
@doc(request=SCENARIO_REQUEST, response=ScenarioAnswer, bodies={202: JobView}, tags=("scenarios",),
     responses={202: "queued as a background job",
                400: "the body does not match the schema, or names an unknown GPU (with the closest)",
                404: "unknown sim/run/model", 409: "the sim has no per-step results to serve as a request model",
                413: "an inline model config over its size limit",
                422: "valid fields that cannot go together (the field is named)",
                429: f"{MAX_JOBS} background scenarios already running on this api instance"})
async def post_scenario(request: web.Request) -> web.Response:
    """Simulate serving traffic on a finished sim's replicas or a described model; metrics as `vllm bench serve` names them."""
    req = await read_json(request, ScenarioRequest)
    check_selection(req)
    tmp: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(prefix="cascade-scenario-")
    assert tmp is not None
    try:
        prep = await _prepare(request, req, Path(tmp.name))
        if req.background or _work(req, prep.scenario) > JOB_THRESHOLD:
            running = len(request.app[JOBS])
            if running >= MAX_JOBS:
                raise TooManyError(f"{running} background scenarios are running on this api "
                                   "instance; retry when one has finished", limit=MAX_JOBS)
            job = await _start_job(request.app, req, prep, tmp)
            tmp = None  # the job owns it now
            return json_response(job_view(job, time.time(), stale_after_s=STALE_AFTER_S), status=202,
                                 headers={"Location": f"/api/scenarios/{job.id}"})

        def answer() -> bytes:
            result, cap = compute(req, prep.scenario, prep.model, prep.kv)
            return _ENCODER.encode(response_body(prep, result, cap))

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


async def _start_job(app: web.Application, req: ScenarioRequest, prep: Prepared,
                     tmp: tempfile.TemporaryDirectory[str]) -> JobRecord:
    bus = app[BUS]
    meta = await bus.kv(subjects.KV_META)
    now = time.time()
    job = JobRecord(id=f"scn-{uuid.uuid4().hex[:12]}", created_at=now, updated_at=now,
                    model=prep.ids["model"], sim=prep.ids["sim"], total=prep.scenario.n_requests or 0,
                    capacity_search=req.capacity_search is not None, instance=str(id(app)))
    await meta.create(_job_key(job.id), job)
    task = asyncio.create_task(_run_job(app, job, req, prep, tmp),
                               name=f"scenario:{job.id}")
    app[JOBS].add(task)
    task.add_done_callback(app[JOBS].discard)
    return job


async def _run_job(app: web.Application, job: JobRecord, req: ScenarioRequest, prep: Prepared,
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
        result, cap = await asyncio.to_thread(compute, req, prep.scenario, prep.model, prep.kv, progress)
        body = response_body(prep, result, cap)
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
    view: dict[str, Any] = msgspec.to_builtins(job_view(entry.value, time.time(), stale_after_s=STALE_AFTER_S))
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
    install_specs(app)
    app[JOBS] = set()
    app.cleanup_ctx.append(_jobs_ctx)
    from services.api.samples import install_sample_loader

    install_sample_loader(app)


__all__ = ["routes", "setup"]
