"""Expected accuracy and extrapolation flags: every prediction says how far to trust it."""

from __future__ import annotations

import pytest

from cascade.calibration import Calibration, ResidualTable, load_calibration
from cascade.calibration.accuracy import calibrated_in, describe, expected_accuracy
from cascade.engine import predict, predict_many
from cascade.engine.extrapolation import (
    BOUND_ONLY,
    SHAPE_OUTSIDE,
    SOURCE_UNCALIBRATED,
    TARGET_UNCALIBRATED,
    extrapolation_flags,
    residual_cells,
)
from cascade.engine.workload import workload_of
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable


def _row(kind: str, dataset: str, family: str, src: str, tgt: str, mape: float, count: int,
         left_out: str | None = None, model: str = "scaled") -> dict[str, object]:
    row: dict[str, object] = {"kind": kind, "dataset": dataset, "family": family, "source": src,
                              "target": tgt, "model": model, "count": count, "mape": mape}
    if left_out:
        row["left_out"] = left_out
    return row


SYNTH = Calibration(
    id="synthetic", contexts={"kernel": ["A", "B"], "neusight": ["A", "C", "D"]},
    metrics={
        "heldout_shapes": [
            # Vidur-like: per-family rows and an "all" row; only "all" may count
            _row("vidur", "m", "linear", "A", "B", 20.0, 10),
            _row("vidur", "m", "norm", "A", "B", 2.0, 30),
            _row("vidur", "m", "all", "A", "B", 6.5, 40),
            _row("vidur", "m", "all", "A", "B", 40.0, 40, model="roofline"),
            # NeuSight-like: two data sets, no "all" rows: count-weighted
            _row("neusight", "bmm", "bmm", "C", "A", 10.0, 300),
            _row("neusight", "linear", "linear", "C", "A", 20.0, 100),
        ],
        "leave_one_gpu_out": [
            _row("neusight", "bmm", "bmm", "C", "A", 30.0, 5, left_out="A"),    # into left-out A
            _row("neusight", "bmm", "bmm", "D", "A", 10.0, 500, left_out="A"),  # into left-out A
            _row("neusight", "bmm", "bmm", "C", "D", 8.0, 50, left_out="C"),    # from left-out C
        ],
    },
)


def test_calibrated_in_reads_the_measurement_context() -> None:
    assert calibrated_in(SYNTH, "A", "kernel") and calibrated_in(SYNTH, "A", "neusight-bmm")
    assert not calibrated_in(SYNTH, "C", "kernel") and calibrated_in(SYNTH, "C", "neusight-linear")
    assert not calibrated_in(Calibration(), "A", "kernel")


def test_expected_accuracy_picks_the_matching_measurement() -> None:
    pair = expected_accuracy(SYNTH, "A", "B", "kernel")
    assert pair.mape_pct == 6.5 and pair.cells == 1  # the data set's "all" row, not its families
    assert "held-out shapes, A -> B" in pair.basis and "40 operators" in pair.basis
    assert pair.target_calibrated and pair.source_calibrated
    assert expected_accuracy(SYNTH, "A", "B", "kernel", "roofline").mape_pct == 40.0
    weighted = expected_accuracy(SYNTH, "C", "A", "neusight-bmm")
    assert weighted.mape_pct == pytest.approx(12.5) and weighted.worst_pct == 20.0  # (10*300 + 20*100) / 400
    into = expected_accuracy(SYNTH, "A", "E", "neusight")
    assert not into.target_calibrated
    assert into.mape_pct == 20.0 and into.worst_pct == 30.0 and into.cells == 2  # cells, unweighted
    assert "into a GPU with no calibration" in into.basis
    from_unseen = expected_accuracy(SYNTH, "E", "A", "neusight")
    assert from_unseen.mape_pct == 8.0 and not from_unseen.source_calibrated
    # kernel data has no LOGO cells: borrowed from another context, and the basis says so
    borrowed = expected_accuracy(SYNTH, "A", "E", "kernel")
    assert borrowed.mape_pct == 20.0 and "no such cells for kernel data" in borrowed.basis
    assert expected_accuracy(SYNTH, "B", "B", "kernel").mape_pct == 0.0
    assert expected_accuracy(SYNTH, None, "B", "kernel", "analytical").mape_pct is None
    assert expected_accuracy(Calibration(), "A", "B").mape_pct is None
    assert describe(into).startswith("expected MAPE 20.0% (worst cell 30.0%;")


