"""Fit configuration (the model's optional physical terms) and the quoted-vs-measured check."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from cascade import opfamilies
from cascade.calibration import Calibration, ResolvedParams
from cascade.engine.perf import family_fixed_mult, memory_ns
from cascade.engine.workload import workload_of
from cascade.fitting.fit import FitConfig, fit_sets
from cascade.fitting.measured import MeasuredSet, pairs
from cascade.fitting.report import quote_checks, quote_table, render
from cascade.fitting.validation import ape, pair_predictions
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable

REG = default_registry()
SPECS = {s.id: s for s in REG}


def _sets(n: int = 120, dtype: str = "fp32") -> list[MeasuredSet]:
    rng = np.random.default_rng(11)
    shapes = [(int(rng.integers(1, 16)), *(int(2 ** rng.uniform(5, 11)) for _ in range(3))) for _ in range(n)]
    keys = np.asarray([f"{b},{m},{nn},{k}" for b, m, nn, k in shapes], dtype=object)
    out = []
    for gid, rate in (("SM80_A100_PCIE_40GB", 1.5e13), ("SM75_T4", 4e12)):
        rows = [{"name": "bmm", "op": "bmm", "dtype": dtype, "batch": b, "m": m, "n": nn, "k": k,
                 "flops": 2.0 * b * m * nn * k, "bytes": 4.0 * b * (m * k + k * nn + m * nn),
                 "duration_ns": 2e4 + 2e9 * b * m * nn * k / rate} for b, m, nn, k in shapes]
        out.append(MeasuredSet("neusight", "bmm", gid, SPECS[gid], KernelTable.from_rows(rows), keys,
                               np.full(n, "bmm", dtype=object), Path(f"{gid}.csv")))
    return out


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_fit_config_is_a_field_not_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_FIT_SPLIT_K", "0")  # the old switch: no longer read
    sets = _sets()
    on = fit_sets(sets, evals=40, rounds=1, residuals=False)
    off = fit_sets(sets, evals=40, rounds=1, residuals=False, config=FitConfig(split_k=False))
    assert on.globals.split_k == 1.0 and off.globals.split_k == 0.0
    assert on.globals.l2_resident == 0.0  # not a fitted term by default
    l2 = fit_sets(sets, evals=40, rounds=1, residuals=False, config=FitConfig(l2_reuse=True))
    assert 0.0 < l2.globals.l2_resident < 1.0  # fitted (logistic), starts at one half
    assert FitConfig().options() == ""
    assert FitConfig(split_k=False, l2_reuse=True, family_fixed=True).options() == (
        " --no-split-k --l2-reuse --family-fixed")


def test_cli_options_select_the_fit_config() -> None:
    from cascade.fitting.options import add_model_options, fit_config

    p = argparse.ArgumentParser()
    add_model_options(p)
    assert fit_config(p.parse_args([])) == FitConfig()
    got = fit_config(p.parse_args(["--no-split-k", "--l2-reuse"]))
    assert not got.split_k and got.l2_reuse and not got.family_fixed and got.tile_reuse
    assert not fit_config(p.parse_args(["--no-tile-reuse"])).tile_reuse
    assert not fit_config(p.parse_args(["--no-gemm-stream"])).gemm_stream
    assert not fit_config(p.parse_args(["--no-tensor-tile-reuse"])).tensor_tile_reuse
    assert not fit_config(p.parse_args(["--no-tile-latency"])).tile_latency
    assert not fit_config(p.parse_args(["--no-launch-waves"])).launch_waves
    assert fit_config(p.parse_args([])).gemm_stream


def _table() -> KernelTable:
    return KernelTable.from_rows([
        {"name": "rms_norm_kernel", "op": "norm", "dtype": "fp16", "bytes": 1e6, "duration_ns": 4e3},
        {"name": "vectorized_elementwise_kernel", "op": "elementwise", "dtype": "fp16", "bytes": 4e8,
         "duration_ns": 3e5}])


def test_memory_time_moves_l2_resident_bytes_at_l2_bandwidth() -> None:
    w = workload_of(_table())
    a100 = SPECS["SM80_A100"]
    eff = np.full(len(w), 0.5)
    dram = memory_ns(w, a100, eff, 0.0)
    np.testing.assert_allclose(dram, w.bytes / (a100.bandwidth_bps * 0.5) * 1e9)
    warm = memory_ns(w, a100, eff, 1.0)
    # 1 MB fits in the 40 MB L2: all of it at L2 bandwidth; 400 MB: 40 MB of it
    assert warm[0] == pytest.approx(1e6 / (a100.l2_bandwidth_bps * 0.5) * 1e9)
    assert warm[1] == pytest.approx(((4e8 - a100.l2_bytes) / a100.bandwidth_bps
                                     + a100.l2_bytes / a100.l2_bandwidth_bps) / 0.5 * 1e9)
    assert np.all(warm < dram)


def test_family_fixed_multiplies_only_its_family() -> None:
    w = workload_of(_table())
    p = ResolvedParams(simt_eff=0.8, tensor_eff=0.7, bw_eff=0.6, family_bw={}, calibrated=True,
                       family_fixed={"norm": 1.5})
    mult = family_fixed_mult(w, p)
    assert list(mult) == [1.5 if f == opfamilies.FAMILIES.index("norm") else 1.0 for f in w.family]
    assert mult[0] == 1.5 and mult[1] == 1.0


def _row(src: str, tgt: str, mape: float, **extra: object) -> dict[str, object]:
    return {"kind": "neusight", "dataset": "bmm", "family": "bmm", "source": src, "target": tgt,
            "model": "scaled", "count": 100, "mape": mape, **extra}


def test_quote_checks_compare_each_quote_with_each_measurement() -> None:
    cal = Calibration(
        contexts={"neusight": ["SM80_A100_PCIE_40GB", "SM75_T4", "SM70_V100_PCIE_32GB"]},
        metrics={
            "shifted_shapes": [
                _row("SM75_T4", "SM80_A100_PCIE_40GB", 8.0, shift="octave", left_out="even"),
                _row("SM75_T4", "SM80_A100_PCIE_40GB", 16.0, shift="extremes", left_out="smallest 10%"),
            ],
            "leave_one_gpu_out": [
                _row("SM75_T4", "SM80_A100_PCIE_40GB", 30.0, left_out="SM80_A100_PCIE_40GB"),
                _row("SM75_T4", "SM70_V100_PCIE_32GB", 10.0, left_out="SM70_V100_PCIE_32GB"),
            ]})
    checks = quote_checks(cal)
    pair = [c for c in checks if c.situation == "calibrated pair"]
    assert {(c.protocol, c.measured) for c in pair} == {("octave", 8.0), ("extremes", 16.0)}
    assert all(c.quoted == 12.0 for c in pair)  # the mean over the protocols
    assert sorted(round(c.ratio, 2) for c in pair) == [0.75, 1.5]
    into = sorted((c.measured, c.quoted) for c in checks if c.situation == "into an uncalibrated GPU")
    assert into == [(10.0, 20.0), (30.0, 20.0)]  # both cells pooled into the one quote
    strict = sorted((c.measured, c.quoted) for c in quote_checks(cal, strict=True)
                    if c.situation.startswith("into"))
    assert strict == [(10.0, 30.0), (30.0, 10.0)]  # each quoted from the other GPU's cell only
    table = quote_table(checks)
    assert "| into an uncalibrated GPU | 2 | 0.67 - 2.00 | 1 of 2 |" in table and "outside 1.5x" in table


def test_the_report_prints_every_metrics_section_of_the_packaged_calibration() -> None:
    """``python -m cascade.fitting.report``: the per-operator sections as pair tables, the
    end-to-end protocol's summaries (rows of another shape) as their own tables."""
    from cascade.calibration import load_calibration

    cal = load_calibration()
    out = render(cal)
    for section in cal.metrics:
        assert f"### {section}" in out
    e2e = out.split("### end_to_end\n", 1)[1].split("###", 1)[0]
    assert "| dataset | variant | model | group | cells | mean_pct | worst_pct |" in e2e
    assert "| neusight-e2e | target uncalibrated | scaled | all |" in e2e


