"""Step-time models of finished simulations: build, cache (S3 + memory), estimate one request.

A finished sim (``results/{run}/{sim}/result.json``, a :class:`cascade.runs.results.SimResult`
with per-step results) yields one :class:`~cascade.serving.StepRecord` per generation
step; :func:`fit_sim_step_model` fits the serving library's
:class:`~cascade.serving.StepTimeModel` on them and keeps its calibration range. The
fitted model is cached as JSON at ``results/{run}/{sim}/stepmodel.json`` together with
a *fingerprint* of the sim it came from, so a rerun sim (new result) is refitted, and
in memory per sim by :class:`StepModelCache`.

Where the trace's bundle carries op shapes (``op``, ``flops``, ``bytes``, ``m``/``n``/``k``)
and step annotations, :func:`kernel_extrapolator` builds a
:class:`~cascade.serving.KernelExtrapolator`: the kernels of one reference step are
re-shaped (:func:`cascade.serving.reshape_kernels`) and timed by a kernel model on the
sim's target GPU, so answers outside the calibration range follow the kernels instead
of a straight-line fit. Such answers are always labelled ``extrapolated``.

:func:`estimate_request` answers "how long does this one request take on an idle
replica": TTFT (prefill, chunked by the token budget), each inter-token gap, TPOT and
end-to-end latency.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable
from cascade.serving.stepmodel import (
    CalibrationRange,
    KernelExtrapolator,
    OutOfRange,
    StepRecord,
    StepTimeModel,
    _out_of_range,
)
from cascade.singleflight import SingleFlight

SCHEMA_VERSION = 1
#: Default token budget of one engine step (vLLM's max_num_batched_tokens default here).
DEFAULT_TOKEN_BUDGET = 8192
#: Contexts at which an out-of-range decode is timed with the kernel model (interpolated between).
EXTRAPOLATION_POINTS = 8
#: Request shapes whose estimates one SimStepModel keeps (oldest dropped first).
ESTIMATE_MEMO = 4096


def sim_fingerprint(sim: Any) -> str:
    """What identifies one finished result of a sim (a rerun changes it).

    Built from the :class:`cascade.platform.state.SimRecord` fields that change when a sim
    finishes again: result key, finish time and attempts.
    """
    return f"{sim.result_key or ''}|{sim.finished_at or 0:.6f}|{sim.attempts}"


class StoredStepModel(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON cached at ``results/{run}/{sim}/stepmodel.json``."""

    schema_version: Literal[1] = 1
    sim_id: str
    """Sim the model was fitted on."""
    run_id: str
    trace_id: str
    config: str
    """GPU config the sim simulated."""
    fingerprint: str
    """:func:`sim_fingerprint` of the sim when fitted; a different one means refit."""
    built_at: float
    """Unix time of the fit."""
    model: StepTimeModel
    """The fitted laws and the calibration range."""
    records: list[StepRecord] = []
    """The per-step records fitted (for inspection and refits)."""
    workload: str = ""
    """The trace's workload description (e.g. the model name)."""


def fit_sim_step_model(records: Sequence[StepRecord], *, sim_id: str, run_id: str, trace_id: str,
                       config: str, fingerprint: str, workload: str = "") -> StoredStepModel:
    """Fit a StepTimeModel on a finished sim's step records (ValidationError when unusable)."""
    if not records:
        raise ValidationError(f"sim {sim_id} has no per-step results to fit a step model from "
                              "(the trace needs step markers)", field="sim")
    model = StepTimeModel.fit(records, source=f"sim {sim_id} ({config}, run {run_id})")
    return StoredStepModel(sim_id=sim_id, run_id=run_id, trace_id=trace_id, config=config,
                           fingerprint=fingerprint, built_at=time.time(), model=model,
                           records=list(records), workload=workload)


RecordsLoader = Callable[[], Awaitable[Sequence[StepRecord]]]


# ---- kernel-model extrapolation ------------------------------------------------------------


PredictTable = Callable[[KernelTable], np.ndarray]


def has_op_shapes(table: KernelTable) -> bool:
    """True when the table has step annotations and op shapes a re-shape can use."""
    if len(table) == 0 or not table.has("step") or not table.has("op"):
        return False
    steps = table["step"]
    ops = table["op"]
    annotated = (steps >= 0) & np.array([bool(o) for o in ops], dtype=bool)
    if not np.any(annotated):
        return False
    flops = np.nan_to_num(table["flops"][annotated])
    nbytes = np.nan_to_num(table["bytes"][annotated])
    return bool(np.any(flops > 0) or np.any(nbytes > 0))


def kernel_extrapolator(table: KernelTable, predict_table: PredictTable) -> KernelExtrapolator | None:
    """A KernelExtrapolator over a step-annotated table with op shapes, or None without them.

    The kernel model is tried once on each reference step here, so a model that cannot
    time these kernels (an unknown spec, say) fails now rather than on a request.
    """
    if not has_op_shapes(table):
        return None
    ext = KernelExtrapolator.from_table(table, predict_table)
    for kind in ("prefill", "decode"):
        if ext.has(kind):
            ext.predict_ns(kind, *ext._shapes[kind])
    return ext if (ext.has("prefill") or ext.has("decode")) else None