def test_packaged_calibration_reports_its_own_held_out_figure() -> None:
    cal = load_calibration()
    rows = [r for r in cal.metrics["heldout_shapes"]  # type: ignore[union-attr]
            if r["source"] == "SM80_A100" and r["target"] == "SM90_H100" and r["family"] == "all"
            and r["model"] == "scaled"]
    assert len(rows) == 1
    est = expected_accuracy(cal, "SM80_A100", "SM90_H100", "kernel")
    # without shifted-shape rows the random split is quoted (the SYNTH case above); with them
    # the shifted figure (tests/test_shift.py), never below the random split's
    plain = expected_accuracy(Calibration(metrics={"heldout_shapes": cal.metrics["heldout_shapes"]},
                                          contexts=cal.contexts), "SM80_A100", "SM90_H100", "kernel")
    assert plain.mape_pct == pytest.approx(rows[0]["mape"], abs=0.05)
    assert est.mape_pct is not None and est.mape_pct >= plain.mape_pct - 0.05
    assert est.mape_pct <= 10  # the FP16 target
    unseen = expected_accuracy(cal, "SM80_A100", "SM100_B200", "kernel")  # no same-compute sibling
    assert not unseen.target_calibrated and unseen.mape_pct is not None and unseen.mape_pct > est.mape_pct


def _table() -> KernelTable:
    return KernelTable.from_rows([
        # a Llama-2-7B width the Vidur grids cover, and a width no fit row has
        {"name": "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn", "op": "linear",
         "dtype": "fp16", "m": 4096, "n": 11008, "k": 4096, "duration_ns": 900_000.0},
        {"name": "ampere_fp16_s16816gemm_fp16_64x64_ldg8_f2f_stages_64x5_nn", "op": "linear",
         "dtype": "fp16", "m": 16, "n": 40, "k": 24, "duration_ns": 4_000.0},
        {"name": "vectorized_elementwise_kernel", "op": "elementwise", "dtype": "fp16",
         "bytes": 1_000_000, "duration_ns": 3_000.0},
        {"name": "mystery_kernel"},  # no time, no work: auto bounds it
    ])


def test_extrapolation_flags_name_each_reason() -> None:
    reg = default_registry()
    cal = load_calibration()
    a100, h100, h200 = reg.get("SM80_A100"), reg.get("SM90_H100"), reg.get("SM90_H200")
    w = workload_of(_table())
    grid = cal.residual_table("kernel", h100)
    assert grid is not None
    cells = residual_cells(w, grid.width)
    assert cells[0] in grid.keys and cells[1] not in grid.keys  # the premise of this test
    assert list(grid.covers(cells)) == [True, False, False, False]
    flags = extrapolation_flags(w, h100, a100, cal, "kernel")
    assert list(flags) == [0, SHAPE_OUTSIDE, 0, 0]  # non-GEMM kernels have no shape cell
    # a GEMV (M = 1) of the same width streams its weights: a regime the operator data cover
    gemv = workload_of(KernelTable.from_rows([{**_table().take([1]).rows().__next__(), "m": 1}]))
    assert not extrapolation_flags(gemv, h100, a100, cal, "kernel").any()
    assert not extrapolation_flags(w, a100, a100, cal, "kernel").any()  # its own measured times
    into = extrapolation_flags(w, h200, a100, cal, "kernel")
    assert all(f & TARGET_UNCALIBRATED for f in into) and not any(f & SOURCE_UNCALIBRATED for f in into)
    assert extrapolation_flags(w, a100, h200, cal, "kernel")[2] == SOURCE_UNCALIBRATED
    # a calibration with no grid for the kind cannot tell shapes apart
    bare = Calibration(contexts={"kernel": ["SM80_A100", "SM90_H100"]})
    assert not extrapolation_flags(w, h100, a100, bare, "kernel").any()
    gridded = Calibration(contexts=bare.contexts, residuals={"kernel": {"SM90_H100": ResidualTable(
        keys=[int(cells[1])], values=[0.0], rows=[5])}})
    assert list(extrapolation_flags(w, h100, a100, gridded, "kernel")) == [SHAPE_OUTSIDE, 0, 0, 0]


