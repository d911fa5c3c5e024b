"""Kernel models: registry, name hints, physical sanity, scaled identity, analytical, accel-sim."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade.engine import (
    extrapolation,
    get_model,
    model_names,
    perf,
    predict,
    predict_many,
    workload_of,
)
from cascade.engine.accelsim import parse_accelsim_output
from cascade.engine.base import ModelContext
from cascade.engine.perf import roofline_ns
from cascade.engine.registry import MODELS
from cascade.errors import DuplicateNameError, TraceFormatError, UnknownNameError, ValidationError
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable
from cascade.opfamilies import FAMILIES, family_of, k_split_of, tensor_path_of, tile_of
from tests.support.paths import SHARED_DATA

DATA = SHARED_DATA
LOG = DATA / "accelsim-log" / "vectoradd-100-32.accelsim_log.txt"


def gemm_rows(count: int = 1, **kw: object) -> list[dict[str, object]]:
    base = {"name": "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn", "op": "linear",
            "dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "duration_ns": 600_000.0}
    base.update(kw)
    return [dict(base) for _ in range(count)]


def test_model_registry() -> None:
    assert {"roofline", "scaled", "analytical", "accel-sim", "auto"} <= set(model_names())
    with pytest.raises(UnknownNameError) as err:
        get_model("magic")
    assert "roofline" in str(err.value)
    with pytest.raises(DuplicateNameError):
        MODELS.register("roofline", None, lambda: get_model("roofline"))


@pytest.mark.parametrize(("name", "tile", "tensor", "ksplit"), [
    ("ampere_sgemm_128x64_tn", (128, 64), 0, 1),
    ("volta_sgemm_32x32_sliced1x4_tn", (32, 32), 0, 4),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn", (256, 128), 1, 1),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize1x1x1_execute", (128, 256), 1, 1),
    ("volta_h884gemm_64x128_ldg8_nn", (64, 128), 1, 1),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", (128, 128), 1, 1),
    ("void at::native::vectorized_elementwise_kernel<4>", (0, 0), -1, 1),
    # cuBLAS 12's FP32 GEMMs on Hopper: xmma-generated but FFMA (CUDA cores), and CUTLASS SIMT
    (("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4"
     "_execute_kernel__5x_cublas"), (128, 128), 0, 1),
    (("void cutlass::Kernel<cutlass_80_simt_sgemm_256x128_8x4_tn_align1>(cutlass_80_simt_sgemm_256x128_8x4"
     "_tn_align1::Params)"), (256, 128), 0, 1),
    ("maxwell_sgemm_32x128_tn", (32, 128), 0, 1),
    ("sgemm_128x128x8_NT_vec", (128, 128), 0, 1),
    ("sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8", (128, 128), 1, 1),
])
def test_name_hints(name: str, tile: tuple[int, int], tensor: int, ksplit: int) -> None:
    assert tile_of(name) == tile
    assert tensor_path_of(name) == tensor
    assert k_split_of(name) == ksplit


@pytest.mark.parametrize(("op", "family"), [
    ("linear", "gemm"), ("bmm", "gemm"), ("attn_pre_proj", "gemm"), ("input_layernorm", "norm"),
    ("rmsnorm", "norm"), ("softmax", "softmax"), ("mlp_act", "elementwise"), ("attention", "attention"),
    ("emb", "embedding"), ("post_attention_layernorm", "norm")])
def test_op_families(op: str, family: str) -> None:
    assert FAMILIES[family_of(op, "")] == family


def test_gemm_flops_and_bytes_filled_from_shape() -> None:
    w = workload_of(KernelTable.from_rows(gemm_rows(batch=2, m=64, n=128, k=32)))
    assert w.flops[0] == 2 * 2 * 64 * 128 * 32
    assert w.bytes[0] == 2 * 2 * (64 * 32 + 32 * 128 + 64 * 128)
    assert bool(w.tensor[0])


def test_fp32_operands_on_a_tensor_kernel_run_as_tf32_and_ffma_kernels_stay_simt() -> None:
    rows = [*gemm_rows(m=4096, n=4096, k=4096, dtype="fp32",
                       name="sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x16_tensor16x8x8"),
            *gemm_rows(m=4096, n=4096, k=4096, dtype="fp32",
                       name="sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_ffma_aligna4")]
    w = workload_of(KernelTable.from_rows(rows))
    assert list(w.tensor) == [True, False]
    h100 = default_registry().get("SM90_H100")
    peaks = perf.peak_flops(w, h100)
    assert peaks[0] == h100.tensor_flops("tf32") > 0
    assert peaks[1] == h100.simt_flops("fp32")


def test_half_gemms_without_tensor_cores_run_at_the_fp32_fma_rate() -> None:
    """PyTorch's FP16 GEMM accumulates in FP32 (cublasGemmEx, CUDA_R_32F): on a P100, whose
    packed-FP16 peak is twice its FP32 one, the A100's tensor-core GEMM runs as FP32 FMAs."""
    reg = default_registry()
    p100, a100 = reg.get("SM60_P100_PCIE_16GB"), reg.get("SM80_A100")
    rows = [*gemm_rows(m=4096, n=4096, k=4096),  # an A100 tensor-core fp16 GEMM
            {"name": "vectorized_elementwise_kernel", "op": "add", "dtype": "fp16", "flops": 1e9, "bytes": 1e6}]
    w = workload_of(KernelTable.from_rows(rows))
    assert list(w.tensor) == [True, False]
    assert p100.simt_flops("fp16") > 1.9 * p100.simt_flops("fp32") > 0 and p100.tensor_flops("fp16") == 0
    moved = perf.on_spec(w, p100)
    assert list(moved.tensor) == [False, False] and perf.on_spec(w, a100) is w
    peaks = perf.peak_flops(w, p100)
    assert peaks[0] == p100.simt_flops("fp32")  # the GEMM: FP32 FMAs
    assert peaks[1] == p100.simt_flops("fp16")  # not a matmul: packed FP16 arithmetic
    assert perf.peak_flops(w, a100)[0] == a100.tensor_flops("fp16")
    # the predicted GEMM time follows: at least the FP32-rate roofline, not the FP16 one
    t = KernelTable.from_rows(gemm_rows(m=4096, n=4096, k=4096, duration_ns=0.7e6))
    p = predict(t, "SM60_P100_PCIE_16GB", source="A100", model="scaled")
    assert p.predicted_ns[0] >= 2 * 4096**3 / p100.simt_flops("fp32") * 1e9
    assert p.flags[0] & extrapolation.OFF_TENSOR  # and says so
    assert not predict(t, "H100", source="A100", model="scaled").flags[0] & extrapolation.OFF_TENSOR

