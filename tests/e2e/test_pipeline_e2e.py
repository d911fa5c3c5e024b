"""The whole pipeline on real servers: upload a trace -> ingest -> prepare -> run -> results.

The real v4 Accel-Sim trace and a generated multi-kernel instruction trace go
through the presigned upload flow (`cascade import`), become bundles, and run on
3 configurations x 2 replicas through the orchestrator's local backend (real
simulator processes), with the `auto` model picking `analytical` for them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from cascade.platform import subjects
from cascade.platform.state import RunRecord
from programs.cli.importer import run_import
from tests.support.traces_stack import REAL_TRACE, TOKEN, TracesStack, traces_stack, write_kernels
from tests.support.wait import wait_for_kv

__all__ = ["traces_stack"]  # the module-scoped stack fixture

CONFIGS = ["SM80_A100", "SM90_H100", "SM70_V100_PCIE_32GB"]

def _import_args(stack: TracesStack, path: Path, state: Path, source_gpu: str) -> argparse.Namespace:
    return argparse.Namespace(
        path=path, app=stack.base_url, token=TOKEN, name=None, source_gpu=source_gpu, kind=None,
        workload="pipeline test", trace_id=None, state_file=state, no_seal=False, wait=90.0,
        quiet=True,
    )

async def _run_to_completion(stack: TracesStack, trace_id: str) -> dict[str, Any]:
    async with stack.client() as api:
        run = await api.request("POST", "/api/runs", json={
            "trace_id": trace_id, "configs": CONFIGS, "replicas": 2, "model": "auto"})
        run_id = run["id"]
        await wait_for_kv(stack.bus, subjects.KV_RUNS, run_id,
                          lambda r: r.state in ("completed", "failed", "cancelled"), type_=RunRecord, timeout=120)
        detail = await api.request("GET", f"/api/runs/{run_id}")
        assert detail["run"]["state"] == "completed", detail
        assert len(detail["sims"]) == 6
        assert all(s["state"] == "completed" and s["percent"] == 100 for s in detail["sims"])
        results: dict[str, Any] = await api.request("GET", f"/api/runs/{run_id}/results")
        return results

@pytest.fixture(scope="module")
async def pipeline(traces_stack: TracesStack) -> TracesStack:
    from services.orchestrator import run as run_orchestrator

    await traces_stack.start("orchestrator", run_orchestrator, orchestrator_backend="local",
                             max_local_sims=2)
    return traces_stack

async def test_real_v4_trace_uploaded_prepared_and_simulated(pipeline: TracesStack, tmp_path: Path) -> None:
    summary = await run_import(_import_args(pipeline, REAL_TRACE, tmp_path / "s.json", "SM61_P4"))
    assert summary["state"] == "ready", summary
    results = await _run_to_completion(pipeline, summary["trace_id"])
    by = {c["config"]: c for c in results["configs"]}
    assert set(by) == set(CONFIGS)
    for c in by.values():
        assert c["model"] in ("analytical", "auto") and c["predicted_e2e_ms"] > 0
        assert len(c["replicas"]) == 2
        # both replicas of a config simulate the same kernels: same answer
        assert c["replicas"][0]["predicted_e2e_ms"] == pytest.approx(c["replicas"][1]["predicted_e2e_ms"])
        assert c["counterfactual"] is True  # the trace carries no measured baseline
        # instruction features only: no measured accuracy to claim, and it says so; all three
        # GPUs have fitted efficiencies (the V100 from NeuSight data), so nothing extrapolates
        assert c["accuracy"]["mape_pct"] is None and "analytical" in c["accuracy"]["basis"]
        assert c["accuracy"]["target_calibrated"] is True
        assert c["extrapolated"] == 0 and c["extrapolation"] == {}, c["extrapolation"]

async def test_generated_instruction_trace_runs_on_three_configs(pipeline: TracesStack, tmp_path: Path) -> None:
    folder = tmp_path / "gen"
    write_kernels(folder, 12, blocks=64, iterations=4)
    summary = await run_import(_import_args(pipeline, folder, tmp_path / "s.json", "SM80_A100"))
    assert summary["state"] == "ready", summary
    async with pipeline.client() as api:
        kernels = await api.request("GET", f"/api/traces/{summary['trace_id']}/kernels?limit=50")
    assert kernels["total"] == 12
    results = await _run_to_completion(pipeline, summary["trace_id"])
    by = {c["config"]: c["predicted_e2e_ms"] for c in results["configs"]}
    # the same instruction stream on a newer, wider GPU is not slower
    assert by["SM90_H100"] <= by["SM70_V100_PCIE_32GB"]
