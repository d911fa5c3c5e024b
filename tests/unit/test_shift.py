"""Shifted-shape protocol, architecture-family siblings and layer sums (issue 19)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascade.calibration import Calibration, load_calibration
from cascade.calibration.accuracy import expected_accuracy
from cascade.calibration.family import same_compute, sibling
from cascade.engine.models import fixed_times
from cascade.engine.workload import workload_of
from cascade.fitting.layers import layer_rows
from cascade.fitting.measured import MeasuredSet, Pair, pairs
from cascade.fitting.shift import SHIFTS, folds, pooled
from cascade.fitting.validation import pair_predictions
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable

REG = default_registry()


SPECS = {s.id: s for s in REG}


def _neusight_sets(n: int = 400) -> list[MeasuredSet]:
    rng = np.random.default_rng(7)
    shapes = [(int(rng.integers(1, 64)), *(int(2 ** rng.uniform(4, 13)) for _ in range(3))) for _ in range(n)]
    keys = np.asarray([f"{b},{m},{nn},{k}" for b, m, nn, k in shapes], dtype=object)
    out = []
    for gid in ("SM80_A100_PCIE_40GB", "SM75_T4"):
        rows = [{"name": "bmm", "op": "bmm", "dtype": "fp32", "batch": b, "m": m, "n": nn, "k": k,
                 "flops": 2.0 * b * m * nn * k, "bytes": 4.0 * b * (m * k + k * nn + m * nn),
                 "duration_ns": 1e4 + 1e-3 * b * m * nn * k} for b, m, nn, k in shapes]
        out.append(MeasuredSet("neusight", "bmm", gid, SPECS[gid], KernelTable.from_rows(rows), keys,
                               np.full(n, "bmm", dtype=object), Path(f"{gid}.csv")))
    return out


def _cells(pair: Pair) -> np.ndarray:
    w = workload_of(pair.source_table)
    return np.stack([np.floor(np.log2(getattr(w, f))) for f in ("batch", "m", "n", "k")], axis=1)


def test_octave_folds_hold_out_whole_cells_and_partition_the_rows() -> None:
    sets = _neusight_sets()
    (even,), (odd,) = folds(sets, "octave")
    for pair in pairs(sets):
        a, b = even[1](pair), odd[1](pair)
        assert a.any() and b.any() and not (a & b).any() and (a | b).all()
        cells = _cells(pair)
        fit = {tuple(c) for c in cells[~a]}
        assert not any(tuple(c) in fit for c in cells[a])  # no scored row shares a 1-octave cell with a fit row
        # face neighbours of a held-out cell are fit cells (a checkerboard, not one block)
        c = cells[np.flatnonzero(a)[0]].copy()
        c[1] += 1
        assert (cells[:, 1] == c[1]).any()


def test_aspect_and_extreme_regions_are_the_same_shapes_on_every_pair() -> None:
    sets = _neusight_sets()
    [(sq_name, square), (long_name, elongated)] = folds(sets, "aspect")[0]
    [(_, small), (_, large)] = folds(sets, "extremes")[0]
    assert "squarest" in sq_name and "elongated" in long_name
    chosen = None
    for pair in pairs(sets):
        w = workload_of(pair.source_table)
        dims = np.stack([w.m, w.n, w.k])
        aspect = np.log2(dims.max(axis=0) / dims.min(axis=0))
        s, e = square(pair), elongated(pair)
        assert 0.1 < s.mean() < 0.2 and 0.1 < e.mean() < 0.2 and not (s & e).any()
        assert aspect[s].max() < aspect[~s & ~e].min() and aspect[e].min() > aspect[~s & ~e].max()
        lo, hi = small(pair), large(pair)
        assert w.flops[lo].max() < w.flops[~lo & ~hi].min() and w.flops[hi].min() > w.flops[~lo & ~hi].max()
        here = {str(k) for k in pair.keys[lo | s]}
        assert chosen is None or here == chosen  # the same shapes leave both directions
        chosen = here
    with pytest.raises(Exception, match="unknown shift"):
        folds(sets, "bogus")


def test_packaged_calibration_quotes_the_shifted_figure_within_1_5x_of_each_protocol() -> None:
    cal = load_calibration()
    rows = cal.metrics.get("shifted_shapes")
    assert isinstance(rows, list) and rows, "default.json has no shifted-shape metrics"
    assert {r["shift"] for r in rows} == set(SHIFTS)
    measured = pooled(rows)
    pairs_seen = {(s, t) for _, s, t in measured}
    assert ("SM80_A100", "SM90_H100") in pairs_seen and len(pairs_seen) == 8
    for src, tgt in sorted(pairs_seen):
        context = "kernel" if src in cal.contexts["kernel"] else "neusight"
        est = expected_accuracy(cal, src, tgt, context)
        assert est.mape_pct is not None and "shifted shapes" in est.basis, est.basis
        for shift in SHIFTS:
            got = measured[(shift, src, tgt)]
            assert got / 1.5 <= est.mape_pct <= got * 1.5, (src, tgt, shift, got, est.mape_pct)


def test_same_compute_siblings_and_lineage() -> None:
    cal = load_calibration()
    h200, h100, b200 = SPECS["SM90_H200"], SPECS["SM90_H100"], SPECS["SM100_B200"]
    assert same_compute(h200, h100) and not same_compute(b200, h100)
    sib = sibling(cal, h200, "kernel", SPECS)
    assert sib is not None and sib.id == "SM90_H100" and sib.same_compute
    assert any("memory bandwidth 4800 vs 3350" in d for d in sib.differs) and not any("SMs" in d for d in sib.differs)
    b = sibling(cal, b200, "kernel", SPECS)
    assert b is not None and b.id == "SM90_H100" and not b.same_compute and any("SMs" in d for d in b.differs)
    assert sibling(cal, h100, "kernel", SPECS) is None  # calibrated
    pcie80 = sibling(cal, SPECS["SM80_A100_PCIE_80GB"], "neusight", SPECS)
    assert pcie80 is not None and pcie80.id == "SM80_A100_PCIE_40GB" and pcie80.same_compute
    l4 = Calibration(contexts={"kernel": ["SM89_L4", "SM80_A100"]})
    got = sibling(l4, SPECS["SM89_L40S"], "kernel", SPECS)
    assert got is not None and got.id == "SM89_L4" and not got.same_compute  # within Ada before Ampere


def test_h200_from_a100_is_h100_accuracy_plus_a_bandwidth_transfer() -> None:
    cal = load_calibration()
    h100 = expected_accuracy(cal, "SM80_A100", "SM90_H100", "kernel")
    h200 = expected_accuracy(cal, "SM80_A100", "SM90_H200", "kernel")
    assert not h200.target_calibrated and h200.sibling == "SM90_H100"
    assert h200.mape_pct == h100.mape_pct and "SM90_H100's accuracy plus a bandwidth transfer" in h200.basis
    b200 = expected_accuracy(cal, "SM80_A100", "SM100_B200", "kernel")
    assert b200.mape_pct is not None and h100.mape_pct is not None and b200.mape_pct > h100.mape_pct
    assert "closest calibrated sibling SM90_H100" in b200.basis
    own = expected_accuracy(cal, "SM90_H100", "SM90_H200", "kernel")
    assert own.mape_pct is not None and own.mape_pct > 0 and "bandwidth transfer alone" in own.basis
    # the H200 keeps the H100's fitted fixed per-kernel time; the B200 (other SMs) does not
    _, ft = fixed_times(np.ones(3), SPECS["SM80_A100"], SPECS["SM90_H200"], cal, "kernel")
    assert ft == pytest.approx(cal.floor_ns("kernel", SPECS["SM90_H100"]))
    _, fb = fixed_times(np.ones(3), SPECS["SM80_A100"], SPECS["SM100_B200"], cal, "kernel")
    assert fb == SPECS["SM100_B200"].launch_overhead_ns


def test_layer_sums_score_whole_layers_only() -> None:
    ops = ["attn_pre_proj", "mlp_up_proj", "add", "emb"]
    keys, rows = [], []
    for t in (64, 512, 2048):
        for op in ops:
            keys.append(f"32,32,4096,11008,1,{t},1,{op}")
            gemm = op.endswith("proj")
            rows.append({"name": op, "op": op, "dtype": "fp16", "duration_ns": 1e5,
                         **({"m": t, "n": 4096, "k": 4096, "batch": 1, "flops": 2.0 * t * 4096 * 4096,
                             "bytes": 2.0 * (2 * t * 4096 + 4096 * 4096)} if gemm else {"bytes": 6.0 * t * 4096, "flops": 0.0})})
    keys_a = np.asarray(keys, dtype=object)
    fam = np.asarray(["linear" if o.endswith("proj") else "elementwise" for o in ops] * 3, dtype=object)
    src = MeasuredSet("vidur", "m", "A100", SPECS["SM80_A100"], KernelTable.from_rows(rows), keys_a, fam, Path("a"))
    tmp = MeasuredSet("vidur", "m", "H100", SPECS["SM90_H100"], KernelTable.from_rows(rows), keys_a, fam, Path("b"))
    (pair, _) = pairs([src, tmp])
    cal = Calibration()
    pred = pair_predictions(pair, "roofline", cal, REG)
    layer = np.asarray([str(k).rsplit(",", 1)[0] for k in pair.keys])
    per = ~np.char.endswith(np.asarray(pair.keys, dtype=str), ",emb")
    # measured = 1.25 x the predicted per-layer operators, except the embedding (not summed)
    target = np.where(per, pred * 1.25, 1e9)
    pair = Pair(pair.source, pair.target, pair.source_table, target, pair.groups, pair.keys)
    mask = ~((layer == "32,32,4096,11008,1,512,1") & np.char.endswith(np.asarray(pair.keys, dtype=str), "add"))
    got = layer_rows([pair], cal, ("roofline",), reg=REG, select={("m", "SM80_A100", "SM90_H100"): mask},
                     left_out="x")
    assert len(got) == 1 and got[0]["family"] == "layer" and got[0]["left_out"] == "x"
    assert got[0]["count"] == 2  # the 512-token layer lost an operator from the selection
    assert got[0]["mape"] == pytest.approx(20.0, abs=0.01)  # |1 / 1.25 - 1|


def test_repeatability_floor_predicts_repeated_work_from_the_other_runs_only() -> None:
    from cascade.fitting.repeat import (
        OTHER_RUNS,
        SAME_WORK,
        other_runs_predictions,
        repeat_rows,
        repeated_work,
    )

    keys, rows, ratio = [], [], []
    for tp, r in ((1, 2.0), (2, 4.0), (8, 3.0)):  # the target / source ratio of each degree's run
        for op in ("add", "attn_pre_proj"):
            keys.append(f"32,32,4096,11008,1,64,{tp},{op}")
            gemm = op.endswith("proj")
            n = 3 * 4096 // tp if gemm else 4096  # the projection is split by TP, the add is not
            rows.append({"name": op, "op": op, "dtype": "fp16", "duration_ns": 1e4, "m": 64, "n": n, "k": 4096,
                         "batch": 1, "flops": 2.0 * 64 * n * 4096 if gemm else 0.0,
                         "bytes": 2.0 * 64 * n if gemm else 6.0 * 64 * 4096})
            ratio.append(r)
    keys_a = np.asarray(keys, dtype=object)
    fam = np.asarray(["elementwise", "linear"] * 3, dtype=object)
    src = MeasuredSet("vidur", "m", "A100", SPECS["SM80_A100"], KernelTable.from_rows(rows), keys_a, fam, Path("a"))
    tgt = MeasuredSet("vidur", "m", "H100", SPECS["SM90_H100"], KernelTable.from_rows(rows), keys_a, fam, Path("b"))
    (pair, _) = pairs([src, tgt])
    order = [keys.index(str(k)) for k in pair.keys]
    pair = Pair(pair.source, pair.target, pair.source_table, 1e4 * np.asarray(ratio)[order], pair.groups, pair.keys)
    group = repeated_work(pair)
    is_add = np.char.endswith(np.asarray(pair.keys, dtype=str), ",add")
    assert np.all(group[~is_add] == -1) and len(set(group[is_add].tolist())) == 1  # the add repeats
    held = np.char.find(np.asarray(pair.keys, dtype=str), ",8,") >= 0  # TP 8 left out
    pred = other_runs_predictions(pair, held)
    sel = held & is_add
    assert pred[sel] == pytest.approx([1e4 * np.sqrt(2.0 * 4.0)])  # geometric mean of TP 1 and 2's ratios
    assert np.isnan(pred[~sel]).all()  # never from its own run, never for unrepeated work
    got = repeat_rows([pair], [held], [{"scaled": np.full(len(pair.keys), 3e4)}], left_out="TP 8")
    by = {r["model"]: r for r in got}
    assert set(by) == {"scaled", OTHER_RUNS} and all(r["family"] == SAME_WORK and r["count"] == 1 for r in got)
    assert by["scaled"]["mape"] == pytest.approx(0.0) and by[OTHER_RUNS]["mape"] == pytest.approx(
        abs(np.sqrt(8.0) / 3.0 - 1) * 100)


def test_shift_option_names_are_checked() -> None:
    from programs.cli.calibrate import _shifts

    assert _shifts("none") == () and _shifts("octave, extremes") == ("octave", "extremes")
    with pytest.raises(Exception, match="unknown shift"):
        _shifts("octave,sideways")


def test_split_k_reads_the_grid_of_the_kernel_that_ran_and_fills_the_sms_otherwise() -> None:
    from cascade.engine.perf import gemm_compute_ns, split_k_factors

    t = KernelTable.from_rows([
        {"name": "ampere_sgemm_32x32_sliced1x4_tn", "op": "linear", "dtype": "fp32", "batch": 1, "m": 71, "n": 10,
         "k": 55349, "grid_x": 1, "grid_y": 3, "grid_z": 26, "duration_ns": 7e4},
        {"name": "ampere_sgemm_32x32_sliced1x4_tn", "op": "linear", "dtype": "fp32", "batch": 1, "m": 4096,
         "n": 4096, "k": 512, "grid_x": 128, "grid_y": 128, "grid_z": 1, "duration_ns": 7e4}])
    w = workload_of(t)
    a100 = SPECS["SM80_A100_PCIE_40GB"]
    named = split_k_factors(w, a100, w.tile_a, w.tile_b)
    assert list(named) == [26.0, 1.0]  # 78 blocks over 3 output tiles; a full grid is not split
    other = np.full(2, 64.0)  # a policy tile (another GPU's library): fill the idle SMs
    fill = split_k_factors(w, a100, other, other)
    assert fill[0] == a100.sms // 2 and fill[1] == 1.0  # 2 tiles of 64x64 on 108 SMs; K chunks >= 256
    rate = np.full(2, 1e13)
    one = gemm_compute_ns(w, a100, rate, w.tile_a, w.tile_b, 4096.0)
    split = gemm_compute_ns(w, a100, rate, w.tile_a, w.tile_b, 4096.0, splits=named)
    assert split[0] == pytest.approx(one[0] / 26.0) and split[1] == one[1]
