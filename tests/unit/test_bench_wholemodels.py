"""`cascade bench wholemodels`: neusight-e2e's models recorded as a trace's importer sees them
have NeuSight's FLOPs, and predicted from their work alone they land as NeuSight's own tables do
against the measured end-to-end times."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from programs.bench import wholemodels
from tests.support.paths import SHARED_DATA

MEASURED = SHARED_DATA / "measured"
needs_data = pytest.mark.skipif(not (MEASURED / "neusight-e2e").is_dir(), reason="../shared/data is not here")


@needs_data
def test_the_importers_work_matches_the_whole_models_and_predicts_them_as_well() -> None:
    rows = wholemodels.cells(MEASURED)
    assert len(rows) == 26 and sum("-train-" in r["config"] for r in rows) == 3
    # every configuration's FLOPs, counted op by op by op_work from the recorded aten calls, are
    # NeuSight's (counted from its fx graph); bytes within the two conventions' spread
    assert all(r["flops_ratio"] == pytest.approx(1.0, abs=0.002) for r in rows)
    assert all(0.85 < r["bytes_ratio"] < 1.15 for r in rows)
    trace = np.abs([r["trace_uncal_pct"] for r in rows])
    table = np.abs([r["table_uncal_pct"] for r in rows])
    assert trace.mean() < 12.0 and trace.max() < 25.0
    assert abs(trace.mean() - table.mean()) < 2.0


def test_the_bench_prints_every_cell_and_the_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not (MEASURED / "neusight-e2e").is_dir():
        pytest.skip("../shared/data is not here")
    ap = argparse.ArgumentParser()
    wholemodels.add_arguments(ap)
    assert wholemodels.run(ap.parse_args(["--data", str(MEASURED)])) == 0
    out = capsys.readouterr().out
    assert out.count("SM70_V100_PCIE_32GB") == 11 and "trace_uncal  mean" in out


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_a_recorded_table_is_what_the_capture_writes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    config = "bert_large-inf-512-8"
    wholemodels.write([config], tmp_path)
    assert wholemodels.table_path(config, tmp_path).read_bytes() == wholemodels.table_path(config).read_bytes()


def test_a_missing_table_names_the_file(tmp_path: Path) -> None:
    if not (MEASURED / "neusight-e2e").is_dir():
        pytest.skip("../shared/data is not here")
    from cascade.errors import CascadeError

    with pytest.raises((CascadeError, FileNotFoundError)) as err:
        wholemodels.cells(MEASURED, tmp_path)
    assert ".kernels.csv.gz" in str(err.value)