PredictForConfig = Callable[[str, KernelTable], np.ndarray]


def engine_predictor(model: str = "auto") -> PredictForConfig:
    """``(config, table) -> predicted ns per row`` with the performance engine on ``config``.

    Measured durations are dropped first, so re-shaped and unchanged rows are timed by
    the same shape-based model (``analytical`` where work is known, else ``roofline``)
    and the extrapolation ratio compares like with like.
    """

    def predict_for(config: str, table: KernelTable) -> np.ndarray:
        from cascade.engine import predict

        return predict(table.without_times(), config, model=model).predicted_ns

    return predict_for


# ---- one request on an idle replica --------------------------------------------------------


class RequestEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """Simulated timings of one request alone on an idle replica (milliseconds)."""

    prompt_tokens: int
    output_tokens: int
    ttft_ms: float
    """Arrival to first token: the prefill step(s)."""
    tpot_ms: float
    """(e2e - ttft) / (output_tokens - 1); 0 for a single output token."""
    itl_ms: list[float]
    """Every inter-token gap (output_tokens - 1 values)."""
    e2e_ms: float
    queue_ms: float = 0.0
    """Always 0: the replica is idle."""
    prefill_steps: int = 1
    """Prefill chunks (prompt split by the token budget)."""
    extrapolated: bool = False
    extrapolation: dict[str, OutOfRange] = {}
    """Dimension -> how far outside the calibration range."""
    method: str = "fit"
    """'fit', or 'kernel-model' when a re-shaped kernel model timed some step."""

    @property
    def token_times_ms(self) -> list[float]:
        """Time of each output token from arrival."""
        out = [self.ttft_ms]
        for gap in self.itl_ms:
            out.append(out[-1] + gap)
        return out


