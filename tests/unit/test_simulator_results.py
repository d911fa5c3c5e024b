"""SimResult building, the simulator's replay and engine glue, run planning (storage of results:
``tests/integration/test_runstore.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cascade.engine import predict
from cascade.errors import ConflictError, UnknownGPUError
from cascade.gpus import get_gpu
from cascade.kerneltable import KernelTable
from cascade.platform.state import TraceRecord
from cascade.runs.plan import plan_sims, resolve_config, sim_id, spec_mapping
from cascade.runs.results import build_result, steps_to_records
from cascade.serving.stepmodel import StepRecord
from programs.bench._runbed import generate_timeline
from services.simulator.engine import baseline_for, replay_timeline


@pytest.fixture(scope="module")
def timeline() -> KernelTable:
    return generate_timeline(600, seed=3)


def _result(table: KernelTable, target: str = "SM90_H100") -> Any:
    pred = predict(table, target, source="SM80_A100")
    rep = replay_timeline(table, pred.predicted_ns)
    return build_result(
        run_id="run-x", sim_id="run-x-sm90_h100-r0", trace_id="t", config=target, replica=0,
        model="auto", spec_id=target, spec_hash=get_gpu(target).spec_hash(), table=table,
        predicted_ns=pred.predicted_ns, regime=pred.regime_names, start_ns=rep.start_ns,
        end_ns=rep.end_ns, predicted_e2e_ns=rep.e2e_ns, steps=rep.steps, source_spec_id="SM80_A100",
        baseline_e2e_ns=None,
    ), rep


def test_replay_with_measured_durations_reproduces_the_trace(timeline: KernelTable) -> None:
    rep = replay_timeline(timeline, timeline["duration_ns"])
    measured = float((timeline["start_ns"] + timeline["duration_ns"]).max() - timeline["host_launch_ns"].min())
    assert abs(rep.e2e_ns - measured) / measured < 0.01
    assert np.all(rep.end_ns >= rep.start_ns)
    # one stream: kernels never overlap
    order = np.argsort(rep.start_ns)
    assert np.all(rep.start_ns[order][1:] >= rep.end_ns[order][:-1] - 1e-6)


def test_faster_kernels_shorten_the_timeline_but_keep_host_gaps(timeline: KernelTable) -> None:
    full = replay_timeline(timeline, timeline["duration_ns"])
    half = replay_timeline(timeline, timeline["duration_ns"] / 2)
    zero = replay_timeline(timeline, np.zeros(len(timeline)))
    assert zero.e2e_ns < half.e2e_ns < full.e2e_ns
    assert zero.e2e_ns > 0  # host launch gaps remain


def test_result_fields_and_step_records(timeline: KernelTable) -> None:
    result, rep = _result(timeline)
    assert result.kernel_count == len(timeline)
    assert result.predicted_e2e_ns == rep.e2e_ns and result.gpu_busy_ns > 0
    assert result.counterfactual is True and result.error_pct is None
    assert result.top_kernels[0].predicted_ns >= result.top_kernels[-1].predicted_ns
    assert abs(sum(f.predicted_ns for f in result.families.values()) - result.gpu_busy_ns) < 1
    assert set(result.families) >= {"gemm", "attention"}
    assert sum(result.regimes.values()) == len(timeline)
    assert result.steps[0].kind == "prefill" and result.steps[1].kind == "decode"
    records = steps_to_records(result)
    assert all(isinstance(r, StepRecord) for r in records) and len(records) == len(result.steps)
    assert records[0].tokens == 4096 and records[1].batch == 8 and records[1].gpu_ns > 0
    base = build_result(
        run_id="r", sim_id="s", trace_id="t", config="SM80_A100", replica=1, model="scaled",
        spec_id="SM80_A100", spec_hash="h", table=timeline, predicted_ns=timeline["duration_ns"],
        regime=np.full(len(timeline), "compute", dtype=object), start_ns=rep.start_ns,
        end_ns=rep.end_ns, predicted_e2e_ns=110.0, baseline_e2e_ns=100.0,
    )
    assert base.error_pct == pytest.approx(10.0) and base.counterfactual is False


def test_h100_is_faster_than_a100_on_a_compute_bound_trace(timeline: KernelTable) -> None:
    h100, _ = _result(timeline, "SM90_H100")
    a100, _ = _result(timeline, "SM80_A100")
    assert h100.predicted_e2e_ns < a100.predicted_e2e_ns


def test_baselines() -> None:
    trace = TraceRecord(id="t", name="t", source_gpu="SM80_A100",
                        baseline={"e2e_ms": 12.5, "e2e_ms:SM90_H100": 7.0})
    assert baseline_for(trace, "SM80_A100", "SM80_A100") == 12.5e6
    assert baseline_for(trace, "SM90_H100", "SM80_A100") == 7.0e6
    assert baseline_for(trace, "SM90_H200", "SM80_A100") is None


def test_run_planning() -> None:
    plan = plan_sims("run-1", ["SM80_A100", "SM90_H100"], 2)
    assert [p[0] for p in plan] == ["run-1-sm80_a100-r0", "run-1-sm80_a100-r1",
                                    "run-1-sm90_h100-r0", "run-1-sm90_h100-r1"]
    assert sim_id("run-1", "My GPU/2", 0) == "run-1-my_gpu_2-r0"
    assert resolve_config("nvidia h100 80gb hbm3").config_id == "SM90_H100"
    with pytest.raises(UnknownGPUError) as info:
        resolve_config("SM99_X", custom={"MINE": get_gpu("SM90_H100")})
    assert "MINE" in info.value.known and "SM80_A100" in info.value.known
    custom = dict(spec_mapping(get_gpu("SM90_H100")), id="H100_2X", aliases=[], sms=264)
    r = resolve_config(custom)
    assert r.config_id == "H100_2X" and r.inline is not None and r.job_ref == r.inline
    with pytest.raises(ConflictError):
        resolve_config(dict(custom, id="SM80_A100"))
