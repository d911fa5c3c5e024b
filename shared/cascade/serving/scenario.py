"""Scenarios: what traffic hits which replicas, and the metrics that come out."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

from cascade.errors import CascadeError, ValidationError
from cascade.serving.arrivals import (
    ARRIVALS,
    LENGTHS,
    Fixed,
    FromTrace,
    LogNormal,
    Poisson,
    Trace,
    Uniform,
    lognormal_params,
    rate_of,
    read_trace,
)
from cascade.serving.kvcache import KVConfig
from cascade.serving.metrics import (
    LatencyStats,
    RequestRecord,
    Slo,
    latency_stats,
    per_request,
    records,
    slo_mask,
)
from cascade.serving.routers import ROUTERS, RoundRobin
from cascade.serving.schedulers import Static, Vllm
from cascade.serving.sim import SCHEDULERS, Progress, SimOutcome, Simulation
from cascade.serving.stepmodel import OutOfRange, StepTimeModel, StepTimeSource, _out_of_range

MAX_REPLICAS = 4096
MAX_REQUESTS = 2_000_000
#: Closed loop without n_requests: measured requests per client (``--num-prompts 10N`` /
#: ``--request-count 10N``, what the concurrency sweeps of `vllm bench serve` and aiperf send,
#: InferenceMAX's and AIConfigurator's among them, so the first wave, every client sending at
#: once on an idle engine, is a tenth of the figures); `cascade validate --serving` sends as many.
REQUESTS_PER_CLIENT = 10
#: Closed loop without warmup_requests: warm-up requests per client, simulated first and left out
#: of every figure (aiperf's ``--warmup-request-count 2N`` and ``vllm bench serve --num-warmups
#: 2N`` in concurrency sweeps: AIConfigurator's, GenAI-Perf's and InferenceMAX's scripts). Both
#: tools run the warm-up to its end before the measured requests start (aiperf waits for every
#: warm-up response; `vllm bench serve` gathers the warm-up tasks), so the measured run starts
#: from an idle engine with every client sending at once: that first wave is in the figures.
WARMUP_PER_CLIENT = 2
#: Closed loop: a benchmark client's own time between a response's last token and its next
#: request reaching the server (HTTP round trip, stream parsing, tokenising the next prompt: a few
#: milliseconds for `vllm bench serve` or aiperf beside the server), drawn per request from an
#: exponential of this mean (seeded).
CLIENT_GAP_MS = 2.0
#: How a closed loop's clients start (:attr:`Scenario.clients_start`).
ClientsStart = Literal["together", "staggered"]


class Scenario(msgspec.Struct, frozen=True, kw_only=True):
    """Traffic, lengths and the serving setup to simulate.

    ``arrival``, ``prompt``, ``output``, ``router`` and ``scheduler`` take a config
    Struct or an object ``{"kind": NAME, ...settings}`` of a registered plug-in.
    """

    arrival: Any = Poisson(rate=1.0)
    """poisson{rate} | gamma{rate, cv} | constant{rate} | burst{} | trace{path, time_scale}."""
    prompt: Any = None
    """Prompt length law: fixed{tokens} | uniform{lo, hi} | lognormal{mean, sigma | median, p90}
    | trace{}; default: from the trace when replaying one, else 128."""
    output: Any = None
    """Output length law (same kinds); default: from the trace, else 128."""
    n_requests: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """How many requests; or give duration_s (default: 1000, or all rows of a trace)."""
    duration_s: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """Send requests arriving before this time (instead of n_requests)."""
    replicas: Annotated[int, msgspec.Meta(ge=1)] = 1
    router: Any = RoundRobin()
    """round_robin{} | least_outstanding{}."""
    scheduler: Any = Vllm()
    """vllm{max_num_batched_tokens, max_num_seqs, enable_chunked_prefill, ...} | static{batch_size}."""
    slo: Slo = Slo()
    seed: int = 0
    include_records: bool = False
    """Return one RequestRecord per request."""
    concurrency: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Closed loop: this many clients, each sending its next request when its previous one
    finished (``vllm bench serve --max-concurrency N`` with every request queued at t=0);
    the arrival law is then ignored. Default number of requests: :data:`REQUESTS_PER_CLIENT`
    x concurrency."""
    warmup_requests: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """Requests simulated before the ``n_requests`` measured ones and left out of every figure
    (a benchmark's warm-up); default :data:`WARMUP_PER_CLIENT` x concurrency in a closed loop,
    else none. In a closed loop the warm-up runs to its end first (drained, as benchmarks run
    it), then the measured clients start together; in an open loop it is the stream's first
    requests."""
    clients_start: ClientsStart = "together"
    """Closed loop: ``together``, every client sends its first request at t=0, as a serving
    benchmark's clients do (``vllm bench serve --max-concurrency N``, ``aiperf --concurrency N``):
    requests of equal lengths prefilled in one step finish in one step and come back together,
    so the waves a benchmark measures persist; ``staggered``, the first wave spread over one
    request's expected time, each client at its own phase (independent users in a steady
    state: the lower end of TTFT)."""
    max_context_tokens: Annotated[int, msgspec.Meta(ge=2)] | None = None
    """The model's context window: a drawn request holding more tokens (prompt + output)
    is refused with the count and the longest, as a vLLM server refuses it (None: no
    check). The api sets it from the trace's model."""


