"""`cascade bench resnet50`: its table is what the capture writes, and the bench prints each
GPU's predicted step beside the measured totals."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from programs.bench import resnet50


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_the_committed_table_is_what_the_capture_writes(tmp_path: Path) -> None:
    """Regenerated from PyTorch's meta device (where PyTorch is installed), the table is the
    committed one, row for row (a change to ``op_work`` or the capture shows up here)."""
    pytest.importorskip("torch")
    fresh = resnet50.write(tmp_path / "t.kernels.csv.gz")
    committed = resnet50.load()
    assert len(fresh) == len(committed)
    for col in ("name", "op", "dtype"):
        assert fresh[col].astype(str).tolist() == committed[col].astype(str).tolist(), col
    for col in ("flops", "bytes", "m", "n", "k"):
        assert np.allclose(fresh[col].astype(float), committed[col].astype(float), equal_nan=True), col
    assert (tmp_path / "t.kernels.csv.gz").read_bytes() == resnet50.TABLE.read_bytes()


def test_the_bench_prints_every_gpu_beside_its_measured_step(capsys: pytest.CaptureFixture[str]) -> None:
    ap = argparse.ArgumentParser()
    resnet50.add_arguments(ap)
    assert resnet50.run(ap.parse_args(["--targets", "SM70_V100_SXM2,SM80_A100_SXM_40GB,SM90_H100"])) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith("SM")}
    assert set(lines) == {"SM70_V100_SXM2", "SM80_A100_SXM_40GB", "SM90_H100"}
    a100 = lines["SM80_A100_SXM_40GB"]
    assert float(a100[2]) == resnet50.MEASURED_MS["SM80_A100_SXM_40GB"]
    assert a100[3].endswith("%") and abs(float(a100[3].rstrip("%"))) == pytest.approx(
        abs(float(a100[1]) / 39.44 - 1) * 100, abs=0.2)  # (the step printed to 0.1 ms: 0.13% of 39.44)
    assert "2.40x measured" in out
    assert float(lines["SM90_H100"][1]) < float(a100[1]) < float(lines["SM70_V100_SXM2"][1])


def test_a_missing_table_is_a_clear_error(tmp_path: Path) -> None:
    from cascade.errors import CascadeError

    ap = argparse.ArgumentParser()
    resnet50.add_arguments(ap)
    with pytest.raises((CascadeError, FileNotFoundError)) as err:
        resnet50.run(ap.parse_args(["--table", str(tmp_path / "none.csv.gz")]))
    assert "none.csv.gz" in str(err.value)
