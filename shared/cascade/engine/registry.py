"""The kernel models by name: :data:`MODELS`, filled here explicitly, and the tagged union of
their configs (:data:`ModelConfig`) that a run request and a sim job carry.

A new model: a class with ``name``, ``config_type`` (a frozen Struct tagged with the name,
``tag_field="kind"``) and ``predict``, registered below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

import msgspec

from cascade.engine.accelsim import AccelSimConfig, AccelSimModel
from cascade.engine.analytical import AnalyticalConfig, AnalyticalModel
from cascade.engine.base import KernelModel
from cascade.engine.llm import LlmConfig, LlmModel
from cascade.engine.models import (
    AutoConfig,
    AutoModel,
    RooflineConfig,
    RooflineModel,
    ScaledConfig,
    ScaledModel,
)
from cascade.errors import ValidationError
from cascade.registry import Registry

#: Kernel model factories by name.
MODELS: Registry[Callable[[], KernelModel]] = Registry("kernel model")

MODELS.register("auto", AutoConfig, AutoModel)
MODELS.register("analytical", AnalyticalConfig, AnalyticalModel)
MODELS.register("scaled", ScaledConfig, ScaledModel)
MODELS.register("roofline", RooflineConfig, RooflineModel)
MODELS.register("accel-sim", AccelSimConfig, AccelSimModel)
MODELS.register("llm", LlmConfig, LlmModel)

#: One model and its settings, as a run carries it: ``{"kind": "auto"}``,
#: ``{"kind": "scaled", "alpha_gemm": 1.0}``, ... (the members are :data:`MODELS`' configs).
ModelConfig = Union[MODELS.config_types()]  # type: ignore[valid-type]  # noqa: UP007


def get_model(name: str) -> KernelModel:
    """A model instance by name; unknown names raise :class:`UnknownNameError`."""
    return MODELS.impl(name)()


def model_names() -> list[str]:
    """Registered model names, in registration order (``auto`` first)."""
    return [name for name, _ in MODELS.items()]


def model_config(value: Any, field: str = "model") -> msgspec.Struct:
    """A model config from a name, a ``{"kind": name, ...}`` mapping or a config Struct
    (ValidationError naming ``field`` otherwise)."""
    return MODELS.resolve(value, field)


def model_name(config: msgspec.Struct) -> str:
    """The registered name of a model config (its tag)."""
    return str(type(config).__struct_config__.tag)


def default_config(name: str) -> msgspec.Struct:
    """The default config of model ``name``."""
    return MODELS.get(name)[0]()


__all__ = ["MODELS", "ModelConfig", "ValidationError", "default_config", "get_model", "model_config",
           "model_name", "model_names"]