def test_tile_reuse_term_costs_small_tiles_more_per_flop_and_is_off_by_default() -> None:
    from cascade.calibration import Globals
    from cascade.engine.perf import TILE_CANDIDATES, target_tiles, tile_reuse_factor

    a = np.array([32.0, 64.0, 128.0])
    assert np.allclose(tile_reuse_factor(a, a, 0.0), 1.0)
    # 1 + c (ta + tb) / (ta tb): 32x32 -> 1 + 4 x 64 / 1024, 128x128 -> 1 + 4 x 256 / 16384
    assert np.allclose(tile_reuse_factor(a, a, 4.0), [1.25, 1.125, 1.0625])
    assert Globals().tile_reuse == 0.0  # calibrations before the term: no cost
    assert FitConfig().tile_reuse is True  # fitted by default
    # the least-time tile of a GPU with no known tile menu: smaller tiles pad less; with the
    # term a larger tile wins once the padding saved no longer pays for the operand traffic
    rows = [{"name": "bmm", "op": "bmm", "dtype": "fp32", "batch": 64, "m": 200, "n": 200, "k": 512}]
    w = workload_of(KernelTable.from_rows(rows))
    p100, v100 = SPECS["SM60_P100_PCIE_16GB"], SPECS["SM70_V100_PCIE_32GB"]
    plain = target_tiles(w, p100, Calibration(), v100)
    reuse = target_tiles(w, p100, Calibration(globals=Globals(tile_reuse=8.0)), v100)
    area = [float(t[0][0] * t[1][0]) for t in (plain, reuse)]
    assert (int(reuse[0][0]), int(reuse[1][0])) in TILE_CANDIDATES
    assert area[1] > area[0]


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_tile_reuse_is_fitted_unless_switched_off() -> None:
    sets = _sets()
    on = fit_sets(sets, evals=40, rounds=1, residuals=False)
    off = fit_sets(sets, evals=40, rounds=1, residuals=False, config=FitConfig(tile_reuse=False))
    assert off.globals.tile_reuse == 0.0 and on.globals.tile_reuse > 0.0
    assert FitConfig(tile_reuse=False).options() == " --no-tile-reuse"


