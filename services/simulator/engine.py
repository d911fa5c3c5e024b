"""The simulator's use of the performance engine: inputs, chunked prediction, replay.

Thin glue between a job and :mod:`cascade.engine`: load the bundle and
decide the source spec and baseline once (:func:`load_inputs`), predict one
chunk of kernels (:func:`predict_chunk`, run in a worker thread), and replay
the whole timeline with the predicted durations (:func:`replay_timeline`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.engine import predict
from cascade.engine.extrapolation import FLAGS_DTYPE
from cascade.engine.perf import REGIMES
from cascade.engine.registry import model_name
from cascade.engine.replay import replay
from cascade.gpus import GPURegistry, GPUSpec, default_registry
from cascade.kerneltable import KernelTable
from cascade.platform.state import TraceRecord
from cascade.runs.results import StepResult, step_sequences
from cascade.traces.bundle import load_bundle

_REGIME_NAMES = np.asarray(REGIMES, dtype=object)


@dataclass(frozen=True)
class SimulationInputs:
    """Everything a simulation needs besides the job: kernels, specs, baseline."""

    table: KernelTable
    target: GPUSpec
    source: GPUSpec | None
    source_id: str
    baseline_e2e_ns: float | None
    """Real (unprofiled) end-to-end time on the target, when the trace recorded one."""
    source_e2e_ns: float | None
    """End-to-end span of the trace as captured on its source GPU."""

    def model_label(self, provenance: Any) -> str:
        """The model name recorded in the result."""
        return str(getattr(provenance, "model", "") or "auto")

    def accuracy(self, provenance: Any, used: Mapping[str, int], flags: np.ndarray,
                 times: np.ndarray | None = None) -> Any:
        """The expected accuracy of the whole sim (its chunks' models and flags together;
        ``times``: the predicted kernel times, which weigh the whole trace's figure)."""
        if provenance is None:
            return None
        from cascade.calibration import load_calibration
        from cascade.engine.predict import accuracy_of

        if used.get("llm", 0) * 2 > sum(used.values()) and getattr(provenance, "accuracy", None) is not None:
            return provenance.accuracy  # LLM operators: their protocol's figure (predict's llm_accuracy)
        return accuracy_of(load_calibration(), self.source.id if self.source else None, self.target.id,
                           provenance.measurement, provenance.model, used, flags, times)

    def calibration_label(self, provenance: Any) -> str:
        """``calibration_id@version`` of the prediction (empty when unknown)."""
        if provenance is None:
            return ""
        return f"{provenance.calibration_id}@{provenance.calibration_version}"


@dataclass(frozen=True)
class ChunkOutput:
    """Predictions of one chunk of kernels."""

    predicted_ns: np.ndarray
    regime: np.ndarray
    """Regime names (compute, memory, latency, launch)."""
    models: Counter[str]
    """Kernels per model that predicted them (``auto`` mixes models)."""
    extrapolated: int
    reasons: dict[str, int]
    """Kernels per extrapolation reason in this chunk."""
    flags: np.ndarray
    """Per-kernel extrapolation bits (0 where the model flags nothing)."""
    provenance: Any


@dataclass(frozen=True)
class ReplayOutput:
    """Timeline replay with predicted durations."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    e2e_ns: float
    steps: list[StepResult]


def baseline_for(trace: TraceRecord, config_id: str, source_id: str) -> float | None:
    """The real end-to-end baseline (ns) of ``config_id`` from the trace's recorded baseline.

    ``TraceRecord.baseline`` keys: ``e2e_ms`` (measured on the source GPU),
    ``e2e_ms:{SPEC_ID}`` (measured on another GPU); ``e2e_ns`` variants likewise.
    """
    b = trace.baseline
    for key, scale in ((f"e2e_ns:{config_id}", 1.0), (f"e2e_ms:{config_id}", 1e6)):
        if key in b and b[key] > 0:
            return float(b[key]) * scale
    if config_id == source_id:
        for key, scale in (("e2e_ns", 1.0), ("e2e_ms", 1e6)):
            if key in b and b[key] > 0:
                return float(b[key]) * scale
    return None


def load_inputs(folder: Path, trace: TraceRecord, target: GPUSpec, model: str,
                registry: GPURegistry | None = None) -> SimulationInputs:
    """Load a local bundle and resolve source spec (built-in, or custom ones in ``registry``)
    and baseline for one target."""
    bundle = load_bundle(folder)
    reg = registry or default_registry()
    source_name = bundle.manifest.source_gpu or trace.source_gpu
    source = reg.resolve(source_name) if source_name else None
    source_id = source.id if source is not None else source_name
    span = bundle.manifest.baseline.get("span_ns")
    return SimulationInputs(
        table=bundle.kernels, target=target, source=source, source_id=source_id,
        baseline_e2e_ns=baseline_for(trace, target.id, source_id),
        source_e2e_ns=float(span) if span else None,
    )


def predict_chunk(part: KernelTable, inputs: SimulationInputs, model: msgspec.Struct) -> ChunkOutput:
    """Predict one chunk of kernels on the target with ``model`` (a model config: its tag names
    the model) (CPU-bound: call it in a thread)."""
    pred = predict(part, inputs.target, source=inputs.source, model=model_name(model), config=model)
    names = [str(m) for m in pred.models]
    return ChunkOutput(
        predicted_ns=pred.predicted_ns, regime=_REGIME_NAMES[pred.regime.astype(np.int64)],
        models=Counter(names), extrapolated=int(pred.extrapolated.sum()),
        reasons=pred.extrapolation_reasons, provenance=pred.provenance,
        flags=pred.flags if pred.flags is not None else np.zeros(len(part), dtype=FLAGS_DTYPE),
    )




def replay_timeline(table: KernelTable, predicted_ns: np.ndarray) -> ReplayOutput:
    """Replay the trace's timeline with predicted durations (:func:`cascade.engine.replay.replay`).

    Per step: wall span from its first host launch to its last kernel's end,
    GPU time (sum of predicted durations) and host time not hidden behind GPU
    work (span minus GPU time, at least 0), as :class:`StepResult`.
    """
    rep = replay(table, predicted_ns)
    st = rep.steps
    seqs = table["step_batch"]
    first_row: dict[int, int] = {}
    for row, step in enumerate(table["step"].tolist()):
        first_row.setdefault(step, row)
    steps = []
    for i in range(len(st.step)):
        sid = int(st.step[i])
        b = step_sequences(str(st.kind[i]), max(0, int(st.tokens[i])),
                           int(seqs[first_row[sid]]) if sid in first_row else -1)
        gpu = float(st.gpu_ns[i])
        span = float(st.duration_ns[i])
        steps.append(StepResult(
            step=sid, kind=str(st.kind[i]), tokens=max(0, int(st.tokens[i])), batch=b,
            context=max(0, int(st.context[i])), host_ns=max(0.0, span - gpu), gpu_ns=gpu,
            start_ns=float(st.start_ns[i]), end_ns=float(st.end_ns[i]), kernels=int(st.kernels[i]),
        ))
    return ReplayOutput(rep.start_ns, rep.end_ns, float(rep.end_to_end_ns), steps)
