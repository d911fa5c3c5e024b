"""Cascade's performance engine: kernel models, prediction and timeline replay.

Modules: :mod:`~cascade.engine.base` (what models share), :mod:`~cascade.engine.models`,
:mod:`~cascade.engine.analytical`, :mod:`~cascade.engine.accelsim` (the models, each beside its
config), :mod:`~cascade.engine.registry` (models by name, the tagged union of their configs),
:mod:`~cascade.engine.perf` (roofline physics, regimes), :mod:`~cascade.engine.extrapolation`
(extrapolation flags), :mod:`~cascade.engine.convmath` (convolutions and window kernels per GPU),
:mod:`~cascade.engine.crossgpu` (what a measured time allows on another GPU),
:mod:`~cascade.engine.predict` and :mod:`~cascade.engine.replay`.
"""

from cascade.engine.base import KernelModel, ModelContext, ModelOutput
from cascade.engine.perf import REGIMES
from cascade.engine.predict import Prediction, PredictionProvenance, predict, predict_many
from cascade.engine.registry import MODELS, ModelConfig, get_model, model_names
from cascade.engine.workload import Workload, workload_of

__all__ = [
    "MODELS",
    "REGIMES",
    "KernelModel",
    "ModelConfig",
    "ModelContext",
    "ModelOutput",
    "Prediction",
    "PredictionProvenance",
    "Workload",
    "get_model",
    "model_names",
    "predict",
    "predict_many",
    "workload_of",
]