def test_each_gemm_path_has_its_own_tile_reuse_term() -> None:
    from cascade.engine.perf import gemm_compute_ns, mma_feed_ratio

    rows = [{"name": "bmm", "op": "bmm", "dtype": d, "batch": 8, "m": 256, "n": 256, "k": 256}
            for d in ("fp32", "fp16")]
    w = workload_of(KernelTable.from_rows(rows))
    assert not w.tensor[0] and w.tensor[1]
    spec, t = SPECS["SM80_A100_PCIE_40GB"], np.full(2, 32.0)
    rate = np.full(2, 1e13)
    plain = gemm_compute_ns(w, spec, rate, t, t, 0.0)
    reuse = gemm_compute_ns(w, spec, rate, t, t, 0.0, tile_reuse=4.0)
    assert reuse[0] == pytest.approx(plain[0] * 1.25)  # 1 + 4 x (32 + 32) / (32 x 32)
    assert reuse[1] == pytest.approx(plain[1])  # the SIMT term leaves tensor-core tiles alone
    tensor = gemm_compute_ns(w, spec, rate, t, t, 0.0, tensor_tile_reuse=0.5)
    # tensor tiles: kappa x the A100's 16 multiply-adds per shared-memory element read
    assert mma_feed_ratio(spec) == pytest.approx(16.0, rel=1e-3)
    assert tensor[1] == pytest.approx(plain[1] * (1 + 0.5 * mma_feed_ratio(spec) * 64 / 1024))
    assert tensor[0] == pytest.approx(plain[0])


def test_mma_feed_ratio_follows_the_tensor_peak_per_sm_clock() -> None:
    from cascade.calibration import Globals
    from cascade.engine.perf import mma_feed_ratio

    a100, h100, v100 = SPECS["SM80_A100"], SPECS["SM90_H100"], SPECS["SM70_V100_PCIE_32GB"]
    assert mma_feed_ratio(a100) == pytest.approx(312e12 / 2 / 108 / 1.41e9 / 64)
    # the H100 SXM's tensor cores need almost twice the A100's multiply-adds per element read
    assert 1.7 < mma_feed_ratio(h100) / mma_feed_ratio(a100) < 2.0
    assert mma_feed_ratio(v100) < mma_feed_ratio(a100)
    assert mma_feed_ratio(SPECS["SM60_P100_PCIE_16GB"]) == 0.0  # no tensor cores: no term
    assert Globals().tensor_tile_reuse == 0.0  # calibrations before the term: no cost
    assert FitConfig().tensor_tile_reuse is True