@dataclass(frozen=True)
class ResolvedScenario:
    """A validated scenario with its plug-in configs as typed Structs."""

    scenario: Scenario
    arrival: msgspec.Struct
    prompt: msgspec.Struct
    output: msgspec.Struct
    router: msgspec.Struct
    scheduler: msgspec.Struct


def resolve(scenario: Scenario | dict[str, Any]) -> ResolvedScenario:
    """Validate; ValidationError names the field and why."""
    if isinstance(scenario, dict):
        try:
            scenario = msgspec.convert(scenario, Scenario)
        except msgspec.ValidationError as exc:
            text = str(exc)
            fld = text.split("at `$.", 1)[1].rstrip("`") if "at `$." in text else "scenario"
            raise ValidationError(text.split(" - at `", 1)[0], field=fld) from None
    else:
        try:
            scenario = msgspec.convert(msgspec.to_builtins(scenario), Scenario)
        except msgspec.ValidationError as exc:
            text = str(exc)
            fld = text.split("at `$.", 1)[1].rstrip("`") if "at `$." in text else "scenario"
            raise ValidationError(text.split(" - at `", 1)[0], field=fld) from None
    arrival = ARRIVALS.resolve(scenario.arrival, "arrival")
    is_trace = isinstance(arrival, Trace)
    default_len = FromTrace() if is_trace else Fixed(tokens=128)
    prompt = LENGTHS.resolve(scenario.prompt if scenario.prompt is not None else default_len,
                             "prompt")
    output = LENGTHS.resolve(scenario.output if scenario.output is not None else default_len,
                             "output")
    for name, law in (("prompt", prompt), ("output", output)):
        if isinstance(law, FromTrace) and not is_trace:
            raise ValidationError("lengths 'trace' need arrival kind 'trace'", field=name)
        if isinstance(law, Uniform) and law.hi < law.lo:
            raise ValidationError("hi must be >= lo", field=f"{name}.hi")
        if isinstance(law, LogNormal):
            lognormal_params(law, name)
    if scenario.concurrency is not None and scenario.duration_s is not None:
        raise ValidationError("a closed loop (concurrency) takes n_requests, not duration_s",
                              field="duration_s")
    if scenario.n_requests is not None and scenario.duration_s is not None:
        raise ValidationError("give n_requests or duration_s, not both", field="duration_s")
    if scenario.n_requests is not None and scenario.n_requests > MAX_REQUESTS:
        raise ValidationError(f"at most {MAX_REQUESTS}", field="n_requests")
    if scenario.warmup_requests is not None and scenario.warmup_requests > MAX_REQUESTS:
        raise ValidationError(f"at most {MAX_REQUESTS}", field="warmup_requests")
    if scenario.replicas > MAX_REPLICAS:
        raise ValidationError(f"at most {MAX_REPLICAS}", field="replicas")
    for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
        v = getattr(scenario.slo, name)
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise ValidationError("must be a positive number of ms", field=f"slo.{name}")
    if not 0 < scenario.slo.attainment <= 1:
        raise ValidationError("must be in (0, 1]", field="slo.attainment")
    router = ROUTERS.resolve(scenario.router, "router")
    scheduler = SCHEDULERS.resolve(scenario.scheduler, "scheduler")
    return ResolvedScenario(scenario, arrival, prompt, output, router, scheduler)


