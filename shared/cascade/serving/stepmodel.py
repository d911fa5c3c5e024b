"""Step-time model: how long one engine step takes, fitted from simulated steps.

A finished simulation (timeline replay) yields one :class:`StepRecord` per
generation step. :meth:`StepTimeModel.fit` fits, separately for prefill and
decode steps and separately for host and GPU time, the law

    time_ns = intercept + per_token * tokens + per_attention * attention

with non-negative coefficients, where ``tokens`` is the number of new tokens
in the step and ``attention = tokens * context`` (each new token attends to
``context`` cached tokens; for a decode batch of B sequences at context C this
is B * C). The calibration range (prefill tokens, decode batch, decode context)
is stored with the model; every prediction outside it is labelled
``extrapolated`` with how far outside it is.

Where op shapes are known, a :class:`KernelExtrapolator` re-shapes the kernels
of a reference step (:func:`cascade.serving.reshape.reshape_kernels`) and asks a
kernel model (``predict_table``) how the step time changes; the fitted value at
the nearest calibrated point is scaled by that ratio, so the fit and the kernel
model agree at the range boundary.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable

StepKind = Literal["prefill", "decode"]
NonNeg = Annotated[float, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]


class StepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One simulated engine step."""

    kind: StepKind
    """'prefill' (prompt tokens) or 'decode' (one new token per sequence)."""
    tokens: PosInt
    """New tokens processed in the step (a decode step of batch B has B)."""
    batch: PosInt = 1
    """Sequences in the step."""
    context: PosInt
    """Mean context per sequence after the step: tokens in the KV cache including the new ones
    (for a fresh prefill of P tokens this is P)."""
    host_ns: NonNeg = 0.0
    """Host time of the step not hidden behind GPU work (launch gaps, scheduling, sampling)."""
    gpu_ns: NonNeg
    """GPU time of the step (sum of its kernels' durations)."""


class Law(msgspec.Struct, frozen=True, kw_only=True):
    """time_ns = intercept_ns + per_token_ns * tokens + per_attention_ns * tokens * context."""

    intercept_ns: float = 0.0
    per_token_ns: float = 0.0
    per_attention_ns: float = 0.0
    terms: tuple[str, ...] = ()
    """Terms the data could determine (others are held at 0 or anchored, see ``method``)."""
    method: str = "nnls"
    """'nnls' (non-negative least squares), 'intercept-only' (a single calibration point),
    or 'anchored-on-decode' (single prefill length: fixed cost taken from decode steps,
    the rest spread per token)."""
    n: int = 0
    """Records fitted."""
    rmse_ns: float = 0.0
    """Root-mean-square residual over the fitted records."""

    def value(self, tokens: float, attention: float) -> float:
        """Time of one step with ``tokens`` new tokens and ``attention`` = sum tokens*context."""
        return self.intercept_ns + self.per_token_ns * tokens + self.per_attention_ns * attention


class CalibrationRange(msgspec.Struct, frozen=True, kw_only=True):
    """The step shapes the model was fitted on."""

    prefill_tokens_min: int
    prefill_tokens_max: int
    decode_context_min: int
    decode_context_max: int
    decode_batch_min: int
    decode_batch_max: int
    prefill_records: int = 0
    decode_records: int = 0


class OutOfRange(msgspec.Struct, frozen=True, kw_only=True):
    """How far a requested value lies outside the calibrated [low, high]."""

    value: float
    low: float
    high: float
    beyond: float
    """value minus the nearest bound (positive above the range, negative below)."""
    ratio: float
    """value divided by the nearest bound."""


class StepEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """Predicted time of one step, with its provenance."""

    kind: StepKind
    host_ns: float
    gpu_ns: float
    total_ns: float
    """host_ns + gpu_ns: the step's wall time."""
    extrapolated: bool = False
    extrapolation: dict[str, OutOfRange] = {}
    """Dimension ('prefill_tokens', 'decode_batch', 'decode_context') -> how far outside."""
    method: str = "fit"
    """'fit' (fitted law) or 'kernel-model' (fit at the range edge x re-shaped kernel ratio)."""