def test_tile_latency_delays_each_wave_of_tensor_tiles_only() -> None:
    from cascade.calibration import Globals
    from cascade.engine.perf import gemm_compute_ns

    rows = [{"name": "mm", "op": "mm", "dtype": d, "m": 1024, "n": 4096, "k": 512}
            for d in ("fp32", "fp16")]
    w = workload_of(KernelTable.from_rows(rows))
    spec, t = SPECS["SM90_H100"], np.full(2, 128.0)
    rate = np.full(2, 5e14)
    plain = gemm_compute_ns(w, spec, rate, t, t, 0.0)
    late = gemm_compute_ns(w, spec, rate, t, t, 0.0, tile_latency=2.0)
    waves = 8 * 32 / spec.sms  # 256 tiles of 128 x 128 over 132 SMs
    assert late[1] - plain[1] == pytest.approx(waves * 2.0 * spec.dram_latency_ns)
    assert late[0] == pytest.approx(plain[0])  # SIMT tiles: no term
    assert Globals().tile_latency == 0.0 and FitConfig().tile_latency is True
    assert FitConfig(tile_latency=False).options() == " --no-tile-latency"
    # a short-K GEMM's K loop is short, so the start is a larger share of its time
    long_k = workload_of(KernelTable.from_rows([{**rows[1], "k": 8192}]))
    short = late[1] / plain[1]
    longer = (gemm_compute_ns(long_k, spec, rate[:1], t[:1], t[:1], 0.0, tile_latency=2.0)[0]
              / gemm_compute_ns(long_k, spec, rate[:1], t[:1], t[:1], 0.0)[0])
    assert short > longer > 1.0


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_tensor_tile_reuse_is_fitted_on_tensor_data_only() -> None:
    sets = _sets()  # FP32 SIMT GEMMs only: nothing to fit the tensor term on
    on = fit_sets(sets, evals=40, rounds=1, residuals=False)
    assert on.globals.tensor_tile_reuse == 0.0 and on.globals.tile_reuse > 0.0
    half = _sets(dtype="fp16")  # the same on tensor cores
    got = fit_sets(half, evals=40, rounds=1, residuals=False)
    off = fit_sets(half, evals=40, rounds=1, residuals=False, config=FitConfig(tensor_tile_reuse=False))
    assert got.globals.tensor_tile_reuse > 0.0 and got.globals.tile_reuse == 0.0
    assert got.globals.tile_latency > 0.0 and on.globals.tile_latency == 0.0
    assert off.globals.tensor_tile_reuse == 0.0
    assert FitConfig(tensor_tile_reuse=False).options() == " --no-tensor-tile-reuse"


