"""Request model and serving simulation.

- :mod:`.stepmodel`: step-time model fitted from a finished simulation's steps.
- :mod:`.reshape`: re-shaping a step's kernels for kernel-model extrapolation.
- :mod:`.sim`: discrete-event serving simulator (schedulers ``vllm``, ``static``).
- :mod:`.scenario`: :class:`Scenario` in, :class:`ScenarioResult` out.
- :mod:`.capacity`: highest rate / fewest replicas meeting SLOs.
"""

from cascade.serving.arrivals import (
    ARRIVALS,
    LENGTHS,
    Burst,
    Constant,
    Fixed,
    FromTrace,
    Gamma,
    LogNormal,
    Poisson,
    Trace,
    Uniform,
)
from cascade.serving.kvcache import MODEL_SHAPES, KVConfig, ModelShape
from cascade.serving.metrics import LatencyStats, RequestRecord, Slo
from cascade.serving.reshape import reshape_kernels, roofline_predictor
from cascade.serving.routers import ROUTERS, LeastOutstanding, RoundRobin
from cascade.serving.scenario import Scenario, ScenarioResult, run_scenario
from cascade.serving.schedulers import Sglang, Static, Vllm
from cascade.serving.sim import SCHEDULERS
from cascade.serving.stepmodel import (
    CalibrationRange,
    KernelExtrapolator,
    Law,
    OutOfRange,
    StepEstimate,
    StepRecord,
    StepTimeModel,
    records_from_table,
)

__all__ = [
    "ARRIVALS", "LENGTHS", "MODEL_SHAPES", "ROUTERS", "SCHEDULERS", "Burst", "CalibrationRange",
    "Constant", "Fixed", "FromTrace", "Gamma", "KVConfig", "KernelExtrapolator", "LatencyStats",
    "Law", "LeastOutstanding", "LogNormal", "ModelShape", "OutOfRange", "Poisson",
    "RequestRecord", "RoundRobin", "Scenario", "Sglang", "ScenarioResult", "Slo", "Static", "StepEstimate",
    "StepRecord", "StepTimeModel", "Trace", "Uniform", "Vllm", "records_from_table",
    "reshape_kernels", "roofline_predictor", "run_scenario",
]
