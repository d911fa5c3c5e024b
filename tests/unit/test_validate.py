"""Measured-data loaders and discovery, the fitting pieces (held-out split, compass search, tile
menus, residual grids, leave-one-out protocols), calibration provenance and fallbacks (the
`cascade validate`, `predict` and `calibrate` commands: tests/integration/test_validate.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from cascade.calibration import Calibration, load_calibration
from cascade.errors import TraceFormatError, UnknownGPUError, ValidationError
from cascade.fitting.fit import compass_search, heldout_mask
from cascade.fitting.measured import discover, load_neusight, load_vidur, pairs
from cascade.fitting.validation import evaluate
from cascade.gpus import default_registry
from tests.support.measured import MEASURED, head, small_data

__all__ = ["small_data"]


def test_loaders_read_real_files() -> None:
    reg = default_registry()
    v = load_vidur(MEASURED / "vidur" / "llama-2-7b__mlp__h100.csv", reg)
    assert v.spec.id == "SM90_H100" and v.dataset == "llama-2-7b"
    qkv = np.flatnonzero(v.table["op"] == "attn_pre_proj")[0]
    assert (v.table["n"][qkv], v.table["k"][qkv]) == (3 * 4096, 4096)
    n = load_neusight(MEASURED / "neusight-train" / "linear__Tesla_T4.csv", reg)
    assert n.spec.id == "SM75_T4" and n.table["dtype"][0] == "fp32"
    # NeuSight: C[M, K] = A[M, N] @ W[N, K] -> GEMM m = M, n = K, reduction k = N
    assert (n.table["m"][0], n.table["n"][0], n.table["k"][0]) == (58, 141, 13)


def test_discover_maps_device_names_through_aliases(small_data: Path) -> None:
    sets = discover(small_data, default_registry())
    ids = {(s.kind, s.spec.id) for s in sets}
    assert ("neusight", "SM90_H100") in ids and ("vidur", "SM80_A100") in ids
    assert {(p.source.spec.id, p.target.spec.id) for p in pairs(sets) if p.source.dataset == "linear"} >= {
        ("SM90_H100", "SM80_A100_PCIE_40GB"), ("SM70_V100_PCIE_32GB", "SM75_T4")}


def test_unknown_device_is_a_clear_error(tmp_path: Path) -> None:
    head(MEASURED / "neusight-train" / "bmm__Tesla_T4.csv", tmp_path / "bmm__GeForce_256.csv", 3)
    with pytest.raises(UnknownGPUError) as err:
        discover(tmp_path, default_registry())
    assert "GeForce_256" in str(err.value)


def test_unknown_devices_and_other_kinds_are_skipped_and_named(tmp_path: Path) -> None:
    head(MEASURED / "neusight-train" / "bmm__Tesla_T4.csv", tmp_path / "bmm__Tesla_T4.csv", 3)
    head(MEASURED / "neusight-train" / "bmm__Tesla_T4.csv", tmp_path / "bmm__GeForce_256.csv", 3)
    (tmp_path / "llama-2-7b__attention__a100.csv").write_text("batch_size,time_stats.attn_prefill.median\n1,0.1\n")
    skipped: list[str] = []
    sets = discover(tmp_path, default_registry(), skipped=skipped)
    assert [s.spec.id for s in sets] == ["SM75_T4"]
    assert any("GeForce_256" in m and "SM75_T4" in m for m in skipped)
    assert any(m.startswith("llama-2-7b__attention__a100.csv: not a kind") for m in skipped)


def test_end_to_end_files_are_named_once_as_the_e2e_protocols(tmp_path: Path) -> None:
    """``cascade validate`` over ``../shared/data/measured`` names the whole-model tables and
    KernelBench in one line pointing at ``--e2e``, not one 'not a kind' line per file."""
    head(MEASURED / "neusight-train" / "bmm__Tesla_T4.csv", tmp_path / "bmm__Tesla_T4.csv", 3)
    for gpu in ("Tesla_T4", "Tesla_V100-PCIE-32GB"):
        src = MEASURED / "neusight-e2e" / gpu / "bert_large-inf-512-8.kernels.csv"
        head(src, tmp_path / "neusight-e2e" / gpu / src.name, 3)
    head(MEASURED / "kernelbench" / "kernelbench_level1.csv", tmp_path / "kernelbench" / "kernelbench_level1.csv", 3)
    (tmp_path / "kernelbench" / "other.csv").write_text("a,b\n1,2\n")
    skipped: list[str] = []
    sets = discover(tmp_path, default_registry(), skipped=skipped)
    assert [s.spec.id for s in sets] == ["SM75_T4"]
    e2e_lines = [m for m in skipped if "--e2e" in m]
    assert len(e2e_lines) == 1 and e2e_lines[0].startswith("3 file(s) under kernelbench, neusight-e2e/"), skipped
    # a stray file beside KernelBench's is still named as what it is
    assert any(m.startswith("other.csv: not a kind") for m in skipped)
    assert not any("kernels.csv: not a kind" in m for m in skipped)


def test_bad_number_names_file_and_line(tmp_path: Path) -> None:
    src = (MEASURED / "neusight-train" / "bmm__Tesla_T4.csv").read_text().splitlines()
    cells = src[2].split(",")
    cells[1] = "fast"
    (tmp_path / "bmm__Tesla_T4.csv").write_text("\n".join([src[0], src[1], ",".join(cells)]) + "\n")
    with pytest.raises(TraceFormatError) as err:
        discover(tmp_path, default_registry())
    assert "bmm__Tesla_T4.csv:3" in str(err.value) and "Latency" in str(err.value)


def test_scaled_beats_roofline_on_vidur_a100_to_h100() -> None:
    reg = default_registry()
    sets = [load_vidur(MEASURED / "vidur" / f"llama-2-7b__mlp__{g}.csv", reg) for g in ("a100", "h100")]
    stats = evaluate(pairs(sets), load_calibration(), ("roofline", "scaled"))
    by = {(s.source, s.family, s.model): s for s in stats}
    scaled = by[("SM80_A100", "all", "scaled")]
    roof = by[("SM80_A100", "all", "roofline")]
    assert scaled.count > 10_000 and scaled.mape < roof.mape
    assert scaled.mape <= 10.0


def test_packaged_calibration_has_provenance() -> None:
    cal = load_calibration()
    assert cal.id == "cascade-default" and cal.command.startswith("cascade calibrate")
    assert cal.data_files and cal.specs and cal.metrics
    root = MEASURED
    for rel, digest in cal.data_files.items():
        assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == digest, rel
    for params in cal.specs.values():
        for eff in (params.simt_eff, params.tensor_eff, params.bw_eff):
            assert eff is None or 0 < eff <= 1


def test_uncalibrated_gpu_falls_back_to_arch_then_spec_defaults() -> None:
    cal = load_calibration()
    reg = default_registry()
    h200 = cal.params_for(reg.get("SM90_H200"))
    h100 = cal.params_for(reg.get("SM90_H100"))
    assert not h200.calibrated and h200.tensor_eff == pytest.approx(h100.tensor_eff)
    # same architecture: the fitted GPU's fit / default ratio carries over to the sibling
    a100p, a100s = reg.get("SM80_A100_PCIE_40GB"), reg.get("SM80_A100_SXM_40GB")
    own = cal.specs["SM80_A100_PCIE_40GB"].simt_eff
    assert own is not None
    ratio = own / cal.defaults["SM80_A100_PCIE_40GB"]["simt_eff"]
    assert cal.params_for(a100s).simt_eff == pytest.approx(min(a100s.efficiency.simt * ratio, 1.0))
    assert cal.params_for(a100p).simt_eff == own
    # a new architecture: its own physical default x the median ratio of every fitted GPU
    l4 = reg.get("SM89_L4")
    ratios = sorted(p.simt_eff / cal.defaults[sid]["simt_eff"] for sid, p in cal.specs.items()
                    if p.simt_eff is not None)
    median = float(np.median(ratios))
    assert cal.params_for(l4).simt_eff == pytest.approx(min(l4.efficiency.simt * median, 1.0))
    # a calibration without recorded defaults falls back to the spec defaults
    bare = Calibration()
    assert bare.params_for(l4).simt_eff == l4.efficiency.simt


def test_fits_from_another_measurement_context_come_after_this_contexts_ratios() -> None:
    cal = load_calibration()
    reg = default_registry()
    assert "SM90_H100" in cal.contexts["kernel"] and "SM90_H100" not in cal.contexts["neusight"]
    h100 = reg.get("SM90_H100")
    own = cal.specs["SM90_H100"].bw_eff
    # per-kernel times (Vidur, traces): the H100's own fit
    assert cal.params_for(h100, context="kernel").bw_eff == own
    # a benchmark harness's GEMM latencies: the H100 default x the harness-fitted GPUs' median ratio
    ratios = [cal.specs[sid].bw_eff / cal.defaults[sid]["bw_eff"] for sid in cal.contexts["neusight"]]
    expect = min(h100.efficiency.bandwidth * float(np.median(ratios)), 1.0)
    assert cal.params_for(h100, context="neusight-bmm").bw_eff == pytest.approx(expect)
    assert expect != pytest.approx(own)
    # no context (or a calibration without contexts): the own fit, as before
    assert cal.params_for(h100).bw_eff == own


def test_heldout_split_is_stable_and_sized() -> None:
    keys = np.array([f"{i},{i * 7}" for i in range(5000)], dtype=object)
    a, b = heldout_mask(keys, 0.2), heldout_mask(keys, 0.2)
    assert np.array_equal(a, b) and 0.17 < a.mean() < 0.23


def test_compass_search_minimises_a_coupled_quadratic() -> None:
    def f(p: np.ndarray) -> float:
        a, b = p[0] - 1.0, p[1] + 2.0
        return float(a * a + b * b + 0.8 * a * b)

    x, v = compass_search(f, np.zeros(2), evals=2000)
    assert v < 1e-6 and np.allclose(x, [1.0, -2.0], atol=2e-3)
    # the budget is a hard cap
    calls = []
    compass_search(lambda p: calls.append(1) or f(p), np.zeros(2), evals=7)
    assert len(calls) <= 8


def test_calibration_round_trip(tmp_path: Path) -> None:
    from cascade.calibration import save_calibration

    cal = load_calibration()
    save_calibration(cal, tmp_path / "c.json")
    again = load_calibration(tmp_path / "c.json")
    assert isinstance(again, Calibration) and again.digest() == cal.digest()


def test_a_calibrations_digest_is_its_content_whichever_object_asks() -> None:
    """The digest is kept per calibration object (a fit predicts with one thousands of times), so
    an equal copy hashes the same and a changed one differently, however many were hashed between."""
    import msgspec

    cal = load_calibration()
    first = cal.digest()
    changed = [msgspec.structs.replace(cal, id=f"copy-{i}") for i in range(40)]
    digests = {c.digest() for c in changed}
    assert len(digests) == 40 and first not in digests
    assert cal.digest() == first == msgspec.json.decode(msgspec.json.encode(cal), type=Calibration).digest()


def test_tile_menus_keep_the_tiles_a_path_ran_often_enough() -> None:
    from cascade.engine.workload import workload_of
    from cascade.fitting.fit import _tile_menus
    from cascade.kerneltable import KernelTable

    def rows(name: str, n: int, batch: int) -> list[dict[str, object]]:
        return [{"name": name, "op": "bmm", "dtype": "fp32", "batch": batch, "m": 256, "n": 256, "k": 256}] * n

    w = workload_of(KernelTable.from_rows(
        rows("volta_sgemm_64x64_nn", 30, 8) + rows("volta_sgemm_128x128_nn", 1, 8)
        + rows("volta_sgemm_128x32_nn", 4, 8) + rows("volta_sgemm_32x128_tn", 5, 1)))
    menus = _tile_menus([("turing", w)])
    assert menus == {"turing": {"simt_batched": [[64, 64], [128, 32]], "simt": [[32, 128]]}}


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_leave_one_tp_degree_out_scores_only_the_degree_the_fit_never_saw(tmp_path: Path) -> None:
    from cascade.fitting import extrapolate
    from cascade.fitting.measured import discover, pairs, vidur_tp_degree

    vd = tmp_path / "vidur"
    vd.mkdir()
    for f in (MEASURED / "vidur").glob("*.csv"):  # every 12th row: TP 1, 2, 4 and 8 all present,
        lines = f.read_text().splitlines()  # and 4 token counts at every degree (repeated work)
        col = lines[0].split(",").index("num_tokens")
        again = [line for line in lines[1:] if line.split(",")[col] in ("64", "512", "1024", "2048")]
        (vd / f.name).write_text("\n".join([lines[0], *dict.fromkeys([*lines[1::12], *again])]) + "\n")
    sets = discover(tmp_path, default_registry())
    tps = {int(t) for s in sets for t in vidur_tp_degree(s.keys)}
    assert tps == {1, 2, 4, 8}
    rows = extrapolate.leave_one_tp_out(sets, evals=40)
    scaled = [r for r in rows if r["model"] == "scaled" and r["family"] == "all"]
    assert {r["left_out"] for r in scaled} == {f"TP {t}" for t in tps}
    common = pairs(sets)[0].keys  # the rows both GPUs measured
    per_tp = {t: sum(int(x) == t for x in vidur_tp_degree(common)) for t in tps}
    for r in scaled:  # both directions, only the left-out degree's rows
        assert r["count"] == per_tp[int(str(r["left_out"]).split()[1])]
        assert 0 < r["mape"] < 100
    # the repeatability floor: the norms, residual add and embedding, on the same rows as the model
    same = [r for r in rows if r["family"] == "same work"]
    assert {r["model"] for r in same} == {"roofline", "scaled", "other runs"}
    assert {r["left_out"] for r in same} == {f"TP {t}" for t in tps}
    assert all(0 < r["count"] <= per_tp[int(str(r["left_out"]).split()[1])] and r["mape"] >= 0 for r in same)
    assert extrapolate.main(["--data", str(tmp_path / "vidur"), "--evals", "40"]) == 0
    (tmp_path / "none").mkdir()
    assert extrapolate.main(["--data", str(tmp_path / "none")]) == 1


def test_residual_cells_group_gemm_shapes_and_skip_other_kernels() -> None:
    from cascade.engine.extrapolation import residual_cells
    from cascade.engine.workload import workload_of
    from cascade.kerneltable import KernelTable

    rows = [{"name": "g", "op": "bmm", "dtype": "fp32", "batch": 8, "m": 512, "n": 256, "k": 64},
            {"name": "g", "op": "bmm", "dtype": "fp32", "batch": 9, "m": 600, "n": 300, "k": 70},  # same cell
            {"name": "g", "op": "bmm", "dtype": "fp32", "batch": 8, "m": 512, "n": 256, "k": 4096},  # K 6 octaves up
            {"name": "g", "op": "bmm", "dtype": "fp16", "batch": 8, "m": 512, "n": 256, "k": 64},  # other dtype
            {"name": "add", "op": "elementwise", "dtype": "fp32", "bytes": 1e6}]
    cells = residual_cells(workload_of(KernelTable.from_rows(rows)), 2.0)
    assert cells[0] == cells[1] and len({cells[0], cells[2], cells[3]}) == 3 and cells[4] == -1


def test_residual_table_lookup_and_scaled_model_applies_it_across_architectures_only() -> None:
    import msgspec

    from cascade.calibration import ResidualTable
    from cascade.engine.base import ModelContext
    from cascade.engine.extrapolation import residual_cells
    from cascade.engine.models import ScaledConfig, ScaledModel
    from cascade.engine.workload import workload_of
    from cascade.kerneltable import KernelTable

    reg = default_registry()
    t4, v100, t4_twin = reg.get("SM75_T4"), reg.get("SM70_V100_PCIE_32GB"), reg.get("SM75_T4")
    table = KernelTable.from_rows([{"name": "volta_sgemm_128x64_nn", "op": "bmm", "dtype": "fp32", "batch": 16,
                                    "m": 1024, "n": 512, "k": 256, "duration_ns": 2.0e6}])
    w = workload_of(table)
    cell = int(residual_cells(w, 2.0)[0])
    grid = ResidualTable(width=2.0, keys=[cell - 1, cell], values=[0.5, np.log(1.25)], rows=[9, 9])
    assert np.allclose(grid.lookup(np.array([cell, cell + 1, cell - 1])), [np.log(1.25), 0.0, 0.5])
    assert ResidualTable().lookup(np.array([cell])).tolist() == [0.0]
    base = load_calibration()
    cal = msgspec.structs.replace(base, residuals={"neusight-bmm": {"SM75_T4": grid}})
    model = ScaledModel()

    def run(c: Calibration, source: object, residuals: bool = True) -> float:
        cfg = ScaledConfig(measurement="neusight-bmm", residuals=residuals)
        return float(model.predict(table, w, t4, ModelContext(source, c, cfg, None)).predicted_ns[0])

    plain = run(msgspec.structs.replace(base, residuals={}), v100)
    assert run(cal, v100) == pytest.approx(1.25 * plain)  # V100 -> T4: the T4's grid applies
    assert run(cal, v100, residuals=False) == pytest.approx(plain)
    assert run(cal, t4_twin) == pytest.approx(run(msgspec.structs.replace(base, residuals={}), t4_twin))  # same arch


def test_residual_grids_come_from_fit_rows_only(small_data: Path) -> None:
    from cascade.fitting.fit import _residual_tables

    reg = default_registry()
    archs = {s.id: s.arch for s in reg}
    sets = [s for s in discover(small_data, reg) if s.kind == "neusight" and s.dataset == "bmm"]
    cal = load_calibration()
    everything = _residual_tables(pairs(sets), cal, archs, holdout=0.0, exclude=None, min_rows=1)
    nothing = _residual_tables(pairs(sets), cal, archs, holdout=1.0, exclude=None, min_rows=1)
    assert nothing == {}
    t4 = everything["neusight-bmm"]["SM75_T4"]
    into_t4 = [p for p in pairs(sets) if p.target.spec.id == "SM75_T4"]
    assert sum(t4.rows) == sum(len(p.keys) for p in into_t4)  # every row of both sources, once
    some = _residual_tables(pairs(sets), cal, archs, holdout=0.5, exclude=None, min_rows=1)
    kept = sum(int((~heldout_mask(p.keys, 0.5)).sum()) for p in into_t4)
    assert sum(some["neusight-bmm"]["SM75_T4"].rows) == kept
    assert t4.keys == sorted(t4.keys) and all(abs(v) < 2 for v in t4.values)


def test_discover_reads_the_vidur_and_neusight_repository_layouts(tmp_path: Path) -> None:
    """The same measurements laid out as the Vidur and NeuSight repositories keep them load and
    pair like the flat files; other ops' rows and a second copy of one GPU's data are named."""
    vd = MEASURED / "vidur"
    for gpu in ("a100", "h100"):
        folder = tmp_path / "compute" / gpu / "meta-llama" / "Llama-2-7b-hf"
        folder.mkdir(parents=True)
        head(vd / f"llama-2-7b__mlp__{gpu}.csv", folder / "mlp.csv", 40)
    ns = MEASURED / "neusight-train"
    collect = tmp_path / "collect" / "bmm" / "p2.1.0"
    collect.mkdir(parents=True)
    head(ns / "bmm__Tesla_T4.csv", collect / "Tesla T4.csv", 300)
    mixed = [*(ns / "bmm__Tesla_V100-PCIE-32GB.csv").read_text().splitlines()[:301],
             *(ns / "bmm__NVIDIA_A100-PCIE-40GB.csv").read_text().splitlines()[1:301],
             "ln,0.01,Tesla T4,p2.1.0,8902,k,1,1,1,1,1,1,1,1,cu121,;k,1,2,3,4"]
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "bmm.csv").write_text("\n".join(mixed) + "\n")
    head(ns / "bmm__Tesla_T4.csv", tmp_path / "bmm__Tesla_T4.csv", 300)  # the T4 twice
    reg = default_registry()
    skipped: list[str] = []
    sets = discover(tmp_path, reg, skipped=skipped)
    got = sorted((s.kind, s.dataset, s.spec.id, len(s.table)) for s in sets)
    assert got == [("neusight", "bmm", "SM70_V100_PCIE_32GB", 300), ("neusight", "bmm", "SM75_T4", 300),
                   ("neusight", "bmm", "SM80_A100_PCIE_40GB", 300),
                   ("vidur", "Llama-2-7b-hf", "SM80_A100", 40 * 10), ("vidur", "Llama-2-7b-hf", "SM90_H100", 40 * 10)]
    assert any("rows of ln left out" in m for m in skipped)
    assert any("SM75_T4 already read from" in m for m in skipped)
    # rows parse exactly as the flat layout's loader reads them
    flat = load_neusight(ns / "bmm__Tesla_V100-PCIE-32GB.csv", reg)
    v100 = next(s for s in sets if s.spec.id == "SM70_V100_PCIE_32GB")
    assert list(v100.keys) == list(flat.keys[:300])
    assert np.array_equal(v100.table["duration_ns"], flat.table["duration_ns"][:300])
    assert len(pairs(sets)) == 3 * 2 + 2
    # a repository CSV of a GPU no spec describes is named, not fatal
    (tmp_path / "test" / "linear.csv").write_text(mixed[0] + "\nlinear,0.1,Radeon 9000,p2.1.0,1,k,1,1,1,1,1,1,1,1,cu,;k,1,2,3,4\n")
    skipped = []
    discover(tmp_path, reg, skipped=skipped)
    assert any("Radeon 9000" in m for m in skipped)


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_leave_largest_shapes_out_scores_only_gemms_above_the_quantile(small_data: Path, tmp_path: Path) -> None:
    from cascade.engine.workload import workload_of
    from cascade.fitting import extrapolate
    from cascade.fitting.measured import discover, pairs

    sets = [s for s in discover(small_data, default_registry()) if s.kind == "neusight" and s.dataset == "bmm"]
    rows = extrapolate.leave_largest_out(sets, quantile=0.75, evals=40)
    scaled = [r for r in rows if r["model"] == "scaled" and r["family"] == "bmm"]
    assert scaled and {r["left_out"] for r in scaled} == {"FLOPs > q0.75"}
    flops = np.concatenate([np.nan_to_num(workload_of(p.source_table).flops) for p in pairs(sets)])
    cut = np.quantile(flops[flops > 0], 0.75)
    for r in scaled:  # each pair scores exactly its rows above the data set's cut
        pair = next(p for p in pairs(sets) if (p.source.spec.id, p.target.spec.id) == (r["source"], r["target"]))
        assert r["count"] == int(np.sum(np.nan_to_num(workload_of(pair.source_table).flops) > cut)) > 0
        assert 0 < r["mape"] < 100
    with pytest.raises(ValidationError, match="quantile"):
        extrapolate.leave_largest_out(sets, quantile=1.5)
    assert extrapolate.main(["--data", str(tmp_path), "--largest", "0.8"]) == 1