def test_tile_choice_rows_compare_the_rule_with_the_tiles_cublas_ran() -> None:
    from cascade.fitting.tiles import markdown, tile_choice_rows

    rng = np.random.default_rng(3)
    n = 200
    shapes = [(int(rng.integers(2, 64)), *(int(2 ** rng.uniform(7, 11)) for _ in range(3))) for _ in range(n)]
    rows = [{"name": "volta_sgemm_128x64_nn", "op": "bmm", "dtype": "fp32", "batch": b, "m": m, "n": nn,
             "k": k, "duration_ns": 1e5} for b, m, nn, k in shapes]
    spec = SPECS["SM70_V100_PCIE_32GB"]
    s = MeasuredSet("neusight", "bmm", spec.id, spec, KernelTable.from_rows(rows),
                    np.asarray([str(x) for x in shapes], dtype=object), np.full(n, "bmm", dtype=object),
                    Path("v100.csv"))
    got = tile_choice_rows([s], Calibration(), (0.0, 1e6))
    assert len(got) == 1 and got[0]["batched"] is True and got[0]["ran"] == "128x64 100%"
    # no cost: the rule picks smaller tiles than 128x64; a huge cost: the largest candidates
    assert float(got[0]["area_0"]) < 0 < float(got[0]["area_1e+06"])  # type: ignore[arg-type]
    assert "| bmm | SM70_V100_PCIE_32GB | batched | 200 | 128x64 100% |" in markdown(got, (0.0, 1e6))


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_floor_prior_pulls_a_poorly_identified_harness_floor_towards_the_others() -> None:
    """Two GPUs measured by the same harness (fixed time 20 us, host-side); the T4's data
    has only calls far above its floor, so its fitted floor drifts; with the prior it is
    pulled towards the A100's, and the spread of the two log floors shrinks."""
    from cascade.fitting.fit import _floor_groups, _initial

    sets = _sets()
    t4 = sets[1]
    big = np.flatnonzero(t4.table["duration_ns"] > 3e5)
    sets[1] = MeasuredSet(t4.kind, t4.dataset, t4.gpu_label, t4.spec, t4.table.take(big), t4.keys[big],
                          t4.groups[big], t4.path)
    layout, _x = _initial(sets)
    groups = _floor_groups(layout)
    assert [len(g) for g in groups] == [2]  # one harness kind, both GPUs' floors
    assert all(layout.names[i][0] == "floor" for i in groups[0])

    def spread(cal: Calibration) -> float:
        f = cal.floors_ns["neusight-bmm"]
        return abs(float(np.log(f["SM80_A100_PCIE_40GB"] / f["SM75_T4"])))

    free = fit_sets(sets, evals=120, rounds=1, residuals=False, holdout=0.0, config=FitConfig(floor_prior=0.0))
    pulled = fit_sets(sets, evals=120, rounds=1, residuals=False, holdout=0.0, config=FitConfig(floor_prior=5.0))
    assert spread(pulled) < spread(free)
    assert FitConfig(floor_prior=5.0).options() == " --floor-prior 5"


def test_floor_prior_option() -> None:
    from cascade.fitting.options import add_model_options, fit_config

    p = argparse.ArgumentParser()
    add_model_options(p)
    assert fit_config(p.parse_args([])).floor_prior == FitConfig().floor_prior
    assert fit_config(p.parse_args(["--floor-prior", "0"])).floor_prior == 0.0
    assert fit_config(p.parse_args(["--floor-prior", "0.3"])).floor_prior == 0.3


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_gemm_stream_moves_gemm_bytes_at_the_specs_fraction_in_the_kernel_context_only() -> None:
    """Globals.gemm_stream: a memory-bound GEMM's operand traffic at the spec's achievable
    DRAM fraction in per-kernel times; harness (neusight) times and other kernels keep the
    fitted bw_eff, and a calibration without the term behaves as before."""
    from cascade.calibration import Globals, SpecParams
    from cascade.engine.perf import kernel_times, target_tiles

    a100 = SPECS["SM80_A100"]
    table = KernelTable.from_rows([
        {"name": "gemv", "op": "linear", "dtype": "fp16", "m": 1, "n": 8192, "k": 8192,
         "flops": 2.0 * 8192 * 8192, "bytes": 2.0 * 8192 * 8193 + 2.0 * 8192, "duration_ns": 9e4},
        {"name": "vectorized_elementwise_kernel", "op": "elementwise", "dtype": "fp16", "bytes": 4e8,
         "duration_ns": 3e5}])
    w = workload_of(table)
    fitted = {a100.id: SpecParams(bw_eff=0.5, tensor_eff=0.75)}

    def memory(g: float, context: str) -> np.ndarray:
        cal = Calibration(globals=Globals(gemm_stream=g), specs=fitted)
        params = cal.params_for(a100, None, context)
        return kernel_times(w, a100, params, cal, 0.0, target_tiles(w, a100, cal, a100)).memory_ns

    old, new, harness = memory(0.0, "kernel"), memory(1.0, "kernel"), memory(1.0, "neusight-linear")
    np.testing.assert_allclose(old, w.bytes / (a100.bandwidth_bps * 0.5) * 1e9)
    assert new[0] == pytest.approx(w.bytes[0] / (a100.bandwidth_bps * a100.efficiency.bandwidth) * 1e9)
    assert new[1] == old[1]  # the elementwise kernel keeps its fitted fraction
    np.testing.assert_allclose(harness, old)  # harness contexts keep bw_eff
    assert FitConfig(gemm_stream=False).options() == " --no-gemm-stream"
    on = fit_sets(_sets(40), evals=20, rounds=1, residuals=False)
    assert on.globals.gemm_stream == 1.0
    assert fit_sets(_sets(40), evals=20, rounds=1, residuals=False,
                    config=FitConfig(gemm_stream=False)).globals.gemm_stream == 0.0