def test_h100_faster_than_a100_on_large_fp16_gemm_by_about_peak_ratio() -> None:
    t = KernelTable.from_rows(gemm_rows(m=8192, n=8192, k=8192, duration_ns=4.2e6))
    p = predict(t, "H100", source="A100", model="scaled")
    ratio = t["duration_ns"][0] / p.predicted_ns[0]
    assert 2.0 < ratio < 3.8
    assert p.regime_names[0] == "compute"
    assert p.provenance.spec_id == "SM90_H100" and p.provenance.source_id == "SM80_A100"


def test_memory_bound_kernel_scales_with_bandwidth() -> None:
    t = KernelTable.from_rows([{"name": "add", "op": "add", "dtype": "fp16", "bytes": 3e8, "duration_ns": 2e5}])
    p = predict(t, "SM90_H200", source="SM90_H100", model="scaled")
    assert p.regime_names[0] == "memory"
    assert 1.2 < 2e5 / p.predicted_ns[0] < 1.7  # 4800 / 3350 GB/s


def test_tiny_kernel_is_launch_bound() -> None:
    t = KernelTable.from_rows([{"name": "add", "op": "add", "dtype": "fp16", "bytes": 64.0, "duration_ns": 2500.0}])
    p = predict(t, "H100", source="A100", model="scaled")
    assert p.regime_names[0] == "launch"
    assert 1000 < p.predicted_ns[0] < 4000


