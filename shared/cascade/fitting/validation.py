"""Cross-GPU accuracy on measured data: predict each GPU from another GPU's times."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from cascade.calibration import Calibration
from cascade.engine.analytical import AnalyticalConfig
from cascade.engine.models import RooflineConfig, ScaledConfig
from cascade.engine.predict import predict
from cascade.fitting.measured import Pair
from cascade.gpus.registry import GPURegistry

#: Models `cascade validate` reports by default (roofline is the baseline).
DEFAULT_MODELS: tuple[str, ...] = ("roofline", "scaled", "analytical")


class ErrorStats(msgspec.Struct, frozen=True, kw_only=True):
    """Absolute-percentage-error statistics of one (dataset, family, GPU pair, model)."""

    kind: str
    dataset: str
    family: str
    source: str
    target: str
    model: str
    count: int
    mape: float
    median_ape: float
    p90_ape: float


def model_config(model: str, measurement: str) -> msgspec.Struct | None:
    """The config a model gets for data of a measurement kind."""
    if model == "scaled":
        return ScaledConfig(measurement=measurement)
    if model == "analytical":
        return AnalyticalConfig(measurement=measurement)
    if model == "roofline":
        return RooflineConfig()
    return None


def pair_predictions(pair: Pair, model: str, cal: Calibration, reg: GPURegistry | None = None) -> np.ndarray:
    """Predicted target durations of a pair's rows."""
    measurement = pair.source.measurement
    p = predict(pair.source_table, pair.target.spec, source=pair.source.spec, model=model,
                calibration=cal, config=model_config(model, measurement), registry=reg)
    return p.predicted_ns


def ape(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Absolute percentage error, %."""
    return np.abs(pred / measured - 1.0) * 100.0


def _stats(errs: np.ndarray) -> tuple[int, float, float, float]:
    if len(errs) == 0:
        return 0, float("nan"), float("nan"), float("nan")
    return (len(errs), float(np.mean(errs)), float(np.median(errs)), float(np.percentile(errs, 90)))


def evaluate(
    pairs: Sequence[Pair],
    cal: Calibration,
    models: Sequence[str] = DEFAULT_MODELS,
    *,
    reg: GPURegistry | None = None,
    select: dict[tuple[str, str, str], np.ndarray] | None = None,
) -> list[ErrorStats]:
    """Per (dataset, family, pair, model) error statistics, plus an ``all`` family per pair.

    ``select`` optionally restricts each pair (keyed by (dataset, source spec id,
    target spec id)) to a boolean mask of its rows, e.g. a held-out split.
    """
    out: list[ErrorStats] = []
    for pair in pairs:
        mask = np.ones(len(pair.keys), dtype=bool)
        if select is not None:
            mask = select.get((pair.source.dataset, pair.source.spec.id, pair.target.spec.id), mask)
        for model in models:
            errs = ape(pair_predictions(pair, model, cal, reg), pair.target_ns)
            fams = sorted(set(pair.groups[mask].tolist()))
            for fam in [*fams, "all"] if len(fams) > 1 else fams:
                sel = mask if fam == "all" else mask & (pair.groups == fam)
                count, mape, med, p90 = _stats(errs[sel])
                out.append(ErrorStats(kind=pair.source.kind, dataset=pair.source.dataset, family=fam,
                                      source=pair.source.spec.id, target=pair.target.spec.id,
                                      model=model, count=count, mape=mape, median_ape=med, p90_ape=p90))
    return out
