"""The outside check against publicly reported matmul throughput (never fitted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascade.calibration import load_calibration
from cascade.errors import TraceFormatError, UnknownGPUError
from cascade.fitting import external
from cascade.gpus import default_registry


def test_packaged_reports_load_and_name_known_gpus() -> None:
    reports = external.load_reports()
    assert {r.dtype for r in reports} == {"fp32", "fp16"}
    assert all(r.tflops > 0 and r.source.startswith("https://") for r in reports)
    specs = {r.spec for r in reports}
    # the calibrated sources and GPUs the calibration never saw
    assert {"SM80_A100_PCIE_40GB", "SM75_T4", "SM90_H100", "SM89_L4", "SM60_P100_PCIE_16GB"} <= specs


@pytest.mark.parametrize(("body", "expected"), [
    ("device,spec,dtype,tflops\nx,SM75_T4,fp32,1\n", "header"),
    ("device,spec,dtype,tflops,source\nx,SM75_T4,fp32,fast,u\n", "number of TFLOP/s"),
    ("device,spec,dtype,tflops,source\nx,SM75_T4,int4,1,u\n", "dtype fp32 or fp16"),
    ("device,spec,dtype,tflops,source\nx,SM75_T4,fp32,-2,u\n", "positive"),
])
def test_malformed_reports_name_file_line_and_expectation(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "r.csv"
    path.write_text("# comment\n" + body)
    with pytest.raises(TraceFormatError, match=expected) as err:
        external.load_reports(path)
    assert "r.csv" in str(err.value)


def test_unknown_gpu_in_reports_lists_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("device,spec,dtype,tflops,source\nx,SM99_IMAGINARY,fp32,1,u\n")
    with pytest.raises(UnknownGPUError, match="SM75_T4"):
        external.load_reports(path)


def test_cells_scale_the_sources_report_by_the_models_best_throughput_ratio(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("device,spec,dtype,tflops,source\n"
                    "a,SM80_A100_PCIE_40GB,fp32,18,u\nb,SM89_L4,fp32,15,u\nc,SM89_L4,fp32,13,u\n")
    cal, reg = load_calibration(), default_registry()
    cells = external.check(external.load_reports(path), cal, reg)
    assert [(c.source, c.target) for c in cells] == [("SM80_A100_PCIE_40GB", "SM89_L4")]  # no T4 report
    cell = cells[0]
    ratio = (external.model_best_tflops("SM89_L4", "fp32", cal, reg)
             / external.model_best_tflops("SM80_A100_PCIE_40GB", "fp32", cal, reg))
    assert cell.predicted_tflops == pytest.approx(18 * ratio, abs=0.01)
    assert cell.reported_tflops == 14.0 and cell.reports == 2 and not cell.target_calibrated
    assert cell.error_pct == pytest.approx((18 * ratio / 14 - 1) * 100, abs=0.05)
    summary = external.summary(cells)
    assert summary["fp32"]["uncalibrated_cells"] == 1 and summary["fp32"]["mape"] == abs(cell.error_pct)


def test_cli_prints_cells_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert external.main([]) == 0
    out = capsys.readouterr().out
    assert "SM80_A100_PCIE_40GB -> SM90_H100" in out and "- fp32: MAPE" in out
    assert external.main(["--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["summary"]["fp32"]["uncalibrated_cells"] > 10 and body["calibration"]["digest"]
