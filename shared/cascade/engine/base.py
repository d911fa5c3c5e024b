"""What every kernel model shares: its context, its output and the protocol it implements.

Models live beside their config Structs (:mod:`cascade.engine.models`,
:mod:`cascade.engine.analytical`, :mod:`cascade.engine.accelsim`) and are registered by
name in :mod:`cascade.engine.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import numpy as np

from cascade.calibration import Calibration
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What a model may use besides the table: source spec, calibration, its config."""

    source: GPUSpec | None
    calibration: Calibration
    config: Any
    archs: dict[str, str] = field(default_factory=dict)
    """Spec id -> arch for every spec the calibration may name."""


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """Per-kernel predictions of one model on one target."""

    predicted_ns: np.ndarray
    regime: np.ndarray
    model: np.ndarray
    """Per-kernel name of the model that produced the row (auto mixes models)."""
    flags: np.ndarray | None = None
    """Per-kernel extrapolation bits (:func:`cascade.engine.extrapolation.extrapolation_flags`);
    None: the model flags nothing (``roofline`` is a bound, not a calibrated estimate)."""
    counts: dict[str, int] | None = None
    """Kernels per model in ``model`` (None: count them from ``model``)."""
    bracket: tuple[np.ndarray, np.ndarray] | None = None
    """Per kernel, the least and most target time its work allows from its measured source
    time (:func:`cascade.engine.crossgpu.bracket_ns`), NaN where no bracket holds it (a GEMM the
    fit covers, no measured time); None: the model keeps none."""


class KernelModel(Protocol):
    """A named kernel-time model."""

    @property
    def name(self) -> str:
        """The name it is registered under."""
        ...

    @property
    def config_type(self) -> type[msgspec.Struct]:
        """Its frozen config Struct (tagged with the name)."""
        ...

    def predict(self, table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext) -> ModelOutput:
        """Predict every kernel's device time on ``target``."""
        ...


def model_column(n: int, name: str) -> np.ndarray:
    """A per-kernel ``model`` column holding ``name`` ``n`` times."""
    out = np.empty(n, dtype=object)
    out[:] = name
    return out


def source_durations(table: KernelTable) -> np.ndarray:
    """Measured source durations (NaN where unknown or not positive)."""
    d = table["duration_ns"].astype(np.float64)
    return np.where(d > 0, d, np.nan)