def test_predictions_carry_flags_and_accuracy() -> None:
    table = _table()
    a100, h100, h200 = predict_many(table, ["SM80_A100", "SM90_H100", "SM90_H200"], source="SM80_A100")
    assert a100.provenance.accuracy.mape_pct == 0.0 and not a100.extrapolated[:3].any()
    assert a100.flags is not None and a100.flags[3] == BOUND_ONLY  # roofline/launch only
    assert h100.provenance.measurement == "kernel"
    assert h100.provenance.accuracy.target_calibrated and h100.provenance.accuracy.mape_pct <= 10
    assert list(h100.extrapolated) == [False, True, False, True]
    assert h100.extrapolation_reasons == {"GEMM shape outside the calibration data's shapes": 1,
                                          "no measured time or work: launch overhead or roofline only": 1}
    assert h200.extrapolated.all() and not h200.provenance.accuracy.target_calibrated
    roof = predict(table, "SM90_H100", source="SM80_A100", model="roofline")
    assert roof.flags is None and not roof.extrapolated.any()
    assert roof.provenance.accuracy.mape_pct is not None
    assert roof.provenance.accuracy.mape_pct > h100.provenance.accuracy.mape_pct


def test_auto_reports_the_accuracy_of_the_model_behind_its_rows() -> None:
    timed = {"name": "sm80_gemm", "op": "linear", "dtype": "fp16", "m": 4096, "n": 11008, "k": 4096,
             "duration_ns": 900_000.0}
    untimed = {"name": "sm80_gemm", "op": "linear", "dtype": "fp16", "m": 4096, "n": 4096, "k": 4096}
    only_work = predict(KernelTable.from_rows([untimed]), "SM90_H100", source="SM80_A100")
    assert list(only_work.models) == ["analytical"]
    # predicted from its work alone: the end-to-end protocol's work-alone figures, single
    # operators (KernelBench) per kernel and whole models for the trace
    work = only_work.provenance.accuracy
    rows = {(r["dataset"], r["variant"], r["model"], r["group"]): r for r in load_calibration().metrics["end_to_end"]}
    variant = "calibrated" if work.target_calibrated else "target uncalibrated"  # (the H100: Vidur's kernel times)
    ops = rows[("kernelbench", variant, "analytical", "all")]
    whole = rows[("neusight-e2e", variant, "analytical", "all")]
    assert work.mape_pct == ops["mean_pct"] and "single operators predicted from their work alone" in work.basis
    assert work.total_pct is not None and work.total_pct >= whole["mean_pct"]
    assert "whole-model cells predicted from their work alone" in work.total_basis
    mixed = predict(KernelTable.from_rows([timed, timed, untimed]), "SM90_H100", source="SM80_A100")
    scaled_only = predict(KernelTable.from_rows([timed]), "SM90_H100", source="SM80_A100")
    assert mixed.provenance.accuracy.mape_pct == scaled_only.provenance.accuracy.mape_pct
    assert mixed.provenance.accuracy.basis.endswith("for the 2 kernels predicted by scaled (1 by analytical)")


def test_empty_table_and_explicit_models_keep_provenance_and_flags_consistent() -> None:
    empty = predict_many(KernelTable.from_rows([]), ["SM90_H100", "SM90_H200"], source="SM80_A100")
    assert all(len(p.predicted_ns) == 0 and not p.extrapolated.any() for p in empty)
    assert empty[1].provenance.accuracy.basis  # still says which figure would apply
    # analytical times kernels on the device: its calibration check is the spec's own fit,
    # and the provenance agrees with the per-kernel flags (the V100 was fitted on NeuSight data)
    rows = [{"name": "k", "op": "linear", "dtype": "fp32", "m": 512, "n": 512, "k": 512}]
    v100 = predict(KernelTable.from_rows(rows), "SM70_V100_PCIE_32GB", model="analytical")
    assert v100.provenance.measurement == "device"
    assert v100.provenance.accuracy.target_calibrated and not v100.extrapolated.any()
    h200 = predict(KernelTable.from_rows(rows), "SM90_H200", model="analytical")
    assert not h200.provenance.accuracy.target_calibrated and h200.extrapolated.all()
