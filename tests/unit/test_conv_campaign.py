"""The convolution campaign: cuDNN algorithm from kernel names, the loader, the protocol, the fit."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from cascade.calibration import load_calibration
from cascade.engine import convalgo
from cascade.engine.predict import predict
from cascade.errors import TraceFormatError
from cascade.fitting import conv
from cascade.gpus import GPURegistry, builtin_specs, default_registry
from cascade.kerneltable import KernelTable
from tests.support.measured import MEASURED

# real ``Kernels`` cells of ../shared/data/measured/neusight-conv (one per algorithm seen there)
REAL = {
    "winograd_nonfused": (
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::"
        "WinogradDataParams<float, float>);void cudnn::winograd_nonfused::winogradForwardFilter4x4<float, float>"
        "(cudnn::winograd_nonfused::WinogradFilterParams<float, float>);ampere_sgemm_128x128_nn;void cudnn::"
        "winograd_nonfused::winogradForwardOutput4x4<float, float>(cudnn::winograd_nonfused::"
        "WinogradOutputParams<float, float>)"),
    "winograd_fused": (
        "void cudnn::winograd::generateWinogradTilesKernel<0, float, float>(cudnn::winograd::"
        "GenerateWinogradTilesParams<float, float>);cudnn_infer_maxwell_scudnn_winograd_128x128_ldg1_ldg4_relu_"
        "tile244n_nt_v1"),
    "precomputed": ("void cask_cudnn_infer::computeOffsetsKernel<false, false>(cask_cudnn_infer::"
                    "ComputeOffsetsParams);cudnn_infer_volta_scudnn_128x32_relu_medium_nn_v1"),
    "implicit_gemm": ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, "
                      "int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, "
                      "int, float, float, int, float const*, float const*, bool, int, int)"),
    "fft": "fft2d_r2c_32x32;ampere_gcgemm_64x64_nt;fft2d_c2r_32x32",
    "im2col": "void cudnn::cnn::im2col4d_kernel<float, long>(cudnn::cnn::im2col4d_params, cudnnConvolutionStruct, "
              "cudnnTensor4dStruct, float const*, float*);explicit_convolve_sgemm",
}


@pytest.mark.parametrize("algo", sorted(REAL))
def test_the_algorithm_is_read_from_every_kernel_of_the_call(algo: str) -> None:
    assert convalgo.CONV_ALGOS[convalgo.algorithm_of(REAL[algo])] == algo


def test_the_main_kernel_alone_says_the_same_algorithm() -> None:
    mains = {"winograd_nonfused": "volta_sgemm_64x64_nn",
             "winograd_fused": "cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
             "precomputed": "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1",
             "fft": "maxwell_gcgemm_64x64_nt", "im2col": "explicit_convolve_sgemm",
             "xmma": "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"}
    codes = convalgo.algorithms(np.asarray(list(mains.values()), dtype=object))
    assert [convalgo.CONV_ALGOS[c] for c in codes] == list(mains)
    assert convalgo.algorithm_of("some_elementwise_kernel") == convalgo.OTHER


HEADER = ("OPName,Latency,Device,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z,Kernels,B,Input_Channel,"
          "Output_Channel,Kernel_Szie,Input_Size,Stride,Padding")


def _write(folder: Path, device: str, rows: list[tuple[float, str, tuple[int, ...]]], gz: bool = True) -> Path:
    lines = [HEADER]
    for latency, kernels, shape in rows:
        main = kernels.split(";")[-1]
        lines.append(f'conv,{latency},{device},"{main}",4,1,1,256,1,1,"{kernels}",' + ",".join(map(str, shape)))
    name = device.replace(" ", "_") + (".csv.gz" if gz else ".csv")
    path = folder / name
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


SHAPES = [(8, 64, 64, 3, 56, 1, 1), (32, 128, 128, 3, 28, 1, 1), (16, 256, 256, 3, 14, 1, 1), (4, 32, 64, 3, 112, 1, 1)]


def _campaign(folder: Path) -> None:
    v100 = [(1.0 + i, REAL["winograd_fused"].replace("maxwell", "volta"), s) for i, s in enumerate(SHAPES)]
    a100 = [(0.5 + i, REAL["winograd_nonfused"], s) for i, s in enumerate(SHAPES)]
    t4 = [(3.0 + i, REAL["precomputed"], s) for i, s in enumerate(SHAPES[:3])]
    _write(folder, "Tesla V100-PCIE-32GB", v100)
    _write(folder, "NVIDIA A100 80GB PCIe", a100, gz=False)
    _write(folder, "Tesla T4", t4)


def test_the_loader_turns_each_row_into_its_implicit_gemm(tmp_path: Path) -> None:
    _campaign(tmp_path)
    reg = GPURegistry(builtin_specs())
    sets = {s.spec.id: s for s in conv.load_conv_folder(tmp_path, reg)}
    assert set(sets) == {"SM70_V100_PCIE_32GB", "SM80_A100_PCIE_80GB", "SM75_T4"}
    t = sets["SM70_V100_PCIE_32GB"].table
    # B=8, C_in=64, C_out=64, 3x3, 56x56, stride 1, pad 1: m = 8*56*56, n = 64, k = 64*9
    assert (int(t["m"][0]), int(t["n"][0]), int(t["k"][0])) == (8 * 56 * 56, 64, 64 * 9)
    assert t["flops"][0] == 2.0 * 8 * 56 * 56 * 64 * 64 * 9
    assert t["op"][0] == "conv2d" and t["dtype"][0] == "fp32"
    assert t["duration_ns"][0] == pytest.approx(1.0e6)
    assert t["name"][0].startswith("cudnn_infer_volta_scudnn_winograd")
    assert int(t["kernels"][0]) == 2
    assert [convalgo.CONV_ALGOS[a] for a in sets["SM80_A100_PCIE_80GB"].algorithm] == ["winograd_nonfused"] * 4


def test_a_bad_row_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "Tesla T4", [(1.0, REAL["fft"], (8, 64, 64, 3, 56, 1, 1))], gz=False)
    path.write_text(path.read_text().replace(",56,1,1", ",abc,1,1"))
    with pytest.raises(TraceFormatError) as err:
        conv.load_conv_file(path, GPURegistry(builtin_specs()))
    assert "Input_Size" in str(err.value) and "Tesla_T4.csv" in str(err.value)


def test_the_protocol_scores_every_ordered_pair_over_common_shapes(tmp_path: Path) -> None:
    _campaign(tmp_path)
    reg = GPURegistry(builtin_specs())
    cal = load_calibration()
    sets = conv.load_conv_folder(tmp_path, reg)
    scores = conv.evaluate_conv(sets, cal, reg, calibration_for=conv.left_out_calibrations(sets, cal, reg))
    pairs = {(s.source, s.target, s.model): s for s in scores}
    assert len(pairs) == 6 * (2 + len(conv.BOUND_MODELS))
    assert pairs[("SM70_V100_PCIE_32GB", "SM75_T4", "scaled")].n == 3
    assert pairs[("SM70_V100_PCIE_32GB", "SM80_A100_PCIE_80GB", "scaled")].n == 4
    assert all(np.isfinite(s.mape_pct) and s.mape_pct >= 0 for s in scores)
    assert set(conv.per_target(scores)) == {s.spec.id for s in sets}
    md = conv.conv_markdown(scores, sets)
    assert "SM75_T4 | " in md and "precomputed 3" in md


def test_the_bounds_fit_the_targets_own_times_one_factor_per_pair_or_per_shape_cell() -> None:
    """``bound-scale`` is exact where the target is the source times one factor; ``bound-cells``
    also where the factor changes only between shape cells, and ``bound-scale`` is not then."""
    m = np.array([64, 80, 96, 4096, 5000, 6000], dtype=np.int64)  # two 2-octave cells in m
    table = KernelTable({"m": m, "n": np.full(6, 64), "k": np.full(6, 576)})
    src = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) * 1e5
    exact = conv.pair_bounds(table, src, 3.0 * src)
    assert np.allclose(exact["bound-scale"], 3.0 * src) and np.allclose(exact["bound-cells"], 3.0 * src)
    by_cell = src * np.where(m < 1000, 2.0, 5.0)
    b = conv.pair_bounds(table, src, by_cell)
    assert np.allclose(b["bound-cells"], by_cell)
    assert np.abs(b["bound-scale"] / by_cell - 1.0).max() > 0.5


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_the_packaged_algorithm_model_is_what_calibrate_fits_on_the_shipped_campaign() -> None:
    """``cascade calibrate --data ../shared/data/measured`` makes the packaged conv_algos (the
    command the calibration records reproduces it), and records the campaign's files."""
    cal = load_calibration()
    fitted = conv.fit_campaign(MEASURED, cal, GPURegistry(builtin_specs()))
    assert fitted is not None and fitted == cal.conv_algos
    assert {f"{conv.CONV_FOLDER}/{p.name}" for p in (MEASURED / conv.CONV_FOLDER).glob("*.csv*")} <= set(cal.data_files)
    assert conv.fit_campaign(MEASURED / "kernelbench", cal, GPURegistry(builtin_specs())) is None