def _norm_rows(tokens: list[int], launch: bool = True) -> list[dict[str, object]]:
    return [{"name": "rms_norm_kernel", "op": "norm", "dtype": "fp16", "bytes": 2.0 * 2 * t * 4096,
             "duration_ns": 4e3, **({"grid_x": t, "block_x": 1024} if launch else {})} for t in tokens]


def test_launch_waves_count_resident_blocks_and_quantise_whole_waves() -> None:
    from cascade.calibration import Globals
    from cascade.engine.perf import kernel_times, launch_wave_factor, launch_waves

    a100 = SPECS["SM80_A100"]  # 108 SMs, 2048 threads: two 1024-thread blocks each, 216 per wave
    rows = [*_norm_rows([8, 216, 224, 432]), {"name": "mm", "op": "mm", "dtype": "fp16", "m": 64, "n": 64,
                                                "k": 64, "grid_x": 1, "block_x": 128},
            *_norm_rows([224], launch=False)]
    w = workload_of(KernelTable.from_rows(rows))
    waves = launch_waves(w, a100)
    assert waves[:4] == pytest.approx([8 / 216, 1.0, 224 / 216, 2.0])
    assert np.isnan(waves[4:]).all()  # a GEMM (its tiles have their own waves), no launch shape
    assert launch_waves(workload_of(KernelTable.from_rows(_norm_rows([216]))), SPECS["SM75_T4"])[0] == (
        pytest.approx(216 / 40))  # the T4 holds one 1024-thread block per SM (1024 threads)
    heavy = [{"name": "flash_fwd_kernel", "op": "attention", "dtype": "bf16", "bytes": 1e6, "grid_x": 432,
              "block_x": 128, "regs": regs, "smem_bytes": smem} for regs, smem in ((255, 0), (32, 80 * 1024), (32, 0))]
    got = launch_waves(workload_of(KernelTable.from_rows(heavy)), a100)
    # 255 registers: 2 blocks of 4 warps per SM; 80 KB of shared memory: 2 of the 164 KB; else 16 by threads
    assert got == pytest.approx([432 / 216, 432 / 216, 432 / (16 * 108)])
    whole = launch_wave_factor(w, a100, 1.0)  # under one wave (8 blocks) left as it is
    assert whole[:4] == pytest.approx([1.0, 1.0, 2 / (224 / 216), 1.0]) and (whole[4:] == 1).all()
    half = launch_wave_factor(w, a100, 0.5)
    assert half[2] == pytest.approx(1 + 0.5 * (2 / (224 / 216) - 1))
    assert (launch_wave_factor(w, a100, 0.0) == 1).all() and Globals().launch_waves == 0.0
    # hostile or missing launch shapes: no block size, a block larger than an SM holds, limits no
    # SM meets -- one block per SM at most, never a zero or NaN factor; an empty trace
    odd = [{**_norm_rows([500])[0], "block_x": 0}, {**_norm_rows([500])[0], "block_x": 4096},
           {**_norm_rows([500])[0], "regs": 100_000, "smem_bytes": 10**9}]
    ow = workload_of(KernelTable.from_rows(odd))
    assert np.isnan(launch_waves(ow, a100)[0]) and launch_waves(ow, a100)[1:] == pytest.approx([500 / 108] * 2)
    assert np.isfinite(launch_wave_factor(ow, a100, 1.0)).all()
    assert len(launch_wave_factor(workload_of(KernelTable.from_rows([])), a100, 1.0)) == 0
    # in the model: 224 - 432 tokens take the same time (two waves), 216 half of it
    cal = Calibration(globals=Globals(launch_waves=1.0))
    params = ResolvedParams(simt_eff=0.8, tensor_eff=0.7, bw_eff=0.6, family_bw={}, calibrated=True)
    nw = workload_of(KernelTable.from_rows(_norm_rows([216, 224, 432])))
    t = kernel_times(nw, a100, params, cal, 0.0, (np.zeros(3), np.zeros(3))).work_ns
    assert t[1] == pytest.approx(t[2]) and t[0] == pytest.approx(t[2] / 2)
    off = kernel_times(nw, a100, params, Calibration(), 0.0, (np.zeros(3), np.zeros(3))).work_ns
    assert off[1] < t[1] and off[2] == pytest.approx(t[2])  # full waves cost the same


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_launch_waves_are_fitted_only_on_data_with_launch_shapes() -> None:
    from cascade.fitting.measured import VIDUR_ROW_NORMS

    sets = _sets()  # GEMMs only
    assert fit_sets(sets, evals=40, rounds=1, residuals=False).globals.launch_waves == 0.0
    tokens = [int(t) for t in np.unique(np.geomspace(1, 4096, 60).astype(int))]
    out = []
    for gid, per_wave in (("SM80_A100", 3.2e3), ("SM90_H100", 2.6e3)):
        spec = SPECS[gid]
        rows = [{**r, "duration_ns": 2e3 + per_wave * max(np.ceil(int(r["grid_x"]) / (2 * spec.sms)), 1)}
                for r in _norm_rows(tokens)]
        keys = np.asarray([f"n{t}" for t in tokens], dtype=object)
        out.append(MeasuredSet("vidur", "m", gid, spec, KernelTable.from_rows(rows), keys,
                               np.full(len(rows), "norm", dtype=object), Path(f"{gid}.csv")))
    got = fit_sets(out, evals=120, rounds=1, residuals=False)
    off = fit_sets(out, evals=120, rounds=1, residuals=False, config=FitConfig(launch_waves=False))
    assert got.globals.launch_waves > 0.0 and off.globals.launch_waves == 0.0
    # times that step by whole waves (the H100's at other token counts than the A100's): the
    # fitted term follows the steps the smooth model cannot
    (pair, _) = pairs(out)
    err = {k: float(np.mean(ape(pair_predictions(pair, "scaled", cal, REG), pair.target_ns)))
           for k, cal in (("on", got), ("off", off))}
    assert err["on"] < 0.7 * err["off"]
    assert FitConfig(launch_waves=False).options() == " --no-launch-waves"
    assert VIDUR_ROW_NORMS == ("input_layernorm", "post_attention_layernorm")


