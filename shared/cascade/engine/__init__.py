"""Cascade's performance engine: kernel models, prediction and timeline replay."""

from cascade.engine.models import (
    KernelModel,
    ModelContext,
    ModelOutput,
    get_model,
    model_names,
    register_model,
)
from cascade.engine.perf import REGIMES
from cascade.engine.predict import Prediction, Provenance, predict, predict_many
from cascade.engine.workload import Workload, workload_of

__all__ = [
    "REGIMES",
    "KernelModel",
    "ModelContext",
    "ModelOutput",
    "Prediction",
    "Provenance",
    "Workload",
    "get_model",
    "model_names",
    "predict",
    "predict_many",
    "register_model",
    "workload_of",
]
