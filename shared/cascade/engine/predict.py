"""``predict``: kernel durations of a table on target GPUs, with provenance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from cascade.calibration import Calibration, load_calibration
from cascade.calibration.accuracy import (
    AccuracyEstimate,
    calibrated_in,
    expected_accuracy,
    widen_total,
)
from cascade.engine.base import ModelContext, ModelOutput
from cascade.engine.extrapolation import (
    BOUND_ONLY,
    INFERRED_BLEND,
    INFERRED_FROM_NAME,
    OFF_TENSOR,
    SHAPE_OUTSIDE,
    TARGET_UNCALIBRATED,
    TF32_CONV,
    UNSEEN_TILES,
    WINDOW,
    describe_flags,
)
from cascade.engine.perf import REGIMES
from cascade.engine.registry import get_model
from cascade.engine.workload import Workload, workload_of
from cascade.gpus.registry import GPURegistry, default_registry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable


class PredictionProvenance(msgspec.Struct, frozen=True, kw_only=True):
    """Where a prediction came from."""

    model: str
    """Model requested (``auto`` may use several: see ``Prediction.models``)."""
    spec_id: str
    spec_hash: str
    source_id: str = ""
    source_hash: str = ""
    calibration_id: str
    calibration_version: str
    calibration_digest: str
    measurement: str = "kernel"
    """How the source durations were measured (calibration context of the figures below)."""
    accuracy: AccuracyEstimate = AccuracyEstimate()
    """The calibration's measured error for this situation, which measurement that is, and
    whether each GPU was calibrated (:mod:`cascade.calibration.accuracy`)."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted device durations of every kernel of a table on one target GPU."""

    target: str
    """Target spec id."""
    predicted_ns: np.ndarray
    """Predicted duration per kernel, ns (float64)."""
    regime: np.ndarray
    """Regime code per kernel (index into :data:`cascade.engine.perf.REGIMES`)."""
    models: np.ndarray
    """Name of the model that produced each row."""
    provenance: PredictionProvenance
    flags: np.ndarray | None = None
    """Per-kernel extrapolation bits (:data:`cascade.engine.extrapolation.EXTRAPOLATION_REASONS`);
    None when the model flags nothing."""
    counts: Mapping[str, int] | None = None
    """Kernels per model that predicted them (what the accuracy estimate was read for)."""
    bracket: tuple[np.ndarray, np.ndarray] | None = None
    """Per kernel, the physical least and most target time (NaN where none holds): see
    :attr:`cascade.engine.base.ModelOutput.bracket`."""

    @property
    def extrapolated(self) -> np.ndarray:
        """Per kernel: True where the prediction leaves what the calibration was fitted on."""
        if self.flags is None:
            return np.zeros(len(self.predicted_ns), dtype=bool)
        return self.flags != 0

    @property
    def extrapolation_reasons(self) -> dict[str, int]:
        """Kernels per extrapolation reason (only reasons that occur)."""
        return {} if self.flags is None else describe_flags(self.flags)

    @property
    def regime_names(self) -> np.ndarray:
        """Regime per kernel as strings (compute, memory, latency, launch)."""
        return np.asarray(REGIMES, dtype=object)[self.regime]

    @property
    def total_ns(self) -> float:
        """Sum of predicted durations."""
        return float(np.sum(self.predicted_ns))


def _spec(reg: GPURegistry, spec: str | GPUSpec) -> GPUSpec:
    return spec if isinstance(spec, GPUSpec) else reg.get(spec)