def test_the_cli_prints_json_per_pair_and_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from programs.cli.validate import run

    _campaign(tmp_path)
    args = argparse.Namespace(data=str(tmp_path), conv=True, json=True, specs=None, calibration=None, llm=False)
    assert run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["conv"]) == 6 * (2 + len(conv.BOUND_MODELS)) and set(doc["per_target"]) >= {"SM75_T4"}
    assert doc["algorithms"]["SM75_T4"] == {"precomputed": 3}


def test_the_fit_leaves_the_scored_gpu_out_and_prices_winograd_below_implicit_gemm(tmp_path: Path) -> None:
    _campaign(tmp_path)
    reg = GPURegistry(builtin_specs())
    cal = load_calibration()
    sets = conv.load_conv_folder(tmp_path, reg)
    fit = conv.fit_conv_algos(sets, cal, reg, leave_out="SM75_T4")
    assert "SM75_T4" not in fit.gpus and "precomputed" not in fit.cost
    assert "turing" not in fit.choice and {"*", "volta", "ampere"} <= set(fit.choice)
    shipped = cal.conv_algos
    assert shipped is not None
    # fitted on the campaign: Winograd and FFT cost less than the direct GEMM, the plain
    # implicit GEMM (no precomputed offsets) and im2col more
    assert shipped.cost["winograd_fused"] < 1.0 and shipped.cost["winograd_nonfused"] < 1.0
    assert shipped.cost["implicit_gemm"] > shipped.cost["precomputed"] and shipped.cost["im2col"] > 1.0