def on_gpu(scenario: Scenario, memory_bytes: float, gpu_name: str = "") -> Scenario:
    """The scenario with a vLLM scheduler's unset ``max_num_batched_tokens`` / ``max_num_seqs``
    filled as ``vllm serve`` fills them on that GPU (:meth:`Vllm.on_gpu`; the model's context
    window where chunked prefill is off); other schedulers as they are."""
    sched = SCHEDULERS.resolve(scenario.scheduler, "scheduler")
    if not isinstance(sched, Vllm):
        return scenario
    return msgspec.structs.replace(scenario, scheduler=sched.on_gpu(
        memory_bytes, gpu_name, context_tokens=scenario.max_context_tokens))


def engine_defaults(rs: ResolvedScenario, kv_config: KVConfig) -> ResolvedScenario:
    """``rs`` with a vLLM scheduler's unset limits filled from the replica's GPU memory (where
    the caller did not fill them with the GPU's name, :func:`on_gpu`)."""
    sched = rs.scheduler
    if not isinstance(sched, Vllm) or (sched.max_num_batched_tokens and sched.max_num_seqs):
        return rs
    filled = sched.on_gpu(kv_config.gpu_memory_bytes, context_tokens=rs.scenario.max_context_tokens)
    return replace(rs, scenario=msgspec.structs.replace(rs.scenario, scheduler=filled), scheduler=filled)


@dataclass(frozen=True)
class DrawnRequests:
    """Drawn requests: arrival times (s) and lengths."""

    arrived_at: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    client_gap_s: np.ndarray | None = None
    """Closed loop: per request, the client's time between its previous request's end and this
    one's arrival (:data:`CLIENT_GAP_MS`); None for open-loop arrivals."""


def expected_arrivals(rs: ResolvedScenario) -> float | None:
    """Requests expected within ``duration_s`` at the arrival's rate (None: not rate-driven
    or a fixed count)."""
    sc = rs.scenario
    rate = rate_of(rs.arrival)
    if sc.n_requests is not None or sc.duration_s is None or rate is None:
        return None
    return rate * sc.duration_s  # finite or inf: both compare against a limit


def warmup_of(sc: Scenario) -> int:
    """Warm-up requests of a scenario (:attr:`Scenario.warmup_requests`)."""
    if sc.warmup_requests is not None:
        return sc.warmup_requests
    return WARMUP_PER_CLIENT * sc.concurrency if sc.concurrency is not None else 0