@dataclass
class SimStepModel:
    """A fitted step model in memory, with its optional kernel extrapolator and memo tables."""

    stored: StoredStepModel
    extrapolator: KernelExtrapolator | None = None
    fingerprint: str = ""
    _prefill_memo: dict[tuple[int, int], Any] = field(default_factory=dict)
    _decode_memo: dict[int, float] = field(default_factory=dict)
    _estimate_memo: dict[tuple[int, int, int], RequestEstimate] = field(default_factory=dict)
    answers: dict[Any, Any] = field(default_factory=dict)
    """Callers' memo of encoded answers per request shape (the api's /v1 fragments); it lives
    as long as this fitted model, so a refit sim starts with an empty one."""
    kernels: dict[str, Any] = field(default_factory=dict)
    """How the sim's kernel times were predicted: ``model``, ``calibration``, ``spec_hash``,
    ``accuracy`` (expected kernel MAPE and its basis), ``extrapolated`` kernels of
    ``kernel_count`` (from its SimResult; empty when that could not be read)."""

    @property
    def model(self) -> StepTimeModel:
        return self.stored.model

    @property
    def calibration(self) -> CalibrationRange:
        return self.stored.model.calibration

    def _prefill(self, tokens: int, context: int) -> Any:
        key = (tokens, context)
        est = self._prefill_memo.get(key)
        if est is None:
            est = self.model.predict_prefill(tokens, context=context, extrapolator=self.extrapolator)
            if len(self._prefill_memo) > 4096:
                self._prefill_memo.clear()
            self._prefill_memo[key] = est
        return est

    def _decode_gpu_kernel(self, context: int) -> float:
        got = self._decode_memo.get(context)
        if got is None:
            got = self.model.predict_decode(1, context, extrapolator=self.extrapolator).gpu_ns
            if len(self._decode_memo) > 4096:
                self._decode_memo.clear()
            self._decode_memo[context] = got
        return got

    def decode_ns(self, contexts: np.ndarray) -> tuple[np.ndarray, bool]:
        """Wall time (host + GPU, ns) of single-sequence decode steps at ``contexts``.

        In range: the fitted laws. Outside, with a kernel extrapolator: the GPU time
        is the kernel model's at up to EXTRAPOLATION_POINTS contexts (memoised),
        linearly interpolated between them. Returns (times, kernel_model_used).
        """
        m = self.model
        ctx_f = contexts.astype(float)
        host = m.decode_host.intercept_ns + m.decode_host.per_token_ns + m.decode_host.per_attention_ns * ctx_f
        gpu = m.decode_gpu.intercept_ns + m.decode_gpu.per_token_ns + m.decode_gpu.per_attention_ns * ctx_f
        times = np.asarray(host + gpu, dtype=float)
        cal = m.calibration
        ext = self.extrapolator
        outside = (contexts > cal.decode_context_max) | (contexts < cal.decode_context_min)
        if ext is None or not ext.has("decode") or not np.any(outside):
            return times, False
        for mask in (contexts > cal.decode_context_max, contexts < cal.decode_context_min):
            if not np.any(mask):
                continue
            ctx = contexts[mask]
            lo, hi = int(ctx.min()), int(ctx.max())
            points = np.unique(np.linspace(lo, hi, num=min(EXTRAPOLATION_POINTS, hi - lo + 1))
                               .round().astype(int))
            gpu_pts = np.array([self._decode_gpu_kernel(int(c)) for c in points])
            gpu_ext = np.interp(ctx, points, gpu_pts)
            times[mask] = host[mask] + gpu_ext
        return times, True

    def estimate(self, prompt_tokens: int, output_tokens: int, *,
                 token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate:
        """See :func:`estimate_request` (memoised per shape: estimates are pure)."""
        key = (prompt_tokens, output_tokens, token_budget)
        hit = self._estimate_memo.get(key)
        if hit is not None:
            return hit
        est = estimate_request(self, prompt_tokens, output_tokens, token_budget=token_budget)
        if len(self._estimate_memo) >= ESTIMATE_MEMO:
            self._estimate_memo.pop(next(iter(self._estimate_memo)))
        self._estimate_memo[key] = est
        return est


def estimate_request(sm: SimStepModel, prompt_tokens: int, output_tokens: int, *,
                     token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate:
    """Timings of one request alone on an idle replica.

    The prompt is prefilled in chunks of at most ``token_budget`` tokens (vLLM's
    chunked prefill; the last chunk yields the first token); then one decode
    step per further output token, the step yielding token ``i + 1`` running at
    context ``prompt_tokens + i``.
    """
    if prompt_tokens < 1:
        raise ValidationError("must be >= 1", field="prompt_tokens")
    if output_tokens < 1:
        raise ValidationError("must be >= 1", field="max_tokens")
    if token_budget < 1:
        raise ValidationError("must be >= 1", field="token_budget")
    gaps: dict[str, OutOfRange] = {}
    method = "fit"
    ttft_ns = 0.0
    done = 0
    chunks = 0
    while done < prompt_tokens:
        take = min(token_budget, prompt_tokens - done)
        est = sm._prefill(take, done + take)
        ttft_ns += est.total_ns
        done += take
        chunks += 1
        for dim, far in est.extrapolation.items():
            prev = gaps.get(dim)
            if prev is None or abs(far.beyond) > abs(prev.beyond):
                gaps[dim] = far
        if est.method != "fit":
            method = est.method
    itl_ns = np.zeros(0)
    if output_tokens > 1:
        contexts = prompt_tokens + np.arange(1, output_tokens, dtype=np.int64)
        itl_ns, used_kernel = sm.decode_ns(contexts)
        if used_kernel:
            method = "kernel-model"
        cal = sm.calibration
        far = (_out_of_range(int(contexts.max()), cal.decode_context_min, cal.decode_context_max)
               or _out_of_range(int(contexts.min()), cal.decode_context_min, cal.decode_context_max))
        if far is not None:
            gaps["decode_context"] = far
        far_b = _out_of_range(1, cal.decode_batch_min, cal.decode_batch_max)
        if far_b is not None:
            gaps["decode_batch"] = far_b
    itl_ms = (itl_ns / 1e6).tolist()
    ttft_ms = ttft_ns / 1e6
    e2e_ms = ttft_ms + float(np.sum(itl_ns)) / 1e6
    tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1) if output_tokens > 1 else 0.0
    return RequestEstimate(prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                           ttft_ms=ttft_ms, tpot_ms=tpot_ms, itl_ms=itl_ms, e2e_ms=e2e_ms,
                           prefill_steps=chunks, extrapolated=bool(gaps), extrapolation=gaps,
                           method=method)


# ---- in-memory cache -----------------------------------------------------------------------


class StepModelCache:
    """Fitted step models in memory, per sim id, invalidated when the sim's fingerprint changes.

    Concurrent requests for the same sim share one build (one S3 read / fit).
    """

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, SimStepModel] = OrderedDict()
        self._building: SingleFlight[tuple[str, str], SimStepModel] = SingleFlight()
        self.builds = 0
        """How many times a model was (re)built (for tests and stats)."""

    def peek(self, sim_id: str, fingerprint: str) -> SimStepModel | None:
        """The cached model when its fingerprint matches (no I/O)."""
        entry = self._entries.get(sim_id)
        if entry is not None and entry.fingerprint == fingerprint:
            self._entries.move_to_end(sim_id)
            return entry
        return None

    def invalidate(self, sim_id: str) -> None:
        """Forget a sim's model (its record changed or was deleted)."""
        self._entries.pop(sim_id, None)

    async def get(self, sim_id: str, fingerprint: str,
                  build: Callable[[], Awaitable[SimStepModel]]) -> SimStepModel:
        """The model for ``sim_id`` at ``fingerprint``, building it (once) when missing or stale."""
        hit = self.peek(sim_id, fingerprint)
        if hit is not None:
            return hit

        async def fresh() -> SimStepModel:
            built = await build()
            built.fingerprint = fingerprint
            self._entries[sim_id] = built
            self._entries.move_to_end(sim_id)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            self.builds += 1
            return built

        return await self._building.run((sim_id, fingerprint), fresh)