def test_a_convolution_moved_to_a_gpu_that_runs_winograd_is_priced_as_winograd() -> None:
    reg = GPURegistry(builtin_specs())
    cal = load_calibration()
    assert cal.conv_algos is not None
    from cascade.kerneltable import KernelTable

    m, n, k = 32 * 28 * 28, 128, 128 * 9
    row = {"name": np.asarray(["cudnn_infer_volta_scudnn_128x64_relu_small_nn_v1"], dtype=object),
           "op": np.asarray(["conv2d"], dtype=object), "dtype": np.asarray(["fp32"], dtype=object),
           "m": np.asarray([m]), "n": np.asarray([n]), "k": np.asarray([k]), "batch": np.asarray([1]),
           "duration_ns": np.asarray([1.0e6])}
    table = KernelTable(row)
    cfg = conv.conv_config("scaled")
    without = msgspec.structs.replace(cal, conv_algos=None)
    # the source ran the precomputed implicit GEMM; the target's expected algorithm is cheaper
    fitted = predict(table, "SM80_A100_PCIE_80GB", source="SM70_V100_PCIE_32GB", model="scaled", calibration=cal,
                     config=cfg, registry=reg).predicted_ns[0]
    plain = predict(table, "SM80_A100_PCIE_80GB", source="SM70_V100_PCIE_32GB", model="scaled",
                    calibration=without, config=cfg, registry=reg).predicted_ns[0]
    assert fitted != plain
    same = predict(table, "SM70_V100_PCIE_32GB", source="SM70_V100_PCIE_32GB", model="scaled", calibration=cal,
                   config=cfg, registry=reg).predicted_ns[0]
    assert same == pytest.approx(1.0e6)


