"""``predict``: kernel durations of a table on target GPUs, with provenance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from cascade.calibration import Calibration, load_calibration
from cascade.engine.models import ModelContext, get_model
from cascade.engine.perf import REGIMES
from cascade.engine.workload import Workload, workload_of
from cascade.gpus.registry import GPURegistry, default_registry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
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
    provenance: Provenance

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
    out = []
    for t in targets:
        spec = _spec(reg, t)
        res = impl.predict(table, w, spec, ctx)
        prov = Provenance(
            model=model, spec_id=spec.id, spec_hash=spec.spec_hash(),
            source_id=src.id if src else "", source_hash=src.spec_hash() if src else "",
            calibration_id=cal.id, calibration_version=cal.version, calibration_digest=cal.digest(),
        )
        out.append(Prediction(target=spec.id, predicted_ns=res.predicted_ns.astype(np.float64),
                              regime=res.regime, models=res.model, provenance=prov))
    return out


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