def draw_workload(rs: ResolvedScenario) -> DrawnRequests:
    """Arrivals and lengths for a scenario (independent RNG streams per quantity, from the seed):
    the warm-up's first, then the measured requests."""
    sc = rs.scenario
    s_arr, s_prompt, s_out = np.random.SeedSequence(sc.seed).spawn(3)
    n = sc.n_requests
    if n is None and sc.concurrency is not None:
        n = REQUESTS_PER_CLIENT * sc.concurrency
    if n is None and sc.duration_s is None and not isinstance(rs.arrival, Trace):
        n = 1000
    if n is not None:
        n += warmup_of(sc)
        if n > MAX_REQUESTS:
            raise ValidationError(f"{n} requests with the warm-up's, more than {MAX_REQUESTS}",
                                  field="warmup_requests")
    if sc.concurrency is not None:  # closed loop: the first wave at t=0, the rest on finishes
        n = n if n is not None else REQUESTS_PER_CLIENT * sc.concurrency
        lens = []
        for name, law, ss in (("prompt", rs.prompt, s_prompt), ("output", rs.output, s_out)):
            if isinstance(law, FromTrace):
                raise ValidationError("a closed loop (concurrency) draws its lengths; 'trace' lengths need "
                                      "a trace arrival", field=name)
            _, draw = LENGTHS.get(str(type(law).__struct_config__.tag))
            lens.append(np.maximum(1, draw(law, n, np.random.default_rng(ss))))
        if sc.max_context_tokens is not None:
            _check_context(lens[0], lens[1], sc.max_context_tokens)
        gaps = np.random.default_rng(s_arr).exponential(CLIENT_GAP_MS / 1e3, n)
        first = np.zeros(n)
        first[:sc.concurrency] = np.sort(gaps[:sc.concurrency])  # the simulation takes arrivals in order
        return DrawnRequests(first, lens[0].astype(np.int64), lens[1].astype(np.int64), gaps)
    expected = expected_arrivals(rs)
    if expected is not None and expected > MAX_REQUESTS:
        raise ValidationError(f"about {expected:.3g} requests arrive within duration_s, more than "
                              f"{MAX_REQUESTS}", field="duration_s")
    _, arrive = ARRIVALS.get(str(type(rs.arrival).__struct_config__.tag))
    with np.errstate(all="ignore"):
        try:
            times = arrive(rs.arrival, n, sc.duration_s, np.random.default_rng(s_arr))
        except CascadeError:
            raise
        except (ValueError, OverflowError) as exc:
            raise ValidationError(f"no arrival times can be drawn with these settings ({exc})",
                                  field="arrival") from None
    if not np.all(np.isfinite(times)):
        raise ValidationError("the arrival times overflow with these settings (a rate too small, "
                              "or a cv too far from 1)", field="arrival")
    count = len(times)
    if count == 0:
        raise ValidationError("no request arrives within duration_s", field="duration_s")
    if count > MAX_REQUESTS:
        raise ValidationError(f"{count} requests, more than {MAX_REQUESTS}", field="duration_s")
    lens = []
    for name, law, ss in (("prompt", rs.prompt, s_prompt), ("output", rs.output, s_out)):
        if isinstance(law, FromTrace):
            assert isinstance(rs.arrival, Trace)
            rows = read_trace(rs.arrival.path)
            col = rows.prompt_tokens if name == "prompt" else rows.output_tokens
            lens.append(col[:count])
        else:
            _, draw = LENGTHS.get(str(type(law).__struct_config__.tag))
            lens.append(np.maximum(1, draw(law, count, np.random.default_rng(ss))))
    if sc.max_context_tokens is not None:
        _check_context(lens[0], lens[1], sc.max_context_tokens)
    return DrawnRequests(np.asarray(times, dtype=float), lens[0].astype(np.int64),
                    lens[1].astype(np.int64))


def _check_context(prompt: np.ndarray, output: np.ndarray, context: int) -> None:
    """Refuse drawn requests longer than the context window (prompt + output tokens)."""
    total = prompt.astype(np.int64) + output.astype(np.int64)
    over = total > context
    if not over.any():
        return
    i = int(np.argmax(total))
    p, o = int(prompt[i]), int(output[i])
    # the prompt alone cannot fit: its law is the one to change; else the output's
    field = "prompt" if int(np.max(prompt)) >= context else "output"
    raise ValidationError(
        f"{int(over.sum())} of {len(total)} requests hold more tokens than the model's context of "
        f"{context} (prompt + output; the longest {p} + {o} = {p + o}); lower the prompt or output "
        "lengths (a lognormal law takes a max) so that prompt + output <= the context", field=field)


class KVStats(msgspec.Struct, frozen=True, kw_only=True):
    """KV-cache use per replica (fractions of capacity)."""

    capacity_blocks: int
    block_size: int
    mean_utilisation: float
    """Time-weighted over the benchmark duration, averaged over replicas."""
    max_utilisation: float
    max_blocks_used: int


class ReplicaStats(msgspec.Struct, frozen=True, kw_only=True):
    replica: int
    requests: int
    steps: int
    busy_fraction: float
    preemptions: int
    kv_mean_utilisation: float
    kv_max_utilisation: float


class ScenarioResult(msgspec.Struct, frozen=True, kw_only=True):
    """Metrics of one simulated scenario, named as `vllm bench serve` names them."""

    completed: int
    duration_s: float
    """First arrival to last token."""
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    itl_ms: LatencyStats
    e2el_ms: LatencyStats
    queue_ms: LatencyStats
    preemptions: int
    kv_cache: KVStats
    steps: int
    replicas: list[ReplicaStats]
    request_goodput: float | None = None
    """Requests per second meeting every SLO (None without SLOs)."""
    slo_attainment: float | None = None
    """Fraction of requests meeting every SLO."""
    slo: Slo = Slo()
    extrapolated: bool = False
    extrapolation: dict[str, OutOfRange] = {}
    """Step shapes used outside the step model's calibration range."""
    step_model_source: str = ""
    basis: dict[str, Any] = {}
    """Where the step times came from when no fitted step model gave them: the described
    workload, the GPU spec and the LLM calibration (its digest)."""
    scenario: dict[str, Any] = {}
    """The resolved scenario as JSON-able builtins."""
    records: list[RequestRecord] | None = None