def test_scaled_on_own_source_reproduces_measured_times() -> None:
    rows = gemm_rows(m=77, n=3000, k=512, duration_ns=41_000.0) + [
        {"name": "rms", "op": "rmsnorm", "dtype": "fp16", "bytes": 1e7, "duration_ns": 9000.0}]
    t = KernelTable.from_rows(rows)
    p = predict(t, "SM80_A100", source="SM80_A100", model="scaled")
    np.testing.assert_allclose(p.predicted_ns, t["duration_ns"], rtol=1e-9)


def test_scaled_carries_a_memory_bound_gemms_deviation_and_not_a_compute_bound_ones() -> None:
    import msgspec

    from cascade.calibration import Calibration, Transfer, load_calibration

    # weight streaming, measured 1.5x what the model (DRAM at the spec's fraction) says: a
    # deviation for the exponent to carry
    rows = (gemm_rows(m=1, n=8192, k=8192, duration_ns=130_000.0, name="decode_linear")
            + gemm_rows(m=8192, n=8192, k=8192, duration_ns=4_000_000.0, name="gemm"))  # tensor-core bound
    t = KernelTable.from_rows(rows)
    packaged = load_calibration()
    cal = msgspec.structs.replace(packaged, transfer={"kernel": Transfer(gemm=0.0, gemm_memory=1.0, other=1.0)})
    scaled = predict(t, "SM90_H100", source="SM80_A100", model="scaled", calibration=cal).predicted_ns
    plain = predict(t, "SM90_H100", source="SM80_A100", model="scaled", calibration=msgspec.structs.replace(
        packaged, transfer={"kernel": Transfer(gemm=0.0, gemm_memory=0.0, other=0.0)})).predicted_ns
    # the exponent moves from gemm_memory (1) to gemm (0) with the source model's compute share
    w = workload_of(t)
    a100, h100 = default_registry().get("SM80_A100"), default_registry().get("SM90_H100")
    fixed = cal.floor_ns("kernel", a100) or a100.launch_overhead_ns
    ms = perf.kernel_times(w, a100, cal.params_for(a100, None, "kernel"), cal, fixed,
                           perf.target_tiles(w, a100, cal, a100))
    share = ms.compute_ns / (ms.compute_ns + ms.memory_ns)
    assert share[0] < 1 / 3 and share[1] > 0.9  # weight streaming: memory time >= 2x compute time
    # ... except that a GEMV (M = 1) streams its weights: the streaming kernels' exponent (other = 1)
    assert perf.streams_weights(w).tolist() == [True, False]
    expo = np.where(perf.streams_weights(w), 1.0, 1.0 - share)
    expect = np.maximum(plain * (t["duration_ns"] / ms.total_ns) ** expo, perf.roofline_ns(w, h100))
    np.testing.assert_allclose(scaled, expect, rtol=1e-6)
    # weight streaming keeps most of its measured deviation; the tensor-bound GEMM almost none
    assert abs(scaled[0] / plain[0] - 1) > 5 * abs(scaled[1] / plain[1] - 1)
    # an unknown measurement context takes the per-kernel context's exponents
    assert cal.transfer_for("my-harness") == cal.transfer["kernel"]
    assert Calibration().transfer_for("kernel") == Transfer(gemm=1.0, gemm_memory=1.0, other=1.0)


def test_scaled_needs_a_source() -> None:
    with pytest.raises(ValidationError):
        predict(KernelTable.from_rows(gemm_rows()), "H100", model="scaled")