def test_warp_fill_slows_a_lone_two_warp_tile_only_and_is_off_by_default() -> None:
    from cascade.calibration import Globals
    from cascade.engine.perf import gemm_compute_ns, tile_warp_fill

    rows = [{"name": "bmm", "op": "bmm", "dtype": d, "batch": b, "m": 64, "n": 64, "k": 256}
            for d, b in (("fp32", 10), ("fp32", 400), ("fp16", 10))]
    w = workload_of(KernelTable.from_rows(rows))
    spec = SPECS["SM75_T4"]  # 40 SMs, 4 warp schedulers each
    t64, t128 = np.full(3, 64.0), np.full(3, 128.0)
    # cuBLAS's 64x64 SGEMM tile runs 64 threads: 2 warps leave 2 of 4 schedulers idle
    assert list(tile_warp_fill(w, spec, t64, t64)) == [2.0, 2.0, 1.0]  # tensor tiles: 1
    assert list(tile_warp_fill(w, spec, t128, t128)) == [1.0, 1.0, 1.0]  # 256 threads
    rate = np.full(3, 8e12)
    plain = gemm_compute_ns(w, spec, rate, t64, t64, 0.0)
    fill = gemm_compute_ns(w, spec, rate, t64, t64, 0.0, warp_fill=1.0)
    assert fill[0] == pytest.approx(2 * plain[0])  # 10 tiles on 40 SMs: each alone, at half rate
    assert fill[1] == pytest.approx(plain[1])  # 10 tiles per SM: the schedulers are busy
    assert fill[2] == pytest.approx(plain[2])
    # a kernel's own block size wins over the library table where the tile is the one it named
    named = workload_of(KernelTable.from_rows([{**rows[0], "name": "volta_sgemm_64x64_nn", "block_x": 32}]))
    assert tile_warp_fill(named, spec, t64[:1], t64[:1])[0] == 4.0
    # a launch shape that states no threads (0, or none at all) falls back to the library's
    for bad in ({"block_x": 0}, {}):
        odd = workload_of(KernelTable.from_rows([{**rows[0], "name": "volta_sgemm_64x64_nn", **bad}]))
        assert tile_warp_fill(odd, spec, t64[:1], t64[:1])[0] == 2.0
    assert Globals().warp_fill == 0.0 and FitConfig().warp_fill is False
    assert FitConfig(warp_fill=True).options() == " --warp-fill"


