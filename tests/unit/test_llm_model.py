"""The LLM-operator model: its physics, its surfaces, which surface each GPU borrows, what the
target's software runs, and predictions through ``predict`` (packaged calibration)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascade.engine.predict import predict
from cascade.errors import ValidationError
from cascade.fitting import llm as fit_llm
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable
from cascade.llm import model as llm_model
from cascade.llm import surface, work

REG = default_registry()
H100, H200, A100, B200, L40S = (REG.get(g) for g in ("SM90_H100", "SM90_H200", "SM80_A100", "SM100_B200",
                                                     "SM89_L40S"))


def _gemm(m: int, n: int, k: int, dtype: str = "bf16", **extra: object) -> dict[str, object]:
    return {"name": "nvjet_tst_128x256", "op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype, **extra}


def _decode(batch: int, context: int, kv: str = "bf16", **extra: object) -> dict[str, object]:
    return {"name": "flash_fwd_splitkv_kernel", "op": "attention", "phase": "decode", "batch": batch, "seq": 1,
            "context": context, "heads": 32, "kv_heads": 8, "head_dim": 128, "kv_dtype": kv, **extra}


def test_gemm_work_is_counted_from_the_shape_and_the_weight_format() -> None:
    t = KernelTable.from_rows([_gemm(16, 4096, 4096, "bf16"), _gemm(16, 4096, 4096, "fp8"),
                               _gemm(16, 4096, 4096, "fp4")])
    wk = work.work(t, B200)
    assert wk.flops.tolist() == [2 * 16 * 4096 * 4096] * 3
    # a decode-sized GEMM is its weights: BF16 2 bytes, FP8 1, NVFP4 half a byte plus its scales
    weights = 4096 * 4096
    assert wk.bytes[0] == pytest.approx(weights * 2, rel=0.02)
    assert wk.bytes[1] == pytest.approx(weights * 1, rel=0.03)
    assert wk.bytes[2] == pytest.approx(weights * (0.5 + 1 / 16), rel=0.05)
    # each at its own tensor peak
    assert wk.peak_flops.tolist() == [B200.tensor_flops("bf16"), B200.tensor_flops("fp8"), B200.tensor_flops("fp4")]


def test_the_targets_software_replaces_what_its_tensor_cores_cannot_run() -> None:
    t = KernelTable.from_rows([_gemm(64, 4096, 4096, "fp8"), _gemm(64, 4096, 4096, "fp4"),
                               _decode(8, 1024, "fp8"), _gemm(64, 4096, 4096, "bf16")])
    on_a100 = work.substitute(t, A100)
    assert on_a100.dtype.tolist()[:2] == ["w8_marlin", "w4_marlin"]
    assert on_a100.kv_dtype[2] == "bf16" and "FlashAttention 2" in on_a100.note[2]
    assert "Marlin" in on_a100.note[0] and on_a100.note[3] == ""
    on_h100 = work.substitute(t, H100)  # FP8 native, FP4 not
    assert on_h100.dtype.tolist()[:2] == ["fp8", "w4_marlin"] and on_h100.kv_dtype[2] == "fp8"
    on_b200 = work.substitute(t, B200)
    assert on_b200.dtype.tolist()[:2] == ["fp8", "fp4"] and not any(on_b200.note)
    # weight-only Marlin reads 4-bit weights but multiplies at the BF16 rate, never on CUDA cores
    wk = work.work(t, A100, on_a100)
    assert wk.peak_flops[1] == A100.tensor_flops("bf16")


def test_decode_attention_reads_the_kv_cache_once_and_fp8_halves_it() -> None:
    t = KernelTable.from_rows([_decode(64, 8192, "bf16"), _decode(64, 8192, "fp8"),
                               _decode(64, 8192, "bf16", window=1024)])
    wk = work.work(t, H100)
    kv = 64 * 8192 * 2 * 8 * 128
    assert wk.bytes[0] == pytest.approx(kv * 2, rel=0.01)
    assert wk.bytes[1] == pytest.approx(kv * 1, rel=0.01)
    assert wk.bytes[2] == pytest.approx(kv * 2 / 8, rel=0.02)  # a sliding window reads its window


def test_collectives_move_ring_traffic_over_nvlink_or_pcie() -> None:
    t = KernelTable.from_rows([{"name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "op": "collective",
                                "collective": "all_reduce", "ranks": 8, "comm_bytes": 64e6},
                               {"name": "ncclDevKernel_AllGather_RING_LL", "op": "collective",
                                "collective": "all_gather", "ranks": 8, "comm_bytes": 64e6}])
    wk = work.work(t, H100)
    assert wk.link_bytes.tolist() == pytest.approx([64e6 * 2 * 7 / 8, 64e6 * 7 / 8])
    # an NVLink board moves them far faster than a PCIe one
    assert work.roofline_ns(t, H100)[0] * 5 < work.roofline_ns(t, L40S)[0]


def test_a_surface_is_exact_at_its_points_and_between_them_in_between() -> None:
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    res = np.array([0.0, 1.0, 0.0, 1.0])
    got, dist = surface.interpolate(pts, res, np.array([[1.0, 0.0], [0.5, 0.5], [5.0, 0.0]]), neighbours=4)
    assert got[0] == pytest.approx(1.0, abs=1e-6) and dist[0] == pytest.approx(0.0, abs=1e-6)
    assert got[1] == pytest.approx(0.5, abs=1e-3)
    assert 0.5 < got[2] <= 1.0 and dist[2] == pytest.approx(4.0)  # beyond the data: its edge, not a trend


def _synthetic_sets(eff: dict[str, float]) -> list[fit_llm.LlmSet]:
    """GEMM rows timed as physics x a per-GPU efficiency (a known answer)."""
    out = []
    shapes = [(m, n, k) for m in (1, 16, 256, 4096) for n in (1024, 4096, 16384) for k in (1024, 8192)]
    for gid, e in eff.items():
        spec = REG.get(gid)
        t = KernelTable.from_rows([_gemm(m, n, k) for m, n, k in shapes])
        lat = (2000.0 + work.roofline_ns(t, spec)) / e
        keys = np.asarray([f"gemm|bf16|{m}|{n}|{k}" for m, n, k in shapes], dtype=object)
        out.append(fit_llm.LlmSet("gemm.parquet", spec, "vllm-0.24", t, lat, keys,
                                  np.full(len(t), "gemm", dtype=object), np.full(len(t), "bf16", dtype=object)))
    return out


def test_a_fit_carries_each_gpus_measured_efficiency_and_relatives_borrow_it() -> None:
    cal = fit_llm.fit(_synthetic_sets({"SM90_H100": 0.7, "SM100_B200": 0.5}), heldout_fraction=0.0)
    t = KernelTable.from_rows([_gemm(4096, 16384, 8192), _gemm(2048, 8192, 8192)])
    own = llm_model.model_times(t, B200, cal)
    assert own.own.all() and "SM100_B200 measured" in own.basis[0]
    # B300 has no surface: B200's efficiency on B300's peaks, and it says so
    b300 = REG.get("NVIDIA B300 SXM6 AC")
    borrowed = llm_model.model_times(t, b300, cal)
    assert not borrowed.own.any() and "SM100_B200's measured efficiency" in borrowed.basis[0]
    # the H200 borrows its own family's H100 (not the B200)
    assert "SM90_H100" in llm_model.model_times(t, H200, cal).basis[0]
    # a measured shape carried between two calibrated GPUs: the target's measured time
    sets = _synthetic_sets({"SM90_H100": 0.7, "SM100_B200": 0.5})
    scores = fit_llm.evaluate(sets, cal, sources=["SM90_H100"])
    mine = [s for s in scores if s.target == "SM100_B200" and s.variant == "calibrated"]
    assert mine and mine[0].mape_pct < 0.5
    # with the B200's own surface removed it runs the H100's efficiency: 0.7 / 0.5 off on big GEMMs
    left = [s for s in scores if s.target == "SM100_B200" and s.variant == "target left out"]
    assert left and left[0].mape_pct > 5


def _gemm_run(ms: list[int], times_us: list[float], impl: str = "torch") -> tuple[KernelTable, np.ndarray]:
    t = KernelTable.from_rows([_gemm(m, 6144, 5120, impl=impl) for m in ms])
    return t, np.asarray(times_us, dtype=float) * 1e3


def test_an_isolated_spike_along_the_rows_is_found_and_a_kernel_regime_is_not() -> None:
    ms = [1024, 2048, 4096, 8192]
    # vLLM 0.14's H100 BF16 GEMM 6144 x 5120: m=4096 at 183 TFLOPS between 785 and 754
    t, lat = _gemm_run(ms, [84.6, 164.1, 1405.5, 683.8])
    assert fit_llm.spikes("gemm.parquet", t, lat).tolist() == [False, False, True, False]
    # 1.6x the bigger size's time but within twice the smaller's: one bound broken is kernel choice, kept
    t, lat = _gemm_run(ms, [84.6, 164.1, 450.0, 280.0])
    assert not fit_llm.spikes("gemm.parquet", t, lat).any()
    # a regime that stays slow (every bigger size slower still) is kept whole
    t, lat = _gemm_run(ms, [84.6, 164.1, 1405.5, 2800.0])
    assert not fit_llm.spikes("gemm.parquet", t, lat).any()
    # the ends of a run have one neighbour: kept; another kernel's rows are another run
    t, lat = _gemm_run(ms, [900.0, 164.1, 320.0, 9000.0])
    assert not fit_llm.spikes("gemm.parquet", t, lat).any()
    rows = [_gemm(m, 6144, 5120, impl=i) for m in ms for i in ("a", "b")]
    lat = np.asarray([[84.6, 90.0], [164.1, 170.0], [1405.5, 330.0], [683.8, 690.0]]).reshape(-1) * 1e3
    assert fit_llm.spikes("gemm.parquet", KernelTable.from_rows(rows), lat).tolist() == [
        False, False, False, False, True, False, False, False]
    # repeats of a size count as their mean: one slow repeat of two is no spike
    t, lat = _gemm_run([1024, 2048, 4096, 4096, 8192], [84.6, 164.1, 1405.5, 320.0, 683.8])
    assert not fit_llm.spikes("gemm.parquet", t, lat).any()
    # files without a size axis are left alone
    assert not fit_llm.spikes("other.parquet", *_gemm_run(ms, [84.6, 164.1, 1405.5, 683.8])).any()


def test_a_spike_is_left_out_of_the_surface_and_the_neighbours_carry_the_shape() -> None:
    ms = [1024, 2048, 4096, 8192]
    t, lat = _gemm_run(ms, [84.6, 164.1, 1405.5, 683.8])
    keys = np.asarray([f"gemm|bf16|{m}|6144|5120" for m in ms], dtype=object)
    s = fit_llm.LlmSet("gemm.parquet", H100, "vllm-0.14", t, lat, keys, np.full(4, "gemm", dtype=object),
                       np.full(4, "bf16", dtype=object))
    cal = fit_llm.fit([s], heldout_fraction=0.0)
    at = llm_model.model_times(KernelTable.from_rows([_gemm(m, 6144, 5120) for m in (4096, 5604)]), H100, cal,
                               collector="vllm-0.14").model_ns
    # between 2048 and 8192 at their throughput (~780 TFLOPS), not the spike's fifth of it
    flops = np.asarray([2.0 * m * 6144 * 5120 for m in (4096, 5604)])
    assert np.all(flops / at / 1e3 > 600), flops / at / 1e3


def test_predict_sends_llm_rows_to_the_llm_model_with_its_provenance() -> None:
    rows = [_gemm(8, 8192, 8192, "fp8", duration_ns=30000.0), _gemm(4096, 8192, 8192, "bf16", duration_ns=800000.0),
            _decode(128, 4096, "fp8", duration_ns=420000.0),
            {"name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "op": "collective", "collective": "all_reduce",
             "ranks": 8, "comm_bytes": 16e6, "duration_ns": 90000.0}]
    table = KernelTable.from_rows(rows)
    same = predict(table, "SM90_H100", source="SM90_H100")
    assert set(same.models.tolist()) == {"llm"}
    assert same.predicted_ns.tolist() == pytest.approx(table["duration_ns"].tolist())  # identity
    b200 = predict(table, "SM100_B200", source="SM90_H100")
    assert (b200.predicted_ns < table["duration_ns"]).all()  # more of everything: faster here
    assert b200.provenance.accuracy.mape_pct is not None
    assert "validate --llm" in b200.provenance.accuracy.basis
    a100 = predict(table, "SM80_A100", source="SM90_H100")
    assert (a100.predicted_ns > table["duration_ns"]).all()
    from cascade.engine import extrapolation

    assert a100.flags is not None and a100.flags[0] & extrapolation.SOFTWARE_FALLBACK and a100.flags[2] & extrapolation.SOFTWARE_FALLBACK
    assert "Marlin" in " ".join(a100.extrapolation_reasons)
    # the FP8 decode attention runs as BF16 FlashAttention 2 there: at most the BF16 cache's
    # bandwidth cost, never the CUDA-core multiply-adds of an emulation
    assert a100.predicted_ns[2] < 10 * table["duration_ns"][2]


def test_never_faster_than_the_work_at_the_targets_peaks() -> None:
    rows = [_gemm(m, 8192, 8192, d, duration_ns=1000.0) for m in (1, 64, 8192) for d in ("bf16", "fp8", "fp4")]
    table = KernelTable.from_rows(rows)
    for target in ("SM100_B200", "SM90_H200", "SM89_L40S", "NVIDIA GB200", "SM80_A100"):
        spec = REG.get(target)
        pred = predict(table, spec, source="SM90_H100")
        assert (pred.predicted_ns >= work.roofline_ns(table, spec) * 0.999).all(), target


def test_more_fp4_throughput_is_never_slower() -> None:
    rows = [_gemm(m, 16384, 16384, "fp4") for m in (1024, 4096, 16384)]
    table = KernelTable.from_rows(rows)
    b200 = predict(table, "SM100_B200")
    b300 = predict(table, "NVIDIA B300 SXM6 AC")
    assert (b300.predicted_ns <= b200.predicted_ns * 1.001).all()


def test_an_attention_row_without_a_phase_is_refused_by_name() -> None:
    table = KernelTable.from_rows([_decode(8, 1024, phase="both")])
    with pytest.raises(ValidationError, match="phase"):
        predict(table, "SM100_B200", source="SM90_H100", model="llm")


def test_a_traced_fp8_attention_kernel_runs_on_an_a100s_bf16_tensor_cores_not_its_cuda_cores() -> None:
    """A B200 trace's FP8 TRT-LLM attention and MXFP4 GEMM kernels (no shapes) on an A100: what
    its software runs there (BF16 FlashAttention 2, Marlin), flagged, never 180x slower."""
    from cascade.engine import extrapolation

    rows = [{"name": "fmhaSm100aKernel_QkvE4m3OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
             "duration_ns": 400_000.0},
            {"name": "bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s4_et64x8_m64x8x64_cga1x1x1_16dp256b_TN_transOut",
             "duration_ns": 50_000.0}]
    table = KernelTable.from_rows(rows)
    a100 = predict(table, "SM80_A100", source="SM100_B200")
    ratio = a100.predicted_ns / table["duration_ns"]
    # attention: the BF16 tensor rate is 7.2x lower, the bandwidth 3.9x: not 180x
    assert 3.5 < ratio[0] < 8, ratio
    # the FP4 GEMM (no shapes: work inferred as compute-class) moves at most by the ratio of the
    # B200's FP4 units to the A100's BF16 ones a Marlin GEMM runs on, at least by the bandwidths'
    peaks = B200.tensor_flops("fp4") / A100.tensor_flops("bf16")
    assert B200.bandwidth_bps / A100.bandwidth_bps < ratio[1] <= peaks * 1.05, (ratio, peaks)
    assert a100.flags is not None and (a100.flags & extrapolation.SOFTWARE_FALLBACK).all()
    assert not (a100.flags & extrapolation.OFF_TENSOR).any()


def test_an_nvlink_sharp_all_reduce_runs_as_nccl_where_the_switch_cannot_reduce() -> None:
    row = {"name": "multimem_all_reduce_kernel", "op": "collective", "collective": "all_reduce", "impl": "multimem",
           "ranks": 8, "comm_bytes": 32e6}
    t = KernelTable.from_rows([row])
    on_a100 = work.substitute(t, A100)  # NVLink 3 without SHARP
    assert on_a100.impl[0] == "nccl" and "NCCL" in on_a100.note[0]
    on_l40s = work.substitute(t, L40S)
    assert "no NVLink" in on_l40s.note[0]
    assert work.substitute(t, H100).impl[0] == "multimem"
    assert work.keys(t, on_a100)[0] == "collective|all_reduce|nccl|8"


def _tp_trace() -> dict[str, object]:
    """A tensor-parallel vLLM rank as torch.profiler records it: an FP8 ``_scaled_mm`` and a NCCL
    all-reduce whose ``record_param_comms`` op carries its size (the args PyTorch writes)."""
    ev: list[dict[str, object]] = []

    def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: object) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args})

    x("cpu_op", "aten::_scaled_mm", 1000.0, 30.0, **{"Input Dims": [[64, 8192], [8192, 7168], [], []],
                                                     "Input type": ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn",
                                                                    "float", "float"], "External id": 3})
    x("cuda_runtime", "cudaLaunchKernel", 1005.0, 5.0, correlation=11, **{"External id": 3})
    x("kernel", "sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize64x128x128_warpgroupsize1x1x1_cublas",
      1010.0, 22.0, tid=7, grid=[56, 1, 1], block=[256, 1, 1], correlation=11, stream=7)
    x("cpu_op", "record_param_comms", 1100.0, 20.0, **{"Collective name": "allreduce", "In msg nelems": 64 * 7168,
                                                       "Out msg nelems": 64 * 7168, "Group size": 8,
                                                       "dtype": "BFloat16", "External id": 4})
    x("cuda_runtime", "cudaLaunchKernel", 1105.0, 5.0, correlation=12, **{"External id": 4})
    x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1110.0, 30.0,
      tid=8, grid=[8, 1, 1], block=[512, 1, 1], correlation=12, stream=13)
    return {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}


def test_a_traced_fp8_gemm_and_all_reduce_are_llm_rows_with_their_sizes(tmp_path: Path) -> None:
    import json

    from cascade.traces.timeline import import_timeline

    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_tp_trace()))
    table = import_timeline(path)
    coll = np.flatnonzero(table["op"] == "collective")
    assert len(coll) == 1
    i = int(coll[0])
    assert (table["collective"][i], table["ranks"][i], table["comm_bytes"][i]) == ("all_reduce", 8, 64 * 7168 * 2)
    assert table["impl"][i] == "nccl"
    assert llm_model.llm_rows(table).all()  # the FP8 GEMM too, through its traced op name
    b200 = predict(table, "SM100_B200", source="SM90_H100")
    assert set(b200.models.tolist()) == {"llm"}
    a100 = predict(table, "SM80_A100", source="SM90_H100")
    g = int(np.flatnonzero(table["op"] != "collective")[0])
    # the FP8 GEMM runs as weight-only Marlin on the A100: BF16 rate, slower, never CUDA cores
    assert table["duration_ns"][g] < a100.predicted_ns[g] < 20 * table["duration_ns"][g]


def test_an_uncalibrated_board_quotes_the_figure_of_its_situation() -> None:
    """B300 borrows the B200's surfaces (its own family): quoted at what a calibrated GPU scores
    from a same-family sibling's surfaces (H200 <- H100); the RTX PRO 6000 borrows across
    families (the L40S's): quoted at that much wider figure."""
    cal = llm_model.load_llm_calibration()
    table = KernelTable.from_rows([_gemm(64, 8192, 8192, "bf16", duration_ns=30000.0),
                                   _decode(64, 4096, "bf16", duration_ns=400000.0)])
    same = llm_model.expected_error(cal, table, "SM90_H100", REG.get("NVIDIA B300 SXM6 AC"))
    across = llm_model.expected_error(cal, table, "SM90_H100", REG.get("SM120_RTXPRO6000_SERVER"))
    own = llm_model.expected_error(cal, table, "SM90_H100", B200)
    assert own.mape_pct is not None and same.mape_pct is not None and across.mape_pct is not None
    assert own.mape_pct < same.mape_pct < across.mape_pct
    assert "SM90_H200" in same.basis and "SM89_L40S" in across.basis


def test_messy_llm_rows_get_defaults_or_an_error_naming_the_field_and_kernel() -> None:
    # no KV-head count: multi-head attention, not a free KV cache
    mha = KernelTable.from_rows([_decode(64, 4096, kv_heads=-1)])
    gqa = KernelTable.from_rows([_decode(64, 4096)])
    assert work.work(mha, H100).bytes[0] > 3 * work.work(gqa, H100).bytes[0]
    bad = KernelTable.from_rows([_decode(64, 4096, kv="fp9", duration_ns=1e5)])
    with pytest.raises(ValidationError, match="flash_fwd_splitkv_kernel.*kv_dtype.*fp9") as err:
        predict(bad, "SM100_B200", source="SM90_H100")
    assert err.value.field == "kv_dtype"
    coll = KernelTable.from_rows([{"name": "nccl_x", "op": "collective", "collective": "allreduce", "ranks": 8,
                                   "comm_bytes": 1e6}])
    with pytest.raises(ValidationError, match="nccl_x.*all_reduce"):
        predict(coll, "SM100_B200")


def test_a_run_of_llm_rows_quotes_the_llm_protocol() -> None:
    """A run's result (the in-process simulation the samples and the cluster use) quotes the LLM
    protocol's figure for a table of LLM operators, as `cascade predict` does."""
    from cascade.runs.inprocess import simulate_in_process

    rows = [_gemm(64, 8192, 8192, "bf16", duration_ns=40000.0, start_ns=0.0),
            _decode(64, 4096, "bf16", duration_ns=400000.0, start_ns=50000.0)]
    sim = simulate_in_process(KernelTable.from_rows(rows), B200, source=H100, run_id="r", sim_id="s", trace_id="t")
    acc = sim.result.accuracy
    assert acc is not None and acc.mape_pct is not None and "validate --llm" in acc.basis


def test_a_calibration_without_a_gpu_borrows_for_it() -> None:
    cal = llm_model.load_llm_calibration()
    gone = llm_model.without_gpus(cal, frozenset({"SM90_H200"}))
    assert "SM90_H200" not in {s.gpu for s in gone.surfaces} and len(gone.surfaces) < len(cal.surfaces)
    t = KernelTable.from_rows([_gemm(64, 8192, 8192)])
    assert llm_model.model_times(t, H200, cal).own.all()
    borrowed = llm_model.model_times(t, H200, gone)
    assert not borrowed.own.any() and "SM90_H100" in borrowed.basis[0]
