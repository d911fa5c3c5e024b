"""A serving scenario as a request states it (``POST /api/scenarios``), and its answer.

The request's plug-in unions are built from the serving registries, so a pattern, length
law, router or scheduler registered there is accepted here with its own settings and no
second list: arrivals (:data:`~cascade.serving.arrivals.ARRIVALS`, tagged by ``pattern``, a
trace sent inline as ``csv``), lengths (:data:`~cascade.serving.arrivals.LENGTHS`, tagged by
``kind``, or a token count), routers (:data:`~cascade.serving.routers.ROUTERS`, a name or
``{"kind"}``) and schedulers (:data:`~cascade.serving.sim.SCHEDULERS`, a name or
``{"name", "settings"}``). SLOs are the library's :class:`~cascade.serving.metrics.Slo`; the
KV sizing takes :class:`~cascade.serving.kvcache.KVConfig`'s settings.

The model is a finished simulation (``sim``, ``run`` + ``config``, ``model``) or a
``description``: a config.json (a bundled example by name, or the object itself), a GPU, TP /
EP and the precision, as ``cascade scenario --hf-config`` takes them
(:mod:`cascade.serving.description`).

:func:`build_scenario` turns a decoded request into the library's :class:`Scenario`; rules
across fields are :class:`~cascade.errors.UnprocessableError` (422) naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from cascade.errors import UnprocessableError, ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.llm.describe import KV_DTYPES, QUANTS
from cascade.serving.arrivals import ARRIVALS, LENGTHS, Trace, rate_of
from cascade.serving.capacity import CapacityResult, max_rate, min_replicas
from cascade.serving.description import MAX_CONFIG_BYTES, ConfigFields, ExampleName, ServingBasis
from cascade.serving.kvcache import MODEL_SHAPES, KVConfig, ModelShape
from cascade.serving.metrics import Slo
from cascade.serving.report import format_summary
from cascade.serving.routers import ROUTERS
from cascade.serving.scenario import (
    MAX_REPLICAS,
    MAX_REQUESTS,
    ClientsStart,
    Scenario,
    ScenarioResult,
    expected_arrivals,
    on_gpu,
    resolve,
    run_scenario,
)
from cascade.serving.schedulers import Vllm, device_of
from cascade.serving.sim import SCHEDULERS
from cascade.serving.stepmodel import StepTimeModel, StepTimeSource

#: Largest inline trace CSV accepted (bytes).
MAX_TRACE_CSV = 8 * 1024 * 1024
#: Most closed-loop clients (``concurrency``).
MAX_CONCURRENCY = 4096
#: Most GPUs of one replica (``description.tp``).
MAX_TP = 64

PosF = Annotated[float, msgspec.Meta(gt=0)]
Pos = Annotated[int, msgspec.Meta(ge=1)]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def settings_struct(name: str, library: type[msgspec.Struct], *, tag: str | None = None,
                    tag_field: str | None = None, drop: tuple[str, ...] = (),
                    add: tuple[tuple[Any, ...], ...] = ()) -> type[msgspec.Struct]:
    """A request Struct with the fields of a serving-library config Struct (one definition),
    refusing unknown fields."""
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


def _union(members: list[Any]) -> Any:
    out = members[0]
    for m in members[1:]:
        out = out | m
    return out


# ``arrival``: every registered pattern, tagged by ``pattern``; a trace is sent inline as ``csv``.
_TRACE_CSV = ("csv", Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TRACE_CSV, pattern=r"\S",
                                                 description="arrived_at,prompt_tokens,output_tokens rows")])
ARRIVAL_REQUESTS: dict[str, type[msgspec.Struct]] = {
    name: settings_struct(f"{_camel(name)}Arrival", ARRIVALS.get(name)[0], tag=name, tag_field="pattern",
                          drop=("path",) if ARRIVALS.get(name)[0] is Trace else (),
                          add=(_TRACE_CSV,) if ARRIVALS.get(name)[0] is Trace else ())
    for name in ARRIVALS.names()}
Arrival: Any = _union(list(ARRIVAL_REQUESTS.values()))

# ``lengths.prompt`` / ``lengths.output``: a token count or a registered length law.
LENGTH_REQUESTS: dict[str, type[msgspec.Struct]] = {
    name: settings_struct(f"{_camel(name)}Length", LENGTHS.get(name)[0], tag=name, tag_field="kind")
    for name in LENGTHS.names()}
Length: Any = _union([Pos, *LENGTH_REQUESTS.values(), None])

# ``router``: a registered name, or ``{"kind": name, ...settings}``.
RouterName: Any = Literal[tuple(ROUTERS.names())]
ROUTER_REQUESTS: dict[str, type[msgspec.Struct]] = {
    name: settings_struct(f"{_camel(name)}Router", ROUTERS.get(name)[0], tag=name, tag_field="kind")
    for name in ROUTERS.names()}
Router: Any = _union([RouterName, *ROUTER_REQUESTS.values()])

# ``scheduler``: a registered name, or ``{"name": name, "settings": {...}}``.
SchedulerName: Any = Literal[tuple(SCHEDULERS.names())]
SCHEDULER_SETTINGS: dict[str, type[msgspec.Struct]] = {
    name: settings_struct(f"{_camel(name)}Settings", SCHEDULERS.get(name)[0]) for name in SCHEDULERS.names()}
SCHEDULER_REQUESTS: dict[str, type[msgspec.Struct]] = {
    name: msgspec.defstruct(
        f"{_camel(name)}SchedulerChoice",
        [("settings", settings, msgspec.field(default_factory=settings))],
        kw_only=True, frozen=True, forbid_unknown_fields=True, tag=name, tag_field="name", module=__name__)
    for name, settings in SCHEDULER_SETTINGS.items()}
SchedulerChoice: Any = _union([SchedulerName, *SCHEDULER_REQUESTS.values()])

ModelShapeName: Any = Literal[tuple(sorted(MODEL_SHAPES))]
ModelShapeSpec = settings_struct("ModelShapeSpec", ModelShape)
# ``kv``: KVConfig's settings; the GPU memory comes from the GPU, the model shape from the model.
KVSizing = settings_struct(
    "KVSizing", KVConfig, drop=("model", "gpu_memory_bytes", "activation_reserve_bytes"),
    add=(("model", ModelShapeName | ModelShapeSpec | None, None),))


class CapacitySearch(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What to search: the highest rate, or the fewest replicas, meeting the SLOs."""

    kind: Literal["max_rate", "min_replicas"] = "max_rate"
    rel_tol: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.02
    max_probes: Annotated[int, msgspec.Meta(ge=2, le=60)] = 30
    max_replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1024


class LengthsSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Prompt and output length laws (default: from the trace when replaying one, else 128)."""

    prompt: Length = None
    output: Length = None


def _config_object_schema() -> dict[str, Any]:
    """JSON Schema of an inline config.json: :class:`ConfigFields`' typed fields, any others."""
    _, components = msgspec.json.schema_components([ConfigFields])
    schema = dict(components["ConfigFields"])
    schema.pop("title", None)
    schema["additionalProperties"] = True
    schema["description"] = (f"A Hugging Face config.json (at most {MAX_CONFIG_BYTES} bytes as JSON); the fields "
                             "a description reads are typed, any others are ignored.")
    return schema


ConfigObject = Annotated[dict[str, Any], msgspec.Meta(extra_json_schema=_config_object_schema())]
QuantName: Any = Literal[tuple(QUANTS)]
KvDtypeName: Any = Literal[KV_DTYPES]


class ModelDescriptionRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model described by its config, on one GPU type, as ``cascade scenario --hf-config``
    takes it (no trace: the LLM kernel model times every step at its shape)."""

    config: ExampleName | ConfigObject  # type: ignore[valid-type]
    """A bundled example's name (GET /api/model-configs) or a config.json object."""
    gpu: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    """A GPU spec id or alias (GET /api/configs); an unknown one is a 400 naming the closest."""
    tp: Annotated[int, msgspec.Meta(ge=1, le=MAX_TP)] = 1
    """Tensor-parallel GPUs of one replica."""
    ep: Annotated[int, msgspec.Meta(ge=1, le=MAX_TP)] = 1
    """Expert-parallel ranks among the MoE layers' GPUs (tp, or dp x tp; 1: experts split by TP)."""
    dp: Annotated[int, msgspec.Meta(ge=1, le=MAX_TP)] = 1
    """Attention data-parallel ranks of one replica (vllm serve --data-parallel-size): each rank tp
    GPUs with its own scheduler and KV cache, the MoE layers over all dp x tp GPUs."""
    quant: QuantName | None = None
    """Dtype of the linear layers (default: the checkpoint's own, from the config's
    quantization_config; bf16 without one)."""
    moe_quant: QuantName | None = None
    """Dtype of the experts (default: quant)."""
    kv_dtype: KvDtypeName = "bf16"
    """Dtype of the KV cache."""


class ScenarioRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/scenarios: the model (a finished sim, or a description), the traffic
    and the serving setup."""

    sim: str | None = None
    run: str | None = None
    config: str | None = None
    model: str | None = None
    description: ModelDescriptionRequest | None = None
    """A described model instead of a finished sim."""
    arrival: Arrival = msgspec.field(default_factory=lambda: ARRIVAL_REQUESTS["poisson"](rate=1.0))
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONCURRENCY)] | None = None
    """Closed loop: this many clients, each sending its next request when its previous one
    finished (``vllm bench serve --max-concurrency``); the arrival is then ignored and
    n_requests defaults to 10 x concurrency."""
    warmup_requests: Annotated[int, msgspec.Meta(ge=0, le=MAX_REQUESTS)] | None = None
    """Requests simulated before the measured ones and left out of every figure (a benchmark's
    warm-up); default 2 x concurrency in a closed loop, else none. In a closed loop they run to
    their end first, then the measured clients start together (aiperf, `vllm bench serve`)."""
    clients_start: ClientsStart = "together"
    """Closed loop: ``together`` (every client's first request at t=0, as a serving benchmark
    starts) or ``staggered`` (each client at its own phase)."""
    lengths: LengthsSpec = LengthsSpec()
    n_requests: Annotated[int, msgspec.Meta(ge=1, le=MAX_REQUESTS)] | None = None
    duration: PosF | None = None
    duration_s: PosF | None = None
    replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1
    router: Router = "round_robin"
    scheduler: SchedulerChoice = msgspec.field(default_factory=SCHEDULER_REQUESTS["vllm"])
    """A scheduler name, or {"name", "settings": {...}}."""
    slos: Slo = Slo()
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0
    capacity_search: CapacitySearch | None = None
    kv: KVSizing = msgspec.field(default_factory=KVSizing)  # type: ignore[valid-type]
    include_records: bool = False
    background: bool = False


SELECTORS = ("sim", "run", "model", "description")


def _one_of(name: str) -> dict[str, Any]:
    props: dict[str, Any] = {name: {"type": "object" if name == "description" else "string"},
                             **{n: {"type": "null"} for n in SELECTORS if n != name}}
    if name != "run":
        props["config"] = {"type": "null"}
    if name == "description":
        props["kv"] = {"properties": {"model": {"type": "null"}}}
    return {"required": [name], "properties": props}


def _not_kind(kind: str) -> dict[str, Any]:
    return {"not": {"type": "object", "required": ["kind"], "properties": {"kind": {"const": kind}}}}


_ANY_SLO = {"anyOf": [{"required": [name], "properties": {name: {"type": "number"}}}
                      for name in ("ttft_ms", "tpot_ms", "e2e_ms")]}
_TRACE_ARRIVAL = {"required": ["arrival"], "properties": {"arrival": {
    "type": "object", "required": ["pattern"], "properties": {"pattern": {"const": "trace"}}}}}
#: Rules across fields the Structs cannot state: exactly one of sim, run (+ config), model or
#: description; a capacity search names at least one SLO; 'trace' lengths need a trace
#: arrival and an open loop.
SCENARIO_REQUEST_SCHEMA: dict[str, Any] = {
    "oneOf": [_one_of(n) for n in SELECTORS],
    "allOf": [
        {"if": {"required": ["capacity_search"], "properties": {"capacity_search": {"type": "object"}}},
         "then": {"required": ["slos"], "properties": {"slos": _ANY_SLO}}},
        {"if": {"not": {"allOf": [_TRACE_ARRIVAL, {"not": {"required": ["concurrency"], "properties": {
            "concurrency": {"type": "integer"}}}}]}},
         "then": {"properties": {"lengths": {"properties": {"prompt": _not_kind("trace"),
                                                            "output": _not_kind("trace")}}}}},
    ]}


def check_selection(req: ScenarioRequest) -> None:
    """Exactly one of sim, run (+ config), model or description (the schema's ``oneOf``): else a 400."""
    given = [n for n in SELECTORS if getattr(req, n) is not None]
    if len(given) != 1:
        raise ValidationError("give exactly one of sim, run (+ config), model or description", field="sim")
    if req.config is not None and req.run is None:
        raise ValidationError("config goes with run", field="config")
    if req.description is not None and req.kv.model is not None:  # type: ignore[attr-defined]
        raise ValidationError("a description's KV cache follows from its config", field="kv.model")
    for name, law in (("prompt", req.lengths.prompt), ("output", req.lengths.output)):
        trace_arrival = isinstance(req.arrival, ARRIVAL_REQUESTS["trace"]) and req.concurrency is None
        if isinstance(law, LENGTH_REQUESTS["trace"]) and not trace_arrival:
            raise ValidationError("lengths 'trace' need arrival pattern 'trace' (and no concurrency)",
                                  field=f"lengths.{name}")


# ---- request -> Scenario --------------------------------------------------------------------

_LIBRARY_FIELD = {"arrival": "arrival", "prompt": "lengths.prompt", "output": "lengths.output",
                  "router": "router", "scheduler": "scheduler", "slo": "slos",
                  "duration_s": "duration", "n_requests": "n_requests", "replicas": "replicas",
                  "kv_config": "kv", "lengths": "lengths", "concurrency": "concurrency"}


def remap_field(exc: ValidationError) -> UnprocessableError:
    """The library's field name (``prompt``, ``slo.ttft_ms``) as the request spells it (422)."""
    fld = exc.field or ""
    head = fld.split(".", 1)[0]
    mapped = _LIBRARY_FIELD.get(head)
    message = str(exc)
    if fld and message.startswith(f"{fld}: "):
        message = message[len(fld) + 2:]
    new = mapped + fld[len(head):] if mapped is not None else (fld or None)
    return UnprocessableError(message, field=new)


def _law(value: Any) -> Any:
    """A request Struct as the serving library's ``{"kind": ...}`` object."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return {"kind": "fixed", "tokens": value}
    return msgspec.to_builtins(value)


def _arrival(raw: msgspec.Struct, tmpdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(raw)
    out["kind"] = out.pop("pattern")
    if "csv" in out:
        path = tmpdir / "arrivals.csv"
        path.write_text(out.pop("csv"))
        out["path"] = str(path)
    return out


def _scheduler(value: Any) -> Any:
    if isinstance(value, str):
        return {"kind": value}
    return {"kind": type(value).__struct_config__.tag, **msgspec.to_builtins(value.settings)}


def build_scenario(req: ScenarioRequest, tmpdir: Path) -> Scenario:
    """The serving library's Scenario for a decoded request (a trace's CSV written under
    ``tmpdir``).

    The body already matches the schema; what is left are rules across fields (both
    ``duration`` and ``n_requests``, ``hi < lo``, a closed loop with a duration, a capacity
    search without an SLO): :class:`UnprocessableError` (422) naming the field."""
    check_selection(req)
    if req.duration is not None and req.duration_s is not None:
        raise UnprocessableError("give duration or duration_s, not both", field="duration")
    raw = {
        "arrival": _arrival(req.arrival, tmpdir), "concurrency": req.concurrency,
        "prompt": _law(req.lengths.prompt), "output": _law(req.lengths.output),
        "n_requests": req.n_requests,
        "duration_s": req.duration if req.duration is not None else req.duration_s,
        "replicas": req.replicas, "router": _law(req.router), "scheduler": _scheduler(req.scheduler),
        "slo": msgspec.to_builtins(req.slos), "seed": req.seed, "include_records": req.include_records,
        "clients_start": req.clients_start, "warmup_requests": req.warmup_requests,
    }
    if req.concurrency is not None and raw["arrival"]["kind"] == "trace":  # a closed loop draws its lengths
        raw["arrival"] = {"kind": "poisson", "rate": 1.0}
    raw = {k: v for k, v in raw.items() if v is not None}
    try:
        rs = resolve(raw)
    except ValidationError as exc:
        raise remap_field(exc) from None
    expected = expected_arrivals(rs)
    if expected is not None and expected > MAX_REQUESTS:
        raise UnprocessableError(f"about {expected:.3g} requests arrive within it at "
                                 f"{rate_of(rs.arrival):g}/s, more than {MAX_REQUESTS}", field="duration")
    if req.capacity_search is not None and rs.scenario.slo.is_empty():
        raise UnprocessableError("a capacity search needs at least one SLO (ttft_ms, tpot_ms or e2e_ms)",
                                 field="slos")
    if req.capacity_search is not None and req.capacity_search.kind == "max_rate" and req.concurrency:
        raise UnprocessableError("a closed loop (concurrency) has no arrival rate to search; search "
                                 "min_replicas, or give an arrival rate", field="capacity_search.kind")
    return rs.scenario


def traced_kv(req: Any, gpu: GPUSpec | None, gpu_id: str, model_text: str) -> KVConfig:
    """KV sizing of a replica of a traced model on ``gpu`` (``req``: the request's ``kv``);
    ``model_text`` (workload, trace id) names the model shape when the request does not."""
    value = req.model
    if isinstance(value, str):
        shape = MODEL_SHAPES[value]
    elif value is not None:
        shape = msgspec.convert(msgspec.to_builtins(value), ModelShape)
    else:
        text = model_text.lower()
        found = [n for n in sorted(MODEL_SHAPES, key=len, reverse=True) if n in text]
        if not found:
            raise UnprocessableError(
                f"the model shape of {model_text.split()[-1] if model_text.split() else 'the trace'} is not "
                f"known, so its KV cache cannot be sized: give kv.model as one of {', '.join(sorted(MODEL_SHAPES))} "
                "or as {layers, kv_heads, head_dim, weights_bytes}", field="kv.model")
        shape = MODEL_SHAPES[found[0]]
    if gpu is None and req.num_gpu_blocks_override is None:
        raise UnprocessableError(f"GPU config {gpu_id!r} has no known memory size; give "
                                 "kv.num_gpu_blocks_override", field="kv")
    memory = int(gpu.memory_gb * 1e9) if gpu is not None else 1
    cfg = KVConfig(model=shape, gpu_memory_bytes=max(1, memory), gpu_memory_utilization=req.gpu_memory_utilization,
                   block_size=req.block_size, num_gpu_blocks_override=req.num_gpu_blocks_override)
    try:
        cfg.num_blocks()  # raises a ValidationError when nothing is left for the KV cache
    except ValidationError as exc:
        raise remap_field(exc) from None
    return cfg


def for_gpu(scenario: Scenario, spec: GPUSpec | None) -> Scenario:
    """The scenario with a vLLM scheduler's unset limits as ``vllm serve`` sets them on ``spec``
    (:func:`cascade.serving.scenario.on_gpu`; without a spec, from the replica's memory later)."""
    if spec is None:
        return scenario
    return on_gpu(scenario, *device_of(spec))


def scheduler_limits(scenario: Scenario) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of a scenario :func:`for_gpu` filled (vLLM's
    on an 80 GB H100 for a scheduler without them)."""
    sched = scenario.scheduler
    return sched.limits if isinstance(sched, Vllm) else Vllm().limits


def async_scheduling(req: ScenarioRequest) -> bool:
    """Whether the request's scheduler builds the next step while one runs (vLLM's default)."""
    return bool(getattr(getattr(req.scheduler, "settings", None), "async_scheduling", True))


# ---- running and the answer -------------------------------------------------------------------

def compute(req: ScenarioRequest, scenario: Scenario, model: StepTimeModel | StepTimeSource, kv: KVConfig,
            progress: Any = None) -> tuple[ScenarioResult, CapacityResult | None]:
    """Run the scenario (or the capacity search); CPU-bound, call in a thread.

    A rule only the run can check (no request arrives within ``duration``, too many
    arrive, a request that does not fit the KV cache) is an :class:`UnprocessableError`
    naming the field."""
    try:
        if req.capacity_search is None:
            return run_scenario(scenario, model, kv, progress=progress), None
        cs = req.capacity_search

        def probe(p: Any) -> None:
            if progress is not None:
                progress(-1, -1)

        if cs.kind == "max_rate":
            cap = max_rate(scenario, model, kv, rel_tol=cs.rel_tol, max_probes=cs.max_probes,  # type: ignore[arg-type]
                           progress=probe)
        else:
            cap = min_replicas(scenario, model, kv, max_replicas=cs.max_replicas, progress=probe)  # type: ignore[arg-type]
        if cap.result is None:
            return run_scenario(scenario, model, kv), cap
        return cap.result, cap
    except UnprocessableError:
        raise
    except ValidationError as exc:
        raise remap_field(exc) from None


class ScenarioAnswer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The 200 answer of POST /api/scenarios (and a completed job's ``response``)."""

    model: str
    """The sim's model id, or ``described/<config>`` for a description."""
    sim: str
    """The sim whose steps timed it ("" for a description)."""
    run: str
    config: str
    """The GPU config."""
    trace: str
    result: ScenarioResult
    capacity: CapacityResult | None
    """The capacity search's outcome (null without ``capacity_search``)."""
    summary: str
    """The metrics as text, as `vllm bench serve` prints them."""
    basis: ServingBasis
    """Where the step times come from: described or traced, the GPU, the LLM calibration and
    the kernel model's expected error."""


def scenario_answer(*, model: str, sim: str, run: str, config: str, trace: str, result: ScenarioResult,
                    cap: CapacityResult | None, basis: ServingBasis) -> ScenarioAnswer:
    """The answer with its `vllm bench serve`-like summary, headed by its basis."""
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
    if basis.kind == "described":
        header = f"Model: {basis.workload} on {basis.gpu} (described, no trace)"
        err = basis.expected_kernel_error
        if err is not None and err.mape_pct is not None:
            header += f"\nLLM kernel model's expected error: {err.mape_pct:g}% MAPE per kernel ({err.basis})"
    else:
        header = f"Model: {model} (sim {sim}, config {config})"
    if result.extrapolated:
        header += "\nNOTE: step shapes outside the step model's calibration range (extrapolated)."
    return ScenarioAnswer(model=model, sim=sim, run=run, config=config, trace=trace, result=result,
                          capacity=cap, summary=header + "\n" + summary, basis=basis)