def predict_many(
    table: KernelTable,
    targets: Sequence[str | GPUSpec],
    *,
    source: str | GPUSpec | None = None,
    model: str = "auto",
    calibration: Calibration | None = None,
    config: Any = None,
    registry: GPURegistry | None = None,
    workload: Workload | None = None,
) -> list[Prediction]:
    """Predict a table on several targets, deriving the per-kernel work once."""
    reg = registry or default_registry()
    cal = calibration or load_calibration()
    src = _spec(reg, source) if source is not None else None
    impl = get_model(model)
    if config is not None and not isinstance(config, impl.config_type):
        from cascade.errors import ValidationError

        raise ValidationError(f"model {model!r} takes a {impl.config_type.__name__} config", field="config")
    w = workload if workload is not None else workload_of(table)
    archs = {s.id: s.arch for s in reg}
    ctx = ModelContext(source=src, calibration=cal, config=config, archs=archs)
    measurement = measurement_of_config(config if config is not None else impl.config_type())
    digest = cal.digest()
    out = []
    for t in targets:
        spec = _spec(reg, t)
        res = impl.predict(table, w, spec, ctx)
        counts = _counts(model, res)
        acc = accuracy_of(cal, src.id if src else None, spec.id, measurement, model, counts,
                          res.flags, res.predicted_ns)
        if counts.get("llm", 0) * 2 > len(table):  # mostly LLM operators: their protocol's figure
            acc = llm_accuracy(table, src.id if src else None, spec, acc)
        prov = PredictionProvenance(
            model=model, spec_id=spec.id, spec_hash=spec.spec_hash(),
            source_id=src.id if src else "", source_hash=src.spec_hash() if src else "",
            calibration_id=cal.id, calibration_version=cal.version, calibration_digest=digest,
            measurement=measurement, accuracy=acc,
        )
        out.append(Prediction(target=spec.id, predicted_ns=res.predicted_ns.astype(np.float64),
                              regime=res.regime, models=res.model, provenance=prov, flags=res.flags,
                              counts=counts, bracket=res.bracket))
    return out


@dataclass(slots=True)
class PredictionTotals:
    """One target's predictions summed over the batches of a streamed table."""

    first: Prediction
    kernels: int = 0
    total_ns: float = 0.0
    counts: dict[str, int] | None = None
    flags: list[np.ndarray] | None = None
    uncovered_ns: float = 0.0
    """Predicted time in kernels of regimes no data set covers (:func:`uncovered_mask`)."""
    window_ns: float = 0.0
    """Predicted time in convolution and pooling kernels (:func:`window_mask`)."""

    def add(self, pred: Prediction) -> None:
        """Count one more batch's predictions of this target."""
        self.kernels += len(pred.predicted_ns)
        self.total_ns += pred.total_ns
        if pred.flags is not None:
            self.uncovered_ns += float(np.nansum(pred.predicted_ns[uncovered_mask(pred.flags)]))
            self.window_ns += float(np.nansum(pred.predicted_ns[window_mask(pred.flags)]))
        counts = self.counts if self.counts is not None else {}
        for name, n in (pred.counts or {}).items():
            counts[name] = counts.get(name, 0) + n
        self.counts = counts
        if pred.flags is not None:
            self.flags = [*(self.flags or []), pred.flags]

    @property
    def all_flags(self) -> np.ndarray | None:
        """Every flagging batch's extrapolation bits (for counts; None when nothing flagged)."""
        return np.concatenate(self.flags) if self.flags else None

    def provenance(self, cal: Calibration) -> PredictionProvenance:
        """The first batch's provenance with the accuracy read for every batch's kernels."""
        pv = self.first.provenance
        if (self.counts or {}).get("llm", 0) * 2 > self.kernels:  # LLM operators: their protocol's
            return pv  # figure, read for the first batch's rows (predict_many: llm_accuracy)
        acc = accuracy_of(cal, pv.source_id or None, pv.spec_id, pv.measurement, pv.model,
                          self.counts or {}, self.all_flags,
                          share=self.uncovered_ns / self.total_ns if self.total_ns > 0 else 0.0,
                          window_share=self.window_ns / self.total_ns if self.total_ns > 0 else 0.0)
        return msgspec.structs.replace(pv, accuracy=acc)


def _counts(model: str, res: ModelOutput) -> dict[str, int]:
    if res.counts is not None:
        return dict(res.counts)
    if model != "auto":  # one model for every row: no need to count names
        return {model: len(res.predicted_ns)}
    names, n = np.unique(res.model.astype(str), return_counts=True)
    return {str(k): int(v) for k, v in zip(names, n, strict=True)}


#: Extrapolation bits of kernels in regimes no data set covers (their share of the time widens a
#: whole trace's quoted error: :func:`cascade.calibration.accuracy.widen_total`).
UNCOVERED = (SHAPE_OUTSIDE | BOUND_ONLY | INFERRED_FROM_NAME | INFERRED_BLEND | OFF_TENSOR | TF32_CONV | UNSEEN_TILES)


def uncovered_mask(flags: np.ndarray) -> np.ndarray:
    """Kernels of regimes no data set covers (:data:`UNCOVERED`), window kernels aside (quoted at
    their own family's figure: :func:`window_mask`)."""
    return ((flags & UNCOVERED) != 0) & ((flags & WINDOW) == 0)


def window_mask(flags: np.ndarray) -> np.ndarray:
    """Convolution and pooling kernels predicted on another GPU (:data:`WINDOW`)."""
    return (flags & WINDOW) != 0