def test_the_size_model_is_fitted_without_the_left_out_gpu_and_chooses_from_its_grids(tmp_path: Path) -> None:
    """Fitted on the GPUs left in (their residual tables only); with three or more of them its
    scale and beta come from leaving each out in turn, with two from neither (all alike, 0.5)."""
    _campaign(tmp_path)
    reg = GPURegistry(builtin_specs())
    sets = conv.load_conv_folder(tmp_path, reg)
    two = conv.fit_conv_size(sets, leave_out="SM75_T4")
    assert two is not None and set(two.cells) == {"SM70_V100_PCIE_32GB", "SM80_A100_PCIE_80GB"}
    assert (two.scale, two.beta) == (None, 0.5) and two.measurement == conv.CONV_MEASUREMENT
    three = conv.fit_conv_size(sets)
    assert three is not None and three.scale in conv.SIZE_SCALES and three.beta in conv.SIZE_BETAS
    # its share beside the engine's prediction: chosen the same way with three GPUs, 1 (alone) with two
    cal = load_calibration()
    algos = conv.fit_conv_algos(sets, cal, reg)
    assert algos.size is not None and algos.size.blend in conv.BLEND_SHARES
    two_algos = conv.fit_conv_algos(sets, cal, reg, leave_out="SM75_T4")
    assert two_algos.size is not None and two_algos.size.blend == 1.0
    shipped = cal.conv_algos
    assert shipped is not None and shipped.size is not None and shipped.size.blend in conv.BLEND_SHARES
    assert conv.fit_conv_size(sets[:1]) is None
    # physics bounds: the floor below every GPU's fastest calls, efficiencies at most 1
    fastest = min(float(np.percentile(s.table["duration_ns"], 1)) for s in sets)
    assert three.floor_ns <= fastest * (1 + 1e-9) and 0 < three.eff <= 1 and 0 < three.bw_eff <= 1


def test_the_shipped_size_model_fills_a_bigger_gpu_later_and_never_runs_more_work_faster() -> None:
    """On every GPU more work takes no less time; a small convolution barely profits from more SMs
    (it cannot fill them), a big one by about the FP32 peaks' ratio."""
    cal = load_calibration()
    assert cal.conv_algos is not None and cal.conv_algos.size is not None
    fit = cal.conv_algos.size
    reg = default_registry()
    m = np.geomspace(64, 4e6, 40)
    n, k = np.full(40, 256.0), np.full(40, 256.0 * 9)
    nbytes = 4.0 * (m * 256 + 256 * 256 * 9 + m * 256)

    def log_ns(gpu: str) -> np.ndarray:
        s = reg.get(gpu)
        return convalgo.size_log_ns(m, n, k, nbytes, sms=float(s.sms), fp32_flops=s.peak_flops("fp32", False),
                                    bandwidth=s.memory_bandwidth_gbps * 1e9, floor_ns=fit.floor_ns, eff=fit.eff,
                                    knee_flops=fit.knee_flops, bw_eff=fit.bw_eff)

    big, small = log_ns("SM80_A100_PCIE_80GB"), log_ns("SM61_P4")
    for t in (big, small):
        assert np.all(np.diff(t) >= -1e-12) and np.all(np.exp(t) >= fit.floor_ns)
    speedup = np.exp(small - big)
    peaks = reg.get("SM80_A100_PCIE_80GB").peak_flops("fp32", False) / reg.get("SM61_P4").peak_flops("fp32", False)
    assert speedup[0] < 1.5 < speedup[-1] and speedup[-1] == pytest.approx(peaks, rel=0.15)