def staggered(wl: DrawnRequests, concurrency: int, replicas: int, cost: Any) -> DrawnRequests:
    """A closed loop's first wave spread over one request's expected time at full load, so the
    run starts with each client at its own phase (``clients_start="staggered"``), not in the
    waves of clients started together. The expected time: the mean prompt's prefill alone, then
    the mean output's decode steps at the full per-replica batch and the mean context."""
    n = min(concurrency, len(wl.arrived_at))
    if n <= 1:
        return wl
    isl = int(max(np.mean(wl.prompt_tokens), 1))
    osl = int(max(np.mean(wl.output_tokens), 1))
    batch = max(concurrency // max(replicas, 1), 1)
    prefill = float(cost.mixed_step_ns([(isl, 0)], 0, 0))
    decode = float(cost.decode_steps_ns(np.asarray([batch], dtype=float),
                                        np.asarray([batch * (isl + osl / 2)], dtype=float))[0])
    cycle_s = (prefill + osl * decode) / 1e9
    if not np.isfinite(cycle_s) or cycle_s <= 0:
        return wl
    first = wl.arrived_at.copy()
    first[:n] = first[:n] + np.arange(n) * (cycle_s / n)
    return DrawnRequests(first, wl.prompt_tokens, wl.output_tokens, wl.client_gap_s)


def simulate(rs: ResolvedScenario, step_model: StepTimeModel | StepTimeSource, kv_config: KVConfig, *,
             workload: DrawnRequests | None = None, record_steps: bool = False,
             progress: Progress | None = None, fast_forward: bool = True) -> SimOutcome:
    """Run the simulation of a resolved scenario and return the raw outcome."""
    rs = engine_defaults(rs, kv_config)
    wl = workload if workload is not None else draw_workload(rs)
    cost = step_model.step_cost()
    if rs.scenario.concurrency is not None and wl.client_gap_s is not None and workload is None \
            and rs.scenario.clients_start == "staggered":
        wl = staggered(wl, rs.scenario.concurrency, rs.scenario.replicas, cost)
    warmup = warmup_of(rs.scenario)
    if warmup >= len(wl.arrived_at):
        raise ValidationError(f"the warm-up's {warmup} requests leave none of the {len(wl.arrived_at)} drawn "
                              "to measure: lower warmup_requests", field="warmup_requests")
    num_blocks = kv_config.num_blocks()
    bs = kv_config.block_size
    biggest = int(np.max(wl.prompt_tokens + wl.output_tokens))
    if biggest > num_blocks * bs:
        raise ValidationError(
            f"a request of {biggest} tokens (prompt + output) does not fit the KV cache of "
            f"{num_blocks * bs} tokens", field="prompt")
    sched = rs.scheduler
    if isinstance(sched, Vllm) and not sched.enable_chunked_prefill \
            and biggest > sched.limits[0]:
        raise ValidationError(
            f"without chunked prefill a request of {biggest} tokens needs "
            f"max_num_batched_tokens >= {biggest}", field="scheduler.max_num_batched_tokens")
    if isinstance(sched, Static):
        need = int(np.max((wl.prompt_tokens + wl.output_tokens + bs - 1) // bs))
        if need > num_blocks:
            raise ValidationError("a request does not fit the KV cache", field="prompt")
    _, router_factory = ROUTERS.get(str(type(rs.router).__struct_config__.tag))
    sim = Simulation(
        arrival_ns=wl.arrived_at * 1e9, prompt_tokens=wl.prompt_tokens,
        output_tokens=wl.output_tokens, replicas=rs.scenario.replicas,
        router=router_factory(rs.router, rs.scenario.replicas), scheduler=sched,
        cost=cost, num_blocks=num_blocks, block_size=bs,
        record_steps=record_steps, progress=progress, fast_forward=fast_forward,
        progress_every=max(1000, len(wl.arrived_at) // 100), concurrency=rs.scenario.concurrency,
        client_gap_ns=None if wl.client_gap_s is None else wl.client_gap_s * 1e9, warmup=warmup)
    return sim.run()


def summarise(rs: ResolvedScenario, outcome: SimOutcome,
              step_model: StepTimeModel | StepTimeSource) -> ScenarioResult:
    """Metrics of a finished simulation."""
    sc = rs.scenario
    lat = per_request(outcome)
    start = float(np.min(outcome.arrival_ns))
    end = float(np.max(outcome.finished_ns))
    duration_s = max(end - start, 1e-9) / 1e9
    n = len(outcome.arrival_ns)
    tin = int(outcome.prompt_tokens.sum())
    tout = int(outcome.output_tokens.sum())
    goodput = attainment = None
    if not sc.slo.is_empty():
        ok = slo_mask(lat, sc.slo)
        goodput = float(ok.sum()) / duration_s
        attainment = float(ok.mean())
    # the replicas accumulated busy time and KV area over the whole run, a warm-up's included
    span_ns = outcome.run_span_ns or duration_s * 1e9
    reps = []
    cap = outcome.num_blocks
    for rep in outcome.replicas:
        reps.append(ReplicaStats(
            replica=rep.index, requests=int(np.sum(outcome.replica == rep.index)),
            steps=len(rep.ends), busy_fraction=rep.busy_ns / span_ns,
            preemptions=rep.preemptions, kv_mean_utilisation=rep.kv_area / span_ns / cap,
            kv_max_utilisation=rep.kv_max / cap))
    kv = KVStats(capacity_blocks=cap, block_size=outcome.block_size,
                 mean_utilisation=float(np.mean([r.kv_mean_utilisation for r in reps])),
                 max_utilisation=max(r.kv_max_utilisation for r in reps),
                 max_blocks_used=max(rep.kv_max for rep in outcome.replicas))
    gaps = _extrapolation(outcome, step_model) if isinstance(step_model, StepTimeModel) else {}
    return ScenarioResult(
        completed=n, duration_s=duration_s, total_input_tokens=tin, total_output_tokens=tout,
        request_throughput=n / duration_s, output_throughput=tout / duration_s,
        total_token_throughput=(tin + tout) / duration_s,
        ttft_ms=latency_stats(lat["ttft_ms"]), tpot_ms=latency_stats(lat["tpot_ms"]),
        itl_ms=latency_stats(outcome.itl_ns / 1e6), e2el_ms=latency_stats(lat["e2el_ms"]),
        queue_ms=latency_stats(lat["queue_ms"]), preemptions=int(outcome.preemptions.sum()),
        kv_cache=kv, steps=sum(len(r.ends) for r in outcome.replicas), replicas=reps,
        request_goodput=goodput, slo_attainment=attainment, slo=sc.slo,
        extrapolated=bool(gaps), extrapolation=gaps, step_model_source=step_model.source,
        basis=dict(getattr(step_model, "basis", None) or {}),
        scenario=msgspec.to_builtins(msgspec.structs.replace(
            sc, arrival=rs.arrival, prompt=rs.prompt, output=rs.output, router=rs.router,
            scheduler=rs.scheduler, warmup_requests=warmup_of(sc))),
        records=records(outcome, sc.slo) if sc.include_records else None)


def _extrapolation(outcome: SimOutcome, m: StepTimeModel) -> dict[str, OutOfRange]:
    cal = m.calibration
    ext = outcome.extents
    out: dict[str, OutOfRange] = {}
    for dim, (lo, hi), (clo, chi) in (
        ("prefill_tokens", ext.prefill_tokens, (cal.prefill_tokens_min, cal.prefill_tokens_max)),
        ("decode_batch", ext.decode_batch, (cal.decode_batch_min, cal.decode_batch_max)),
        ("decode_context", ext.decode_context, (cal.decode_context_min, cal.decode_context_max)),
    ):
        if hi == 0:
            continue
        far = _out_of_range(hi, clo, chi) or _out_of_range(lo, clo, chi)
        if far is not None:
            out[dim] = far
    return out


def run_scenario(scenario: Scenario | dict[str, Any], step_model: StepTimeModel | StepTimeSource,
                 kv_config: KVConfig, *, progress: Progress | None = None) -> ScenarioResult:
    """Validate, simulate and summarise one scenario.

    ``progress(done, total)`` is called every ~1% of requests (at least every 1000).
    """
    rs = engine_defaults(resolve(scenario), kv_config)
    outcome = simulate(rs, step_model, kv_config, progress=progress)
    return summarise(rs, outcome, step_model)
