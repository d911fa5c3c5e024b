"""`cascade predict` says how far to trust its predictions: provenance, expected accuracy and
extrapolation flags in its output (the figures and flags themselves: tests/unit/test_accuracy.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from cascade.calibration import load_calibration


def test_cli_predict_prints_provenance_accuracy_and_extrapolation(tmp_path: Path) -> None:
    trace = tmp_path / "k.csv"
    trace.write_text("name,op,dtype,m,n,k,duration_ns\n"
                     "sm80_gemm,linear,fp16,4096,11008,4096,900000\n"
                     "sm80_gemm,linear,fp16,16,40,24,4000\n")
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "predict", "--trace", str(trace), "--source", "A100",
                           "--target", "H100,H200", "--model", "scaled"],
                          capture_output=True, text=True, check=True)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2
    cal = load_calibration()
    assert lines[0].startswith("SM90_H100 from SM80_A100: model scaled")
    assert f"calibration {cal.id}@{cal.version} ({cal.digest()})" in lines[0]
    assert "expected MAPE" in lines[0] and ("shifted shapes" in lines[0] or "held-out shapes" in lines[0])
    assert "kernels extrapolated" in lines[0] and "GEMM shape outside" in lines[0]
    # the whole trace's figure: the end-to-end protocol's, widened by the uncovered kernel's time
    assert "whole trace: expected error" in lines[0] and "end-to-end protocol" in lines[0]
    assert "SM90_H200 has no calibration: SM90_H100's accuracy plus a bandwidth transfer" in lines[1]
    assert "target GPU not calibrated" in lines[1]
    assert np.isfinite(float(proc.stdout.splitlines()[1].split(",")[-3]))
