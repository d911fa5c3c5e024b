"""`cascade validate --shift` refits per shifted-shape protocol and prints its regions (issue 19;
the protocol, siblings and layer sums themselves: tests/unit/test_shift.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def test_cli_validate_shift_refits_and_prints_regions(tmp_path: Path) -> None:
    import subprocess
    import sys

    rng = np.random.default_rng(3)
    shapes = [(int(rng.integers(1, 8)), *(int(2 ** rng.uniform(4, 11)) for _ in range(3))) for _ in range(60)]
    for label, rate in (("Tesla_T4", 4e12), ("Tesla_V100-PCIE-32GB", 1.2e13)):
        lines = ["OPName,Latency,Kernel Name,B,M,N,K"]
        for b, m, n, k in shapes:
            lines.append(f"linear,{(2.0 * b * m * n * k / rate + 3e-5) * 1e3},{label}_sgemm,{b},{m},{n},{k}")
        (tmp_path / f"linear__{label}.csv").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "validate", "--data", str(tmp_path), "--shift", "extremes",
                           "--evals", "30"], capture_output=True, text=True, check=True, timeout=600)
    assert "| linear | linear | SM75_T4 -> SM70_V100-PCIe | smallest 10% | 6 |" in proc.stdout
    assert "largest 10%" in proc.stdout and "| source -> target | extremes | scaled mean | roofline mean |" in proc.stdout