def test_simt_step_floors_each_k_step_of_an_under_filled_simt_gemm() -> None:
    from cascade.engine.perf import SIMT_K_STEP, gemm_compute_ns

    rows = [{"name": n, "op": "mm", "dtype": d, "m": 64, "n": 64, "k": 4096}
            for n, d in (("mm", "fp32"), ("mm", "fp16"), ("volta_sgemm_32x32_sliced1x4_nn", "fp32"))]
    rows.append({"name": "mm", "op": "mm", "dtype": "fp32", "m": 8192, "n": 8192, "k": 4096})
    w = workload_of(KernelTable.from_rows(rows))
    assert list(w.k_split) == [1.0, 1.0, 4.0, 1.0]
    spec, t = SPECS["SM70_V100_PCIE_32GB"], np.full(4, 64.0)
    rate = np.full(4, 1.4e13)
    plain = gemm_compute_ns(w, spec, rate, t, t, 0.0)
    step = gemm_compute_ns(w, spec, rate, t, t, 0.0, simt_step_ns=800.0)
    assert step[0] == pytest.approx(4096 / SIMT_K_STEP * 800.0) and step[0] > plain[0]
    assert step[1] == pytest.approx(plain[1])  # tensor-core tiles: no floor
    assert step[2] == pytest.approx(max(plain[2], 4096 / SIMT_K_STEP / 4 * 800.0))  # K sliced over 4 warps
    assert step[3] == pytest.approx(plain[3])  # 16384 tiles on 80 SMs: throughput bound


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_simt_step_is_fitted_per_gpu_only_when_switched_on() -> None:
    from cascade.fitting.options import add_model_options, fit_config

    sets = _sets()
    off = fit_sets(sets, evals=40, rounds=1, residuals=False)
    on = fit_sets(sets, evals=40, rounds=1, residuals=False, config=FitConfig(simt_step=True))
    assert all(p.simt_step is None for p in off.specs.values())
    assert all(p.simt_step is not None and p.simt_step > 0 for p in on.specs.values())
    # resolved: a GPU's own step; an unseen one takes the median of the fitted GPUs'
    own = on.params_for(SPECS["SM75_T4"], context="neusight-bmm").simt_step
    assert own == pytest.approx(on.specs["SM75_T4"].simt_step)
    unseen = on.params_for(SPECS["SM70_V100_PCIE_32GB"], context="neusight-bmm").simt_step
    fitted = sorted(p.simt_step for p in on.specs.values() if p.simt_step is not None)
    assert unseen == pytest.approx(float(np.median(fitted)))
    assert off.params_for(SPECS["SM75_T4"]).simt_step == 0.0
    # a context the calibration fitted no GPU in (per-kernel times here) borrows the others',
    # as the efficiencies do (Calibration._fallback)
    assert on.params_for(SPECS["SM90_H100"], context="kernel").simt_step == pytest.approx(float(np.median(fitted)))
    p = argparse.ArgumentParser()
    add_model_options(p)
    got = fit_config(p.parse_args(["--simt-step", "--warp-fill"]))
    assert got.simt_step and got.warp_fill and got.options() == " --warp-fill --simt-step"