def uncovered_share(flags: np.ndarray | None, times: np.ndarray | None, *, window: bool = False) -> float:
    """Share (0-1) of the predicted time (of the kernels, where no times) in kernels of regimes no
    data set covers (:func:`uncovered_mask`), or with ``window`` in window kernels
    (:func:`window_mask`)."""
    if flags is None or len(flags) == 0:
        return 0.0
    hit = window_mask(flags) if window else uncovered_mask(flags)
    if times is None or len(times) != len(flags):
        return float(hit.mean())
    t = np.nan_to_num(np.asarray(times, dtype=float))
    total = float(t.sum())
    return float(t[hit].sum() / total) if total > 0 else float(hit.mean())


def accuracy_of(cal: Calibration, source_id: str | None, target_id: str, measurement: str, model: str,
                counts: Mapping[str, int], flags: np.ndarray | None,
                times: np.ndarray | None = None, *, share: float | None = None,
                window_share: float | None = None) -> AccuracyEstimate:
    """The measured accuracy of the model that actually predicted the kernels (``counts``:
    kernels per model that predicted them; ``flags``: their extrapolation bits): ``auto``
    reads the figure of the model behind most of its rows (kernels it could only bound,
    by ``roofline``, are flagged, not counted); a mix says for how many kernels it holds."""
    if any(a is not None and len(a) == 0 for a in (flags, times)):  # an empty table: no figure holds for nothing
        return AccuracyEstimate(basis="no kernels: nothing was predicted",
                                target_calibrated=calibrated_in(cal, target_id, measurement))
    used = {k: int(v) for k, v in counts.items() if v and k != "roofline"}
    if model not in ("auto", "analytical"):  # (analytical: from features or from the work, by its rows)
        main = model
    elif used:
        main = max(used, key=lambda k: used[k])
    else:
        main = "roofline" if model == "auto" else model
    est = expected_accuracy(cal, source_id, target_id, measurement, main)
    counted = None if flags is None else (flags & BOUND_ONLY) == 0
    if flags is not None and counted is not None and counted.any():  # as the rows' model judged it
        target_fitted = not np.any(flags[counted] & TARGET_UNCALIBRATED)
        if target_fitted != est.target_calibrated:
            est = msgspec.structs.replace(est, target_calibrated=target_fitted)
    if model in ("auto", "analytical") and len(used) > 1:
        others = ", ".join(f"{v} by {k}" for k, v in sorted(used.items()) if k != main)
        est = msgspec.structs.replace(est, basis=f"{est.basis}; for the {used[main]} kernels "
                                                 f"predicted by {main} ({others})")
    return widen_total(cal, est, uncovered_share(flags, times) if share is None else share,
                       uncovered_share(flags, times, window=True) if window_share is None else window_share,
                       model=main)


def llm_accuracy(table: KernelTable, source_id: str | None, target: GPUSpec,
                 base: AccuracyEstimate) -> AccuracyEstimate:
    """``base`` with the LLM-kernel protocol's figure for the table's LLM rows
    (:func:`cascade.llm.model.expected_error`)."""
    from cascade.llm.model import expected_error, load_llm_calibration

    err = expected_error(load_llm_calibration(), table, source_id, target)
    if err.mape_pct is None:
        return msgspec.structs.replace(base, basis=f"{base.basis}; LLM operators: {err.basis}")
    return msgspec.structs.replace(base, mape_pct=err.mape_pct, worst_pct=err.worst_pct, cells=err.cells,
                                   basis=err.basis)


def measurement_of_config(config: Any) -> str:
    """The measurement kind a model config names (``kernel`` when it names none)."""
    for obj in (config, getattr(config, "scaled", None)):
        found = getattr(obj, "measurement", None)
        if isinstance(found, str) and found:
            return found
    return "kernel"


def predict(
    table: KernelTable,
    target: str | GPUSpec,
    *,
    source: str | GPUSpec | None = None,
    model: str = "auto",
    calibration: Calibration | None = None,
    config: Any = None,
    registry: GPURegistry | None = None,
) -> Prediction:
    """Predict every kernel's device duration on ``target``.

    ``source`` is the GPU the table's ``duration_ns`` were measured on (needed by
    ``scaled``; ``auto`` uses ``scaled`` for rows with a measured duration when a
    source is given). ``model`` is a registered model name (see
    :func:`cascade.engine.models.model_names`); ``config`` its config Struct.
    """
    return predict_many(table, [target], source=source, model=model, calibration=calibration,
                        config=config, registry=registry)[0]
