"""A run's results as the api shows them: per configuration, means over its completed replicas
and each replica (:class:`ConfigResult`), a recorded sample's published figures where there are
no result files (:class:`RecordedReference`), and the same as CSV rows.

Pure: the caller reads the sims' :class:`~cascade.runs.results.SimResult` documents and passes
them in with the sims' states.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from cascade.calibration.accuracy import AccuracyEstimate
from cascade.runs.results import AccelSimKernel, SimResult, SimulatorProvenance


class SimState(Protocol):
    """What a summary needs of a sim's state (``cascade.platform.state.SimRecord``)."""

    @property
    def id(self) -> str: ...
    @property
    def config(self) -> str: ...
    @property
    def replica(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...


class ReplicaResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    sim_id: str
    replica: int
    state: str
    error: str | None
    attempts: int
    predicted_e2e_ms: float | None
    gpu_busy_ms: float | None
    wall_s: float | None


class StepTime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    step: int
    kind: str
    tokens: int
    batch: int
    context: int
    predicted_ms: float
    gpu_ms: float
    host_ms: float
    kernels: int


class TopKernel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    count: int
    predicted_ms: float
    source_ms: float | None
    regime: str
    family: str
    share: float


class FamilyTime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    count: int
    predicted_ms: float
    source_ms: float | None
    share: float


class ConfigResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One configuration of a run: means over its completed replicas, then each replica."""

    config: str
    state: str
    """completed, partial (some replicas), or the sims' state while none has finished."""
    predicted_e2e_ms: float | None
    baseline_e2e_ms: float | None
    error_pct: float | None
    counterfactual: bool
    source_e2e_ms: float | None
    gpu_busy_ms: float | None
    model: str | None
    spec_id: str | None
    spec_hash: str | None
    source_spec_id: str | None
    calibration: str | None
    kernel_count: int | None
    extrapolated: int | None
    extrapolation: dict[str, int]
    accuracy: AccuracyEstimate | None
    steps: list[StepTime]
    top_kernels: list[TopKernel]
    families: dict[str, FamilyTime]
    regimes: dict[str, int]
    simulator: SimulatorProvenance | None
    replicas: list[ReplicaResult]
    accelsim_kernels: list[AccelSimKernel] = []
    """Model accel-sim: per simulated kernel (first replica), Accel-Sim's statistics beside
    the built-in model's prediction for the same kernel."""
    recorded: bool | msgspec.UnsetType = msgspec.UNSET
    """True where a recorded sample run's figures stand in for result files."""


class ReferenceRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    config: str
    hardware: str
    real_e2e_ms: float | None
    simulated_e2e_ms: float
    error_pct: float | None
    counterfactual: bool
    note: str


class RecordedReference(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A recorded sample run's published figures."""

    badge: str
    title: str
    simulator: str
    kernel_model: str
    caveats: list[str]
    configs: list[ReferenceRow]


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _state(sims: Sequence[SimState], done: int) -> str:
    if sims and done == len(sims):
        return "completed"
    if done:
        return "partial"
    return sims[0].state if sims else "queued"


def config_results(config: str, sims: Sequence[SimState], results: Mapping[str, SimResult]) -> ConfigResult:
    """The results entry of one configuration: means over completed replicas, plus each replica."""
    done = [results[s.id] for s in sims if s.id in results]
    first = done[0] if done else None
    predicted = _mean([r.predicted_e2e_ns for r in done])
    baseline = first.baseline_e2e_ns if first else None
    error = (predicted - baseline) / baseline * 100 if predicted is not None and baseline else None
    replicas = []
    for s in sims:
        r = results.get(s.id)
        replicas.append(ReplicaResult(
            sim_id=s.id, replica=s.replica, state=s.state, error=s.error, attempts=s.attempts,
            predicted_e2e_ms=_ms(r.predicted_e2e_ns) if r else None,
            gpu_busy_ms=_ms(r.gpu_busy_ns) if r else None, wall_s=r.wall_s if r else None))
    return ConfigResult(
        config=config, state=_state(sims, len(done)), predicted_e2e_ms=_ms(predicted),
        baseline_e2e_ms=_ms(baseline), error_pct=error, counterfactual=error is None,
        source_e2e_ms=_ms(first.source_e2e_ns) if first else None,
        gpu_busy_ms=_ms(_mean([r.gpu_busy_ns for r in done])),
        model=first.model if first else None,
        spec_id=first.spec_id if first else config,
        spec_hash=first.spec_hash if first else None,
        source_spec_id=first.source_spec_id if first else None,
        calibration=first.calibration if first else None,
        kernel_count=first.kernel_count if first else None,
        extrapolated=first.extrapolated if first else None,
        extrapolation=first.extrapolation if first else {},
        accuracy=first.accuracy if first else None,
        steps=[StepTime(step=st.step, kind=st.kind, tokens=st.tokens, batch=st.batch, context=st.context,
                        predicted_ms=st.wall_ns / 1e6, gpu_ms=st.gpu_ns / 1e6, host_ms=st.host_ns / 1e6,
                        kernels=st.kernels)
               for st in (first.steps if first else [])],
        top_kernels=[TopKernel(name=k.name, count=k.count, predicted_ms=k.predicted_ns / 1e6,
                               source_ms=_ms(k.source_ns), regime=k.regime, family=k.family, share=k.share)
                     for k in (first.top_kernels if first else [])],
        families={name: FamilyTime(count=f.count, predicted_ms=f.predicted_ns / 1e6, source_ms=_ms(f.source_ns),
                                   share=f.share)
                  for name, f in (first.families.items() if first else [])},
        regimes=first.regimes if first else {},
        simulator=first.simulator if first else None,
        replicas=replicas,
        accelsim_kernels=first.accelsim_kernels if first else [],
    )


def run_config_results(configs: Sequence[str], sims: Sequence[SimState],
                       results: Mapping[str, SimResult]) -> list[ConfigResult]:
    """Every configuration of a run in the run's order (then any other a sim names), each with
    its sims."""
    by_config: dict[str, list[SimState]] = {c: [] for c in configs}
    for s in sims:
        by_config.setdefault(s.config, []).append(s)
    return [config_results(c, by_config[c], results) for c in by_config]


def with_reference(entry: ConfigResult, reference: RecordedReference) -> ConfigResult:
    """A recorded run's config entry with the recorded figures where it has no result files:
    simulated and real mean E2E, the error, and counterfactual only where there is no baseline."""
    row = next((r for r in reference.configs if r.config == entry.config), None)
    if row is None or entry.predicted_e2e_ms is not None:
        return entry
    return msgspec.structs.replace(
        entry, predicted_e2e_ms=row.simulated_e2e_ms, baseline_e2e_ms=row.real_e2e_ms, error_pct=row.error_pct,
        counterfactual=bool(row.counterfactual), model=reference.kernel_model, calibration="recorded reference",
        recorded=True)


RESULT_CSV_COLUMNS = (
    "config", "replica", "sim_id", "state", "predicted_e2e_ms", "baseline_e2e_ms", "error_pct",
    "counterfactual", "gpu_busy_ms", "model", "spec_id", "spec_hash", "calibration", "kernel_count",
)


def _num(v: float | None) -> str:
    return "" if v is None else repr(float(v))


def results_csv(configs: Sequence[ConfigResult], results: Mapping[str, SimResult]) -> str:
    """One CSV row per replica (:data:`RESULT_CSV_COLUMNS`), its configuration's figures beside it."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(RESULT_CSV_COLUMNS)
    for c in configs:
        for rep in c.replicas:
            r = results.get(rep.sim_id)
            w.writerow([
                c.config, rep.replica, rep.sim_id, rep.state, _num(rep.predicted_e2e_ms), _num(c.baseline_e2e_ms),
                _num(r.error_pct if r else None), str(c.counterfactual).lower(), _num(rep.gpu_busy_ms),
                c.model or "", c.spec_id or "", c.spec_hash or "", c.calibration or "", c.kernel_count or "",
            ])
    return out.getvalue()