def _out_of_range(value: float, low: float, high: float) -> OutOfRange | None:
    if low <= value <= high:
        return None
    bound = high if value > high else low
    return OutOfRange(value=float(value), low=float(low), high=float(high),
                      beyond=float(value - bound), ratio=float(value / bound) if bound else math.inf)


def _clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


# ---- fitting ---------------------------------------------------------------------------------

_TERMS = ("intercept", "tokens", "attention")


def _nnls_small(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a handful of columns (enumerates active sets)."""
    ncol = x.shape[1]
    best = np.zeros(ncol)
    best_res = float(np.sum(y * y))
    for r in range(1, ncol + 1):
        for cols in itertools.combinations(range(ncol), r):
            sub = x[:, cols]
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(coef < 0):
                continue
            res = float(np.sum((y - sub @ coef) ** 2))
            if res < best_res - 1e-12 * max(best_res, 1.0):
                best_res = res
                best = np.zeros(ncol)
                best[list(cols)] = coef
    return best


def _fit_law(tokens: np.ndarray, attention: np.ndarray, y: np.ndarray) -> Law:
    """Fit with the richest identifiable set of terms (degenerate columns are dropped)."""
    cols = {"intercept": np.ones_like(y), "tokens": tokens, "attention": attention}
    usable = ["intercept"]
    for name in ("tokens", "attention"):
        col = cols[name]
        if np.ptp(col) <= 1e-9 * max(float(np.max(np.abs(col))), 1.0):
            continue
        trial = usable + [name]
        mat = np.column_stack([cols[c] / max(float(np.max(np.abs(cols[c]))), 1e-30) for c in trial])
        distinct = len({tuple(row) for row in np.column_stack([tokens, attention]).tolist()})
        if np.linalg.matrix_rank(mat, tol=1e-9) == len(trial) and distinct >= len(trial):
            usable = trial
    x = np.column_stack([cols[c] for c in usable])
    scale = np.array([max(float(np.max(np.abs(cols[c]))), 1e-30) for c in usable])
    coef = _nnls_small(x / scale, y) / scale
    full = dict.fromkeys(_TERMS, 0.0)
    full.update({c: float(v) for c, v in zip(usable, coef, strict=False)})
    pred = x @ coef
    return Law(intercept_ns=full["intercept"], per_token_ns=full["tokens"],
               per_attention_ns=full["attention"], terms=tuple(usable),
               method="nnls" if len(usable) > 1 else "intercept-only", n=len(y),
               rmse_ns=float(np.sqrt(np.mean((y - pred) ** 2))) if len(y) else 0.0)


def _anchor_prefill(law: Law, decode: Law, tokens: int, mean_ns: float) -> Law:
    """Single prefill length: fixed step cost from decode (one token), the rest per token."""
    fixed = decode.intercept_ns + decode.per_token_ns
    if law.method != "intercept-only" or tokens <= 1 or fixed >= mean_ns:
        return law
    return msgspec.structs.replace(
        law, intercept_ns=fixed, per_token_ns=(mean_ns - fixed) / tokens,
        method="anchored-on-decode")


class StepTimeModel(msgspec.Struct, frozen=True, kw_only=True):
    """Fitted step-time laws (host and GPU kept apart) and their calibration range."""

    prefill_gpu: Law
    prefill_host: Law
    decode_gpu: Law
    decode_host: Law
    calibration: CalibrationRange
    source: str = ""
    """Where the records came from (sim id, config, file)."""

    @classmethod
    def fit(cls, records: Iterable[StepRecord], *, source: str = "") -> StepTimeModel:
        """Fit from per-step records; needs at least one prefill and one decode step."""
        recs = list(records)
        pre = [r for r in recs if r.kind == "prefill"]
        dec = [r for r in recs if r.kind == "decode"]
        if not pre:
            raise ValidationError("no prefill steps to fit a prefill law from", field="records")
        if not dec:
            raise ValidationError("no decode steps to fit a decode law from", field="records")

        def arrays(rs: Sequence[StepRecord]) -> tuple[np.ndarray, ...]:
            tok = np.array([r.tokens for r in rs], dtype=float)
            ctx = np.array([r.context for r in rs], dtype=float)
            return (tok, tok * ctx, np.array([r.gpu_ns for r in rs], dtype=float),
                    np.array([r.host_ns for r in rs], dtype=float))

        ptok, patt, pgpu, phost = arrays(pre)
        dtok, datt, dgpu, dhost = arrays(dec)
        decode_gpu = _fit_law(dtok, datt, dgpu)
        decode_host = _fit_law(dtok, datt, dhost)
        prefill_gpu = _fit_law(ptok, patt, pgpu)
        prefill_host = _fit_law(ptok, patt, phost)
        if np.ptp(ptok) == 0:
            p0 = int(ptok[0])
            prefill_gpu = _anchor_prefill(prefill_gpu, decode_gpu, p0, float(pgpu.mean()))
            prefill_host = _anchor_prefill(prefill_host, decode_host, p0, float(phost.mean()))
        cal = CalibrationRange(
            prefill_tokens_min=min(r.tokens for r in pre), prefill_tokens_max=max(r.tokens for r in pre),
            decode_context_min=min(r.context for r in dec), decode_context_max=max(r.context for r in dec),
            decode_batch_min=min(r.batch for r in dec), decode_batch_max=max(r.batch for r in dec),
            prefill_records=len(pre), decode_records=len(dec))
        return cls(prefill_gpu=prefill_gpu, prefill_host=prefill_host, decode_gpu=decode_gpu,
                   decode_host=decode_host, calibration=cal, source=source)

    # ---- prediction ----------------------------------------------------------------------

    def predict_prefill(self, tokens: int, *, context: int | None = None,
                        extrapolator: KernelExtrapolator | None = None) -> StepEstimate:
        """Time of a prefill step of ``tokens`` new tokens (``context`` after it; default tokens)."""
        if tokens < 1:
            raise ValidationError("must be >= 1", field="tokens")
        ctx = tokens if context is None else context
        if ctx < tokens:
            raise ValidationError("must be >= tokens", field="context")
        cal = self.calibration
        gaps = {}
        oor = _out_of_range(tokens, cal.prefill_tokens_min, cal.prefill_tokens_max)
        if oor is not None:
            gaps["prefill_tokens"] = oor
        host = self.prefill_host.value(tokens, tokens * ctx)
        gpu = self.prefill_gpu.value(tokens, tokens * ctx)
        method = "fit"
        if gaps and extrapolator is not None and extrapolator.has("prefill"):
            edge = _clamp(tokens, cal.prefill_tokens_min, cal.prefill_tokens_max)
            edge_ctx = edge + (ctx - tokens)
            ratio = extrapolator.ratio("prefill", (tokens, ctx, 1), (edge, edge_ctx, 1))
            gpu = self.prefill_gpu.value(edge, edge * edge_ctx) * ratio
            method = "kernel-model"
        return StepEstimate(kind="prefill", host_ns=host, gpu_ns=gpu, total_ns=host + gpu,
                            extrapolated=bool(gaps), extrapolation=gaps, method=method)

    def predict_decode(self, batch: int, context: int, *,
                       extrapolator: KernelExtrapolator | None = None) -> StepEstimate:
        """Time of a decode step of ``batch`` sequences each at ``context`` tokens after the step."""
        if batch < 1:
            raise ValidationError("must be >= 1", field="batch")
        if context < 1:
            raise ValidationError("must be >= 1", field="context")
        cal = self.calibration
        gaps = {}
        for dim, value, low, high in (
            ("decode_batch", batch, cal.decode_batch_min, cal.decode_batch_max),
            ("decode_context", context, cal.decode_context_min, cal.decode_context_max),
        ):
            oor = _out_of_range(value, low, high)
            if oor is not None:
                gaps[dim] = oor
        host = self.decode_host.value(batch, batch * context)
        gpu = self.decode_gpu.value(batch, batch * context)
        method = "fit"
        if gaps and extrapolator is not None and extrapolator.has("decode"):
            eb = _clamp(batch, cal.decode_batch_min, cal.decode_batch_max)
            ec = _clamp(context, cal.decode_context_min, cal.decode_context_max)
            ratio = extrapolator.ratio("decode", (batch, context, batch), (eb, ec, eb))
            gpu = self.decode_gpu.value(eb, eb * ec) * ratio
            method = "kernel-model"
        return StepEstimate(kind="decode", host_ns=host, gpu_ns=gpu, total_ns=host + gpu,
                            extrapolated=bool(gaps), extrapolation=gaps, method=method)

    def step_cost(self) -> StepCost:
        """Host+GPU coefficients in the form the serving simulator evaluates per step."""
        return StepCost.from_model(self)

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def from_json(cls, data: bytes | str, *, source: str = "step model") -> StepTimeModel:
        """Decode; errors name ``source`` and the offending field."""
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as exc:
            raise ValidationError(str(exc), field=source) from None
        except msgspec.DecodeError as exc:
            raise ValidationError(f"not valid JSON: {exc}", field=source) from None


@dataclass(frozen=True, slots=True)
class StepCost:
    """Wall time (host + GPU) of a mixed step, as plain floats for the simulator's hot loop.

    A step with prefill chunks (``prefill_tokens`` new tokens, attention
    ``prefill_attention`` = sum of chunk tokens x context after the chunk) and
    ``decode_batch`` decoding sequences (attention ``decode_context`` = sum of their
    contexts) costs: the larger of the two fixed step costs of the kinds present,
    plus each kind's per-token and per-attention terms.
    """

    p0: float
    p1: float
    p2: float
    d0: float
    d1: float
    d2: float

    @classmethod
    def from_model(cls, m: StepTimeModel) -> StepCost:
        pg, ph, dg, dh = m.prefill_gpu, m.prefill_host, m.decode_gpu, m.decode_host
        return cls(p0=pg.intercept_ns + ph.intercept_ns, p1=pg.per_token_ns + ph.per_token_ns,
                   p2=pg.per_attention_ns + ph.per_attention_ns,
                   d0=dg.intercept_ns + dh.intercept_ns, d1=dg.per_token_ns + dh.per_token_ns,
                   d2=dg.per_attention_ns + dh.per_attention_ns)

    def step_ns(self, prefill_tokens: float, prefill_attention: float,
                decode_batch: float, decode_context: float) -> float:
        fixed = 0.0
        if prefill_tokens > 0:
            fixed = self.p0
        if decode_batch > 0 and self.d0 > fixed:
            fixed = self.d0
        return (fixed + self.p1 * prefill_tokens + self.p2 * prefill_attention
                + self.d1 * decode_batch + self.d2 * decode_context)

    def mixed_step_ns(self, chunks: Sequence[tuple[int, int]], decode_batch: int,
                      decode_context: int) -> float:
        """A step of prefill ``chunks`` (new tokens, cached tokens before them) and
        ``decode_batch`` decodes whose contexts sum to ``decode_context``."""
        ptok = 0
        patt = 0
        for new, cached in chunks:
            ptok += new
            patt += new * (new + cached)
        return self.step_ns(ptok, patt, decode_batch, decode_context)

    def decode_steps_ns(self, decode_batch: np.ndarray, decode_context: np.ndarray) -> np.ndarray:
        """Pure-decode steps, one per entry: the batch and the sum of its contexts."""
        return self.d0 + self.d1 * np.asarray(decode_batch, dtype=float) \
            + self.d2 * np.asarray(decode_context, dtype=float)


class StepCostModel(Protocol):
    """What the serving simulator asks of a step-time source: the wall time of a step from
    its shape (:class:`StepCost`'s fitted law, or a model described from its config)."""

    def mixed_step_ns(self, chunks: Sequence[tuple[int, int]], decode_batch: int,
                      decode_context: int) -> float: ...

    def decode_steps_ns(self, decode_batch: np.ndarray, decode_context: np.ndarray) -> np.ndarray: ...


class StepTimeSource(Protocol):
    """Anything :func:`cascade.serving.scenario.simulate` takes as the step-time model."""

    @property
    def source(self) -> str: ...

    def step_cost(self) -> StepCostModel: ...


# ---- kernel-model extrapolation --------------------------------------------------------------

PredictTable = Callable[[KernelTable], np.ndarray]


class KernelExtrapolator:
    """Re-shapes the kernels of a reference step and asks a kernel model for the time ratio.

    ``references`` maps 'prefill' / 'decode' to the kernels of one step of that
    kind (rows carrying ``step_tokens`` and ``step_context``); ``predict_table``
    returns one predicted duration (ns) per row of a KernelTable.
    """

    def __init__(self, references: dict[str, KernelTable], predict_table: PredictTable) -> None:
        from cascade.serving.reshape import step_shape

        self._refs = {k: v for k, v in references.items() if len(v)}
        self._shapes = {k: step_shape(v, k) for k, v in self._refs.items()}
        self._predict = predict_table

    @classmethod
    def from_table(cls, table: KernelTable, predict_table: PredictTable) -> KernelExtrapolator:
        """Pick the largest prefill step and the longest-context decode step of a step-annotated
        KernelTable as references."""
        refs: dict[str, KernelTable] = {}
        steps = table["step"]
        kinds = table["step_kind"]
        for kind, key in (("prefill", "step_tokens"), ("decode", "step_context")):
            mask = (kinds == kind) & (steps >= 0)
            if not np.any(mask):
                continue
            size = table[key]
            best = int(steps[mask][np.argmax(size[mask])])
            refs[kind] = table.take(steps == best)
        return cls(refs, predict_table)

    def has(self, kind: str) -> bool:
        return kind in self._refs

    def predict_ns(self, kind: str, tokens: int, context: int, batch: int) -> float:
        """Kernel-model GPU time of the reference step re-shaped to (tokens, context, batch)."""
        from cascade.serving.reshape import reshape_kernels

        table = reshape_kernels(self._refs[kind], tokens=tokens, context=context, batch=batch)
        pred = np.asarray(self._predict(table), dtype=float)
        if pred.shape != (len(table),):
            raise ValueError(f"predict_table returned shape {pred.shape}, expected ({len(table)},)")
        return float(np.nansum(pred))

    def ratio(self, kind: str, target: tuple[int, int, int], anchor: tuple[int, int, int]) -> float:
        """predict(target) / predict(anchor) for (tokens, context, batch) shapes."""
        base = self.predict_ns(kind, *anchor)
        if base <= 0:
            return 1.0
        return self.predict_ns(kind, *target) / base


def records_from_table(table: KernelTable) -> list[StepRecord]:
    """One StepRecord per step of a step-annotated KernelTable (kernels with ``step`` >= 0).

    GPU time is the sum of the step's ``duration_ns``; host time is the step's wall span
    (first host launch to last kernel end) minus that sum when ``host_launch_ns`` and
    ``start_ns`` are known, else 0. Decode steps have batch = step_tokens; prefill batch 1.
    """
    steps = table["step"]
    dur = table["duration_ns"]
    if not table.has("step") or not np.any(steps >= 0):
        raise ValidationError("no rows with a step index (column 'step')", field="step")
    if np.all(np.isnan(dur[steps >= 0])):
        raise ValidationError("no measured or predicted durations", field="duration_ns")
    kinds, tokens, context = table["step_kind"], table["step_tokens"], table["step_context"]
    launch, start = table["host_launch_ns"], table["start_ns"]
    out: list[StepRecord] = []
    for s in np.unique(steps[steps >= 0]):
        idx = np.flatnonzero(steps == s)
        kind_vals = [k for k in kinds[idx] if k]
        if not kind_vals or kind_vals[0] not in ("prefill", "decode"):
            raise ValidationError(f"step {int(s)} has no step_kind 'prefill' or 'decode'",
                                  field="step_kind")
        kind = kind_vals[0]
        ntok = int(np.max(tokens[idx]))
        nctx = int(np.max(context[idx]))
        if ntok < 1:
            raise ValidationError(f"step {int(s)} has no step_tokens", field="step_tokens")
        if nctx < 1:
            nctx = ntok
        gpu = float(np.nansum(dur[idx]))
        host = 0.0
        if not np.any(np.isnan(launch[idx])) and not np.any(np.isnan(start[idx])):
            wall = float(np.max(start[idx] + np.nan_to_num(dur[idx])) - np.min(launch[idx]))
            host = max(0.0, wall - gpu)
        out.append(StepRecord(kind=kind, tokens=ntok, batch=ntok if kind == "decode" else 1,
                              context=nctx, host_ns=host, gpu_ns=gpu))
    return out