def test_auto_picks_per_row() -> None:
    rows = gemm_rows() + [{"name": "x", "op": "add", "dtype": "fp16", "bytes": 1e6},
                          {"name": "mystery_kernel"}]
    p = predict(KernelTable.from_rows(rows), "H100", source="A100", model="auto")
    assert list(p.models) == ["scaled", "analytical", "roofline"]
    assert np.all(np.isfinite(p.predicted_ns)) and np.all(p.predicted_ns > 0)


_SPEC_IDS = sorted(default_registry().ids())
_ROW = st.fixed_dictionaries({
    "kind": st.sampled_from(["gemm", "mem", "bmm_fp32"]),
    "m": st.integers(1, 16384), "n": st.integers(1, 16384), "k": st.integers(1, 16384),
    "batch": st.integers(1, 64), "bytes": st.floats(0, 1e10), "duration_ns": st.floats(500, 1e9),
    "dtype": st.sampled_from(["fp16", "bf16", "fp32", "tf32", "fp8", "int8"]),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(_ROW, min_size=1, max_size=8), src=st.sampled_from(_SPEC_IDS),
       tgt=st.sampled_from(_SPEC_IDS), model=st.sampled_from(["roofline", "scaled", "analytical", "auto"]))
def test_no_prediction_beats_the_roofline(rows: list[dict[str, object]], src: str, tgt: str, model: str) -> None:
    table_rows = []
    for r in rows:
        if r["kind"] == "mem":
            table_rows.append({"name": "vectorized_elementwise_kernel", "op": "add", "dtype": r["dtype"],
                               "bytes": r["bytes"], "flops": float(r["bytes"]) / 4, "duration_ns": r["duration_ns"]})
        else:
            name = "volta_sgemm_64x64_nn" if r["kind"] == "bmm_fp32" else "gemm_kernel"
            table_rows.append({"name": name, "op": "bmm", "dtype": r["dtype"], "m": r["m"], "n": r["n"],
                               "k": r["k"], "batch": r["batch"], "duration_ns": r["duration_ns"]})
    t = KernelTable.from_rows(table_rows)
    p = predict(t, tgt, source=src, model=model)
    spec = default_registry().get(tgt)
    w = workload_of(t)
    # FP8 on a GPU without FP8 tensor cores runs on its BF16 / FP16 ones (its software's
    # fallback, perf.tensor_dtype_on), not on the CUDA cores
    def peak(d: str) -> float:
        alt = perf.tensor_dtype_on(spec, d) if d in perf.LOW_PRECISION else ""
        return spec.tensor_flops(alt) if alt else spec.peak_flops(d, True)

    floor = np.maximum(w.flops / np.array([peak(str(d)) for d in w.dtype]), w.bytes / spec.bandwidth_bps) * 1e9
    assert np.all(np.isfinite(p.predicted_ns))
    if model != "analytical" and default_registry().get(src).id == spec.id:  # identity: measured, exactly
        assert np.array_equal(p.predicted_ns, t["duration_ns"])
        return
    assert np.all(p.predicted_ns >= floor * (1 - 1e-9))
    assert np.all(p.predicted_ns >= roofline_ns(w, spec) * (1 - 1e-9))


def test_predict_many_shares_work_and_keeps_order() -> None:
    t = KernelTable.from_rows(gemm_rows(3))
    preds = predict_many(t, ["H100", "H200", "B200"], source="A100")
    assert [p.target for p in preds] == ["SM90_H100", "SM90_H200", "SM100_B200"]
    assert preds[2].predicted_ns[0] < preds[0].predicted_ns[0]


# ---- analytical ------------------------------------------------------------------------
def feature_row(**kw: object) -> dict[str, object]:
    row: dict[str, object] = {"name": "k", "grid_x": 1080, "grid_y": 1, "grid_z": 1, "block_x": 256,
                              "block_y": 1, "block_z": 1, "regs": 32, "smem_bytes": 0,
                              "warp_insts": 8.64e6, "insts_fp32": 4e6, "insts_int": 1e6,
                              "insts_ld_global": 3e5, "insts_st_global": 1e5, "gmem_sectors": 1.6e6,
                              "footprint_lines": 4e5, "warps": 8640, "dep_chain": 200.0}
    row.update(kw)
    return row


def test_analytical_occupancy_limits() -> None:
    from cascade.engine.analytical import occupancy

    spec = default_registry().get("SM80_A100")
    t = KernelTable.from_rows([feature_row(), feature_row(regs=255), feature_row(smem_bytes=100_000),
                               feature_row(block_x=1024)])
    bps, threads = occupancy(t, spec)
    assert list(bps) == [8, 1, 1, 2]
    assert threads[3] == 1024


def test_analytical_more_work_takes_longer_and_memory_regime() -> None:
    t = KernelTable.from_rows([feature_row(), feature_row(insts_fp32=4e7, warp_insts=5e7),
                               feature_row(gmem_sectors=1e9, footprint_lines=2.5e8)])
    p = predict(t, "SM80_A100", model="analytical")
    assert p.predicted_ns[1] > p.predicted_ns[0]
    assert p.regime_names[2] == "memory" and p.predicted_ns[2] > p.predicted_ns[1]
    faster = predict(t, "SM90_H100", model="analytical")
    assert np.all(faster.predicted_ns < p.predicted_ns)


def test_analytical_tail_wave_costs_a_full_wave() -> None:
    spec = default_registry().get("SM80_A100")
    one = feature_row(grid_x=spec.sms, warp_insts=spec.sms * 8 * 1e4, insts_fp32=spec.sms * 8 * 1e4,
                      gmem_sectors=0, footprint_lines=0, dep_chain=0.0)
    tail = dict(one, grid_x=spec.sms + 1)
    p = predict(KernelTable.from_rows([one, tail]), spec, model="analytical")
    assert p.predicted_ns[1] > 1.8 * p.predicted_ns[0] - spec.launch_overhead_ns


# ---- accel-sim ---------------------------------------------------------------------------
def test_parse_real_accelsim_log() -> None:
    kernels = parse_accelsim_output(LOG.read_text(), str(LOG))
    assert len(kernels) == 1
    k = kernels[0]
    assert (k.uid, k.name, k.cycles, k.instructions, k.core_clock_mhz) == (
        1, "_Z6vecAddIfEvPT_S1_S1_i", 1282, 10516, 1607.0)
    assert k.duration_ns == pytest.approx(1282 / 1607.0 * 1e3)


def test_parse_rejects_output_without_kernels() -> None:
    with pytest.raises(TraceFormatError):
        parse_accelsim_output("GPGPU-Sim: nothing here\n", "x.log")


def test_power_limited_clock_slows_long_kernels_more_than_short_ones() -> None:
    from cascade.engine.perf import clock_slowdown

    reg = default_registry()
    t4, a100 = reg.get("SM75_T4"), reg.get("SM80_A100")
    assert t4.sustained_clock_mhz == 585 and t4.sustained_clock_ratio == pytest.approx(1590 / 585)
    assert a100.sustained_clock_ratio == 1.0  # unset: the board sustains boost
    t = np.array([1e3, 1e5, 1e6, 1e8])
    slow = clock_slowdown(t, t4, 1e6)
    assert slow[0] == pytest.approx(1.0, abs=0.01) and slow[2] == pytest.approx((1 + 1590 / 585) / 2)
    assert np.all(np.diff(slow) > 0) and slow[-1] < 1590 / 585
    assert np.all(clock_slowdown(t, a100, 1e6) == 1.0)
    # a fitted sustained-clock scale lifts the floor the long kernels settle at, never past boost
    lifted = clock_slowdown(t, t4, 1e6, sustained_scale=1.2)
    assert lifted[2] == pytest.approx((1 + 1590 / (585 * 1.2)) / 2) and np.all(lifted <= slow)
    assert np.all(clock_slowdown(t, t4, 1e6, sustained_scale=5.0) == 1.0)


def test_long_sgemm_on_t4_runs_at_a_lower_rate_than_a_short_one() -> None:
    # 512^3 (~50 us) fills the T4's 40 SMs with tiles; 256^3 is bound by its launch and a
    # grid of fewer tiles than SMs, not by the clock
    short = [{"name": "sgemm", "op": "linear", "dtype": "fp32", "m": 512, "n": 512, "k": 512}]
    long_ = [dict(short[0], m=8192, n=8192, k=8192)]
    p_s = predict(KernelTable.from_rows(short), "T4", model="analytical").predicted_ns[0]
    p_l = predict(KernelTable.from_rows(long_), "T4", model="analytical").predicted_ns[0]
    rate_s = 2 * 512**3 / p_s
    rate_l = 2 * 8192**3 / p_l
    from cascade.calibration import load_calibration

    sustained = 585 * load_calibration().globals.sustained_clock_scale  # the fitted floor above base
    assert 585 <= sustained < 1590
    assert rate_l < 8.1e3 * sustained / 1590 * 1.05  # at most the sustained-clock peak (GFLOP/s = FLOP/ns)
    assert p_l > 2 * 8192**3 / 8.1e3  # never beats the boost roofline
    assert rate_s > rate_l  # the short kernel runs nearer boost


def test_simt_tile_policy_follows_the_cublas_sgemm_kernel_family() -> None:
    from cascade.calibration import Calibration
    from cascade.engine.perf import target_tiles
    from cascade.engine.workload import workload_of

    cal = Calibration(tiles={"ampere": {"simt_batched": [128, 128], "tensor": [64, 64]},
                             "volta": {"simt": [128, 64]}})
    # Ada and Hopper run ampere_sgemm_* kernels: they take Ampere's fitted SIMT choice ...
    assert cal.tile("hopper", "simt_batched") == (128, 128)
    assert cal.tile("ada", "simt_batched") == (128, 128)
    # ... Turing runs volta_sgemm_*; tensor-core paths and other families do not borrow.
    assert cal.tile("turing", "simt") == (128, 64)
    assert cal.tile("hopper", "tensor") == (0, 0)
    assert cal.tile("pascal", "simt") == (0, 0)
    assert cal.tile("turing", "simt_batched") == (0, 0)
    reg = default_registry()
    rows = [{"name": "bmm", "op": "bmm", "dtype": "fp32", "batch": 16, "m": 512, "n": 512, "k": 512}]
    w = workload_of(KernelTable.from_rows(rows))
    ta, tb = target_tiles(w, reg.get("SM90_H100"), cal, reg.get("SM70_V100_PCIE_32GB"))
    assert (ta[0], tb[0]) == (128, 128)
    ta, tb = target_tiles(w, reg.get("SM60_P100_PCIE_16GB"), cal, reg.get("SM70_V100_PCIE_32GB"))
    assert (ta[0], tb[0]) != (0, 0)  # least modelled time among the candidates


def test_menu_tile_policy_picks_among_the_tiles_the_library_was_seen_to_use() -> None:
    from cascade.calibration import Calibration
    from cascade.engine.perf import TILE_CANDIDATES, target_tiles
    from cascade.engine.workload import workload_of

    reg = default_registry()
    rows = [{"name": "bmm", "op": "bmm", "dtype": "fp32", "batch": 16, "m": 96, "n": 96, "k": 512}]
    w = workload_of(KernelTable.from_rows(rows))
    t4, v100, p100 = reg.get("SM75_T4"), reg.get("SM70_V100_PCIE_32GB"), reg.get("SM60_P100_PCIE_16GB")
    menu_policy = {"simt_batched": [-1, 0]}
    cal = Calibration(tiles={"turing": menu_policy, "volta": menu_policy, "pascal": menu_policy},
                      tile_menus={"turing": {"simt_batched": [[128, 64]]}})
    # the only tile the T4's library used on this path, though a smaller one pads less
    assert tuple(int(x[0]) for x in target_tiles(w, t4, cal, v100)) == (128, 64)
    free = target_tiles(w, t4, Calibration(tiles={"turing": {"simt_batched": [0, 0]}}), v100)
    assert (int(free[0][0]), int(free[1][0])) != (128, 64)
    # Volta runs the same volta_sgemm kernels: it borrows Turing's menu ...
    assert cal.tile_menu("volta", "simt_batched") == [(128, 64)]
    assert tuple(int(x[0]) for x in target_tiles(w, v100, cal, t4)) == (128, 64)
    # ... a family with no menu falls back to the least-time choice among every candidate
    assert cal.tile_menu("pascal", "simt_batched") == []
    ta, tb = target_tiles(w, p100, cal, v100)
    assert (int(ta[0]), int(tb[0])) in TILE_CANDIDATES


def test_source_takes_the_targets_tile_rule_on_paths_the_target_arch_has_no_policy_for() -> None:
    from cascade.calibration import Calibration
    from cascade.engine.perf import target_tiles
    from cascade.engine.workload import workload_of

    reg = default_registry()
    v100, p100, t4 = reg.get("SM70_V100_PCIE_32GB"), reg.get("SM60_P100_PCIE_16GB"), reg.get("SM75_T4")
    cal = Calibration(tiles={"volta": {"simt_batched": [0, 4096]}, "turing": {"simt_batched": [64, 64]}})
    assert cal.has_tile_policy("turing", "simt_batched") and not cal.has_tile_policy("pascal", "simt_batched")

    def table(tile: str) -> KernelTable:
        return KernelTable.from_rows([{"name": f"volta_sgemm_{tile}_nn", "op": "bmm", "dtype": "fp32",
                                       "batch": 64, "m": 96, "n": 96, "k": 256, "duration_ns": 80_000.0}])

    w = workload_of(table("128x128"))
    assert tuple(int(x[0]) for x in target_tiles(w, v100, cal, v100)) == (128, 128)  # its named tile
    # Pascal's library choice is unseen: the V100 is modelled with Pascal's (least-time) rule
    ruled = target_tiles(w, v100, cal, v100, rule_of="pascal")
    assert tuple(int(x[0]) for x in ruled) != (128, 128)
    assert np.array_equal(ruled[0], target_tiles(w, v100, Calibration(), None)[0])
    # Turing has a policy of its own: the source keeps its named tile
    assert tuple(int(x[0]) for x in target_tiles(w, v100, cal, v100, rule_of="turing")) == (128, 128)
    # so into the P100 the source's named tile no longer moves the prediction; into the T4 it does
    scaled = get_model("scaled")
    ctx = ModelContext(source=v100, calibration=cal, config=None)

    def pred(tile: str, target: object) -> float:
        t = table(tile)
        return float(scaled.predict(t, workload_of(t), target, ctx).predicted_ns[0])  # type: ignore[arg-type]

    assert pred("128x128", p100) == pytest.approx(pred("32x128", p100))
    assert pred("128x128", t4) != pytest.approx(pred("32x128", t4))


@pytest.mark.parametrize("model", ["auto", "analytical", "roofline"])
def test_an_empty_table_quotes_no_figure(model: str) -> None:
    """No kernel was predicted, so no protocol's figure holds (the work-alone one had been quoted
    for zero kernels)."""
    empty = KernelTable.from_rows([{"name": "x", "op": "elementwise", "dtype": "fp32", "bytes": 1e6}]).take(
        np.array([], dtype=int))
    acc = predict(empty, "A100", model=model).provenance.accuracy
    assert acc.mape_pct is None and acc.total_pct is None and "no kernels" in acc.basis
