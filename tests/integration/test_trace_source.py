"""`cascade predict` takes the source GPU from the trace it reads and refuses a contradicting
`--source`, naming both (the rules themselves: tests/unit/test_trace_source.py)."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

BERT = REPO.parent / "shared" / "data" / "timelines" / "h100-bert-small.pt.trace.json.gz"


def test_predict_cli_takes_the_source_from_the_trace(tmp_path: Path) -> None:
    if not BERT.exists():
        pytest.skip(f"{BERT} not present")
    out = tmp_path / "p.csv"
    run = subprocess.run([sys.executable, "-m", "programs.cli", "predict", "--trace", str(BERT),
                          "--target", "SM90_H100,SM80_A100", "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert "SM90_H100 from SM90_H100" in run.stderr and "SM80_A100 from SM90_H100" in run.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    same = [r for r in rows if r["target"] == "SM90_H100"]
    assert same and all(float(r["predicted_ns"]) == pytest.approx(float(r["duration_ns"]), abs=0.1)
                        for r in same)
    a100 = sum(float(r["predicted_ns"]) for r in rows if r["target"] == "SM80_A100")
    h100 = sum(float(r["predicted_ns"]) for r in same)
    assert 1.0 < a100 / h100 < 3.5  # an A100 is slower than the H100 it was measured on
    bad = subprocess.run([sys.executable, "-m", "programs.cli", "predict", "--trace", str(BERT),
                          "--source", "SM80_A100", "--target", "SM90_H100"],
                         capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert bad.returncode != 0 and "SM90_H100" in bad.stderr and "SM80_A100" in bad.stderr