def test_only_times_of_the_campaigns_kind_are_moved_by_the_size_model() -> None:
    """A profiler's kernel duration has no harness floor: the size model (fitted on harness times
    per call) leaves it to the algorithm costs."""
    from cascade.engine import convmath
    from cascade.engine.workload import workload_of

    cal = load_calibration()
    reg = default_registry()
    table = KernelTable({"name": np.asarray(["cudnn_infer_volta_scudnn_128x64_relu_small_nn_v1"], dtype=object),
                         "op": np.asarray(["conv2d"], dtype=object), "dtype": np.asarray(["fp32"], dtype=object),
                         "m": np.asarray([25088]), "n": np.asarray([128]), "k": np.asarray([1152]),
                         "batch": np.asarray([1]), "duration_ns": np.asarray([1.0e6])})
    w = workload_of(table)
    rows = np.ones(1, dtype=bool)
    src, tgt = reg.get("SM70_V100_PCIE_32GB"), reg.get("SM80_A100_PCIE_80GB")
    sized = convmath.sized_conv_ns(w, rows, table["duration_ns"], src, tgt, cal, conv.CONV_MEASUREMENT)
    assert sized is not None and 0 < sized[0] < 1.0e6
    assert convmath.sized_conv_ns(w, rows, table["duration_ns"], src, tgt, cal, "kernel") is None
    # a prediction says which rows the size model moved (an extrapolation reason of their own)
    from cascade.engine import extrapolation

    moved = predict(table, tgt.id, source=src.id, model="scaled", calibration=cal, config=conv.conv_config("scaled"),
                    registry=reg)
    assert moved.flags is not None and moved.flags[0] & extrapolation.CONV_SIZED
    # the geometric blend of the two models, at the fitted share (or the physical bracket above it)
    assert cal.conv_algos is not None and cal.conv_algos.size is not None
    share = cal.conv_algos.size.blend
    engine_only = msgspec.structs.replace(cal, conv_algos=msgspec.structs.replace(cal.conv_algos, size=None))
    engine = predict(table, tgt.id, source=src.id, model="scaled", calibration=engine_only,
                     config=conv.conv_config("scaled"), registry=reg).predicted_ns[0]
    blended = sized[0] ** share * engine ** (1.0 - share)
    assert moved.predicted_ns[0] == pytest.approx(blended, rel=1e-6) or moved.predicted_ns[0] > blended
    kept = predict(table, tgt.id, source=src.id, model="scaled", calibration=cal, registry=reg)
    assert kept.flags is not None and not kept.flags[0] & extrapolation.CONV_SIZED


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
def test_an_unseen_t4_is_predicted_better_than_by_the_ratio_roofline() -> None:
    """The T4 left out of every convolution fit, predicted from the V100's campaign times."""
    reg = GPURegistry(builtin_specs())
    cal = load_calibration()
    sets = {s.spec.id: s for s in conv.load_conv_folder(MEASURED / conv.CONV_FOLDER, reg)}
    held = conv.left_out_calibrations(list(sets.values()), cal, reg)
    scores = conv.evaluate_conv([sets["SM70_V100_PCIE_32GB"], sets["SM75_T4"]], cal, reg,
                                calibration_for=held, bounds=False)
    into = {s.model: s.mape_pct for s in scores if s.target == "SM75_T4"}
    assert into["scaled"] < into["roofline"] and into["scaled"] < 17.0  # 14.5 (session 23: 32.2)


def test_a_calibration_written_before_the_size_model_still_loads_and_predicts_as_then() -> None:
    """A calibration file without ``conv_algos.size`` (or a size model without ``blend``) loads: the
    engine's algorithm costs alone, or the size model alone."""
    import json

    from cascade.calibration import Calibration

    doc = json.loads(msgspec.json.encode(load_calibration()))
    size = doc["conv_algos"].pop("size")
    old = msgspec.json.decode(json.dumps(doc), type=Calibration)
    assert old.conv_algos is not None and old.conv_algos.size is None
    size.pop("blend")
    doc["conv_algos"]["size"] = size
    alone = msgspec.json.decode(json.dumps(doc), type=Calibration)
    assert alone.conv_algos is not None and alone.conv_algos.size is not None and alone.conv_algos.size.blend == 1.0
