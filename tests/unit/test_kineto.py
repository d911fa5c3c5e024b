"""PyTorch profiler (Kineto) traces: streaming reader, op -> kernel linking, shapes/FLOPs/bytes."""

from __future__ import annotations

import copy
import gzip
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade import opfamilies
from cascade.errors import TraceFormatError
from cascade.traces.chrome import read_chrome_trace
from cascade.traces.jsonstream import iter_chrome_json
from cascade.traces.opshapes import op_work
from cascade.traces.timeline import import_timeline
from tests.support.paths import SHARED_DATA, TEST_DATA

DATA = TEST_DATA
TIMELINES = SHARED_DATA / "timelines"
F, H, B, L = ["float"], "c10::Half", "c10::BFloat16", "long int"


# ---- golden shapes, FLOPs and bytes per op ------------------------------------------------------
@pytest.mark.parametrize(("name", "dims", "types", "concrete", "want"), [
    ("aten::mm", [[64, 32], [32, 16]], [H, H], [], {"kind": "gemm", "dtype": "fp16", "batch": 1, "m": 64,
     "n": 16, "k": 32, "flops": 2 * 64 * 16 * 32, "bytes": 2 * (64 * 32 + 32 * 16 + 64 * 16)}),
    ("aten::addmm", [[16], [64, 32], [32, 16], [], []], [F[0]] * 3 + ["Scalar"] * 2, [],
     {"m": 64, "n": 16, "k": 32, "dtype": "fp32", "flops": 2 * 64 * 16 * 32,
          "bytes": 4 * (16 + 64 * 32 + 32 * 16 + 64 * 16)}),
    ("aten::bmm", [[8, 64, 32], [8, 32, 16]], [B, B], [], {"batch": 8, "m": 64, "n": 16, "k": 32,
     "dtype": "bf16", "flops": 2 * 8 * 64 * 16 * 32}),
    ("aten::baddbmm", [[8, 64, 16], [8, 64, 32], [8, 32, 16], [], []], [B] * 3, [],
     {"batch": 8, "m": 64, "n": 16, "k": 32}),
    ("aten::matmul", [[4, 10, 32], [32, 16]], F * 2, [], {"batch": 1, "m": 40, "n": 16, "k": 32}),
    ("aten::matmul", [[4, 2, 10, 32], [4, 2, 32, 16]], F * 2, [], {"batch": 8, "m": 10, "n": 16, "k": 32}),
    ("aten::linear", [[2, 16, 768], [3072, 768], [3072]], [H] * 3, [],
     {"m": 32, "n": 3072, "k": 768, "flops": 2 * 32 * 3072 * 768}),
    # conv fwd: N=2, C=3, 16x16, K=8, 3x3, stride 2, pad 1 -> 8x8: M=2*64, N=8, K=27
    ("aten::convolution", [[2, 3, 16, 16], [8, 3, 3, 3], [8]], F * 3,
     ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
     {"kind": "conv", "batch": 1, "m": 128, "n": 8, "k": 27, "flops": 2 * 128 * 8 * 27,
          "bytes": 4 * (2 * 3 * 256 + 8 * 27 + 2 * 8 * 64)}),
    # grouped (depthwise-like): groups=4, C=8, K=8, 3x3, stride 1, pad 1 -> 16x16
    ("aten::cudnn_convolution", [[1, 8, 16, 16], [8, 2, 3, 3]], [H, H],
     ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "4", "False", "False", "True"],
     {"batch": 4, "m": 256, "n": 2, "k": 18, "flops": 2 * 4 * 256 * 2 * 18}),
    ("aten::_flash_attention_forward", [[2, 128, 8, 64], [2, 128, 8, 64], [2, 128, 8, 64]],
     [B] * 3, ["", "", "", "", "", "128", "128", "0.", "True", "False", "0.125"],
     {"kind": "attention", "batch": 16, "m": 128, "n": 128, "k": 64,
          "flops": 0.5 * 4 * 2 * 8 * 128 * 128 * 64, "bytes": 2 * 4 * 2 * 8 * 128 * 64}),
    ("aten::_scaled_dot_product_flash_attention", [[2, 8, 100, 64]] * 3, [H] * 3,
     ["", "", "", "0.", "False", "False", "0.125"],
     {"batch": 16, "m": 100, "n": 100, "k": 64, "flops": 4 * 2 * 8 * 100 * 100 * 64}),
    ("aten::_scaled_dot_product_efficient_attention_backward",
     [[2, 8, 100, 64]] * 4 + [[], [2, 8, 100, 64], [2, 8, 100]], [H] * 4,
     ["", "", "", "", "", "", "", "", "", "0.", "[True, True, True, False]", "False", ""],
     {"batch": 16, "m": 100, "n": 100, "k": 64, "flops": 2.5 * 4 * 2 * 8 * 100 * 100 * 64}),
    ("aten::native_layer_norm", [[4, 197, 768], [], [768], [768], []], [B, "ScalarList", B, B],
     [], {"kind": "norm", "dtype": "bf16", "bytes": 2 * 2 * 4 * 197 * 768 + 2 * 2 * 768}),
    ("aten::rms_norm", [[4, 10, 64], [], [64], []], [H, "ScalarList", H], [],
     {"kind": "norm", "bytes": 2 * 2 * 4 * 10 * 64 + 2 * 64}),
    ("aten::_softmax", [[2, 16, 16], [], []], F + ["Scalar", "Scalar"], [],
     {"kind": "softmax", "bytes": 2 * 4 * 512}),
    ("aten::index_select", [[30522, 512], [], [141]], [B, "Scalar", L], ["", "0", ""],
     {"kind": "embedding", "bytes": 2 * 141 * 512 * 2 + 141 * 8}),
    ("aten::embedding", [[100, 32], [2, 16], [], [], []], F + [L], [],
     {"kind": "embedding", "bytes": 2 * 32 * 32 * 4 + 32 * 8}),
    ("aten::add", [[4, 197, 768], [1, 197, 768], []], [B, B, "Scalar"], [],
     {"kind": "elementwise", "bytes": 2 * (4 * 197 * 768 + 197 * 768 + 4 * 197 * 768),
          "flops": 4 * 197 * 768}),
    ("aten::add_", [[4, 768, 14, 14], [1, 768, 1, 1], []], [B, B, "Scalar"], [],
     {"kind": "elementwise", "bytes": 2 * (2 * 4 * 768 * 196 + 768)}),
    ("aten::copy_", [[1024], [1024], []], [B, "float", "Scalar"], [],
     {"kind": "copy", "bytes": 1024 * 2 + 1024 * 4}),
    ("aten::cat", [[[4, 1, 768], [4, 196, 768]], []], ["TensorList", "Scalar"], [],
     {"kind": "copy", "bytes": 2 * 4 * (4 * 768 + 4 * 196 * 768)}),
    ("aten::sum", [[8, 1024], []], [H, ""], [], {"kind": "reduce", "bytes": 2 * 8 * 1024}),
])
def test_op_work_golden(name: str, dims: Any, types: Any, concrete: Any, want: dict[str, Any]) -> None:
    w = op_work(name, dims, types, concrete)
    assert w is not None
    for key, value in want.items():
        assert getattr(w, key) == pytest.approx(value) if isinstance(value, float | int) \
            and not isinstance(value, bool) else getattr(w, key) == value, key


def test_convolution_backward_has_both_passes() -> None:
    # grad_output [2, 8, 8, 8], input [2, 3, 16, 16], weight [8, 3, 3, 3], stride 2, pad 1
    w = op_work("aten::convolution_backward",
                [[2, 8, 8, 8], [2, 3, 16, 16], [8, 3, 3, 3]] + [[]] * 8, F * 3,
                ["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
                 "[True, True, True]"])
    assert w is not None and [p.name for p in w.passes] == ["dgrad", "wgrad"]
    dgrad, wgrad = w.passes
    # stride 2: a pixel of the input gets a quarter of the 8 x 9 taps, so the data gradient is
    # the forward's FLOPs (as PyTorch's flop counter counts it), not four times them
    assert (dgrad.m, dgrad.n, dgrad.k) == (2 * 256, 3, 8 * 9 // 4)
    assert (wgrad.m, wgrad.n, wgrad.k) == (8, 27, 128)
    forward = 2 * (2 * 8 * 8) * 8 * 27
    assert dgrad.flops == forward and wgrad.flops == forward
    only_w = op_work("aten::convolution_backward",
                     [[2, 8, 8, 8], [2, 3, 16, 16], [8, 3, 3, 3]] + [[]] * 8, F * 3,
                     ["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
                      "[False, True, True]"])
    assert only_w is not None and [p.name for p in only_w.passes] == ["wgrad"]


#: (input, weight, stride, padding, dilation, transposed, groups): plain, strided, valid, dilated,
#: grouped, depthwise, 1D, 3D and transposed convolutions.
CONVS = [
    ([4, 16, 32, 32], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], False, 1),
    ([4, 16, 32, 32], [32, 16, 3, 3], [2, 2], [1, 1], [1, 1], False, 1),
    ([4, 16, 32, 32], [32, 16, 1, 1], [2, 2], [0, 0], [1, 1], False, 1),
    ([2, 8, 31, 29], [12, 8, 5, 3], [3, 2], [0, 1], [1, 1], False, 1),
    ([2, 8, 32, 32], [8, 8, 3, 3], [1, 1], [2, 2], [2, 2], False, 1),
    ([2, 16, 20, 20], [32, 4, 3, 3], [2, 2], [1, 1], [1, 1], False, 4),
    ([2, 16, 20, 20], [16, 1, 3, 3], [1, 1], [1, 1], [1, 1], False, 16),
    ([4, 8, 100], [16, 8, 5], [2], [2], [1], False, 1),
    ([2, 4, 8, 12, 12], [8, 4, 3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False, 1),
    ([4, 32, 14, 14], [32, 16, 4, 4], [2, 2], [1, 1], [1, 1], True, 1),
    ([2, 8, 5, 6, 7], [8, 4, 3, 3, 3], [2, 2, 2], [0, 0, 0], [1, 1, 1], True, 2),
]


def _conv_backward(x: list[int], w: list[int], stride: list[int], pad: list[int], dil: list[int],
                   transposed: bool, groups: int) -> tuple[Any, list[int]]:
    fwd = op_work("aten::convolution", [x, w, [], [], [], [], [], [], []], F * 2,
                  ["", "", "", str(stride), str(pad), str(dil), str(transposed), "[0]", str(groups)])
    assert fwd is not None and len(fwd.passes) == 1
    out = [x[0], (w[1] * groups if transposed else w[0])] + [-1] * (len(x) - 2)
    return fwd, out


@pytest.mark.parametrize("case", CONVS)
def test_every_pass_of_a_convolution_is_the_forwards_flops(case: tuple[Any, ...]) -> None:
    """A convolution's data and weight gradients multiply each weight tap with each pixel of the
    low-resolution side once, as its forward does: the strided data gradient's implicit GEMM
    (and a transposed convolution's forward) reduces over the taps that land on a pixel, not all
    of them (PyTorch's flop counter counts the same; before, a stride-2 data gradient was 4x)."""
    x, w, stride, pad, dil, transposed, groups = case
    fwd, _ = _conv_backward(x, w, stride, pad, dil, transposed, groups)
    (f,) = fwd.passes
    # the forward's true FLOPs: every tap of every weight once per low-resolution pixel
    low_pixels = x[0] * math.prod(x[2:]) if transposed else f.m
    c_in = x[1]
    c_out = w[1] * groups if transposed else w[0]
    assert fwd.flops == pytest.approx(2.0 * low_pixels * (c_in // groups) * c_out * math.prod(w[2:]))
    # the backward of the same convolution: grad_output has the forward's output shape
    high = f.m if transposed else x[0] * math.prod(x[2:])
    go = [x[0], c_out] + _out_spatial(x, w, stride, pad, dil, transposed)
    bwd = op_work("aten::convolution_backward", [go, x, w] + [[]] * 8, F * 3,
                  ["", "", "", "[0]", str(stride), str(pad), str(dil), str(transposed), "[0]", str(groups),
                   "[True, True, False]"])
    assert bwd is not None and [p.name for p in bwd.passes] == ["dgrad", "wgrad"]
    for p in bwd.passes:
        assert p.flops == pytest.approx(fwd.flops), p.name
        assert p.k >= 1 and p.m * p.n * p.k * 2 * p.batch == pytest.approx(p.flops, rel=0.5)
    assert max(p.m for p in (*fwd.passes, *bwd.passes)) == high


def _out_spatial(x: list[int], w: list[int], stride: list[int], pad: list[int], dil: list[int],
                 transposed: bool) -> list[int]:
    if transposed:
        return [(i - 1) * s - 2 * p + d * (r - 1) + 1 for i, s, p, d, r in zip(x[2:], stride, pad, dil, w[2:],
                                                                                strict=True)]
    return [(i + 2 * p - d * (r - 1) - 1) // s + 1 for i, s, p, d, r in zip(x[2:], stride, pad, dil, w[2:],
                                                                            strict=True)]


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
@pytest.mark.parametrize("case", CONVS)
def test_convolution_flops_match_pytorchs_flop_counter(case: tuple[Any, ...]) -> None:
    """The same FLOPs as ``torch.utils.flop_counter`` for the forward and the backward (where
    PyTorch is installed: its CPU build, shapes on the meta device)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    x, w, stride, pad, dil, transposed, groups = case
    xt = torch.empty(x, device="meta", requires_grad=True)
    wt = torch.empty(w, device="meta", requires_grad=True)
    with FlopCounterMode(display=False) as fwd_count:
        y = torch.ops.aten.convolution(xt, wt, None, stride, pad, dil, transposed, [0] * len(stride), groups)
    with FlopCounterMode(display=False) as bwd_count:
        y.backward(torch.empty(y.shape, device="meta"))
    fwd, _ = _conv_backward(x, w, stride, pad, dil, transposed, groups)
    assert list(y.shape[2:]) == _out_spatial(x, w, stride, pad, dil, transposed)
    assert fwd.flops == pytest.approx(fwd_count.get_total_flops())
    go = list(y.shape)
    bwd = op_work("aten::convolution_backward", [go, x, w] + [[]] * 8, F * 3,
                  ["", "", "", "[0]", str(stride), str(pad), str(dil), str(transposed), "[0]", str(groups),
                   "[True, True, False]"])
    assert bwd is not None
    if groups == 1:  # (PyTorch's counter takes a grouped weight gradient as groups x its FLOPs)
        assert sum(p.flops for p in bwd.passes) == pytest.approx(bwd_count.get_total_flops())


@pytest.mark.parametrize(("name", "dims"), [
    ("aten::view", [[2, 3], []]), ("aten::mm", [[2, 3]]), ("aten::mm", "garbage"),
    ("aten::linear", [[2, -3], [4, 3]]), ("aten::convolution", [[2, 3], [4]]), (7, []),
    ("aten::_flash_attention_forward", [[1, 2, 3]] * 3),
])
def test_op_work_unknown_or_malformed_is_none(name: Any, dims: Any) -> None:
    assert op_work(name, dims, F * 3, []) is None


# ---- a trace recorded on the CPU, with kernels synthesised in the Kineto schema ---------------
def _load_fixture() -> dict[str, Any]:
    with gzip.open(DATA / "kineto-cpu-tiny.pt.trace.json.gz", "rt") as fh:
        return dict(json.load(fh))


def _add_kernel(doc: dict[str, Any], op_event: dict[str, Any], name: str, dur_us: float,
                corr: int, *, link: str = "external") -> None:
    ts = float(op_event["ts"]) + 0.1
    ext = op_event["args"]["External id"]
    rt_args: dict[str, Any] = {"correlation": corr, "cbid": 211}
    k_args: dict[str, Any] = {"device": 0, "stream": 7, "grid": [8, 1, 1], "block": [128, 1, 1],
                              "registers per thread": 64, "shared memory": 1024}
    if link == "external":
        k_args.update({"External id": ext, "correlation": corr})
        rt_args["External id"] = ext
    elif link == "runtime":
        k_args["correlation"] = corr
        rt_args["External id"] = ext
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                               "pid": op_event["pid"], "tid": op_event["tid"], "ts": ts,
                               "dur": 0.05, "args": rt_args})
    kts = ts + 50.0 + corr
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                               "ts": kts, "dur": dur_us, "args": k_args})
    if link == "flow":
        doc["traceEvents"].append({"ph": "s", "id": corr, "pid": op_event["pid"],
                                   "tid": op_event["tid"], "ts": ts, "cat": "ac2g", "name": "ac2g"})
        doc["traceEvents"].append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": kts,
                                   "cat": "ac2g", "name": "ac2g", "bp": "e"})


#: op name in the recorded trace -> (kernel name a GPU would run, expected columns)
RECORDED = {
    "aten::addmm": ("ampere_sgemm_32x128_tn", {"m": 32, "n": 96, "k": 32, "flops": 2 * 32 * 96 * 32}),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>",
        {"batch": 8, "m": 16, "n": 16, "k": 8, "flops": 0.5 * 4 * 2 * 4 * 16 * 16 * 8}),
    "aten::mkldnn_convolution": ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc",
                                 {"m": 128, "n": 8, "k": 27, "flops": 2 * 128 * 8 * 27}),
    "aten::convolution_backward": ("sm80_xmma_wgrad_implicit_gemm_tf32f32",
                                   {"m": 8, "n": 27, "k": 128, "flops": 2 * 8 * 27 * 128}),
    "aten::bmm": ("ampere_sgemm_64x64_nn", {"batch": 2, "m": 16, "n": 16, "k": 32}),
    "aten::native_layer_norm": ("void at::native::vectorized_layer_norm_kernel<float>",
                                {"bytes": 2 * 4 * 1024 + 4 * 64}),
    "aten::_softmax": ("void at::native::cunn_SoftMaxForward<4, float>", {"bytes": 2 * 4 * 512}),
    "aten::index_select": ("void at::native::indexSelectLargeIndex<float>",
                           {"bytes": 2 * 32 * 32 * 4 + 32 * 8}),
    "aten::gelu": ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>",
                   {"bytes": 2 * 4 * 1024}),
    "aten::add": ("void at::native::vectorized_elementwise_kernel<4, AddFunctor>",
                  {"bytes": 3 * 4 * 1024}),
}


def test_recorded_cpu_trace_with_synthetic_kernels(tmp_path: Path) -> None:
    doc = _load_fixture()
    firsts: dict[str, dict[str, Any]] = {}
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "cpu_op" and ev["name"] in RECORDED:
            firsts.setdefault(ev["name"], ev)
    assert set(firsts) == set(RECORDED)
    links = ("external", "runtime", "flow")
    for i, (op, ev) in enumerate(sorted(firsts.items())):
        _add_kernel(doc, ev, RECORDED[op][0], 10.0, 90_000 + i, link=links[i % 3])
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    tl = read_chrome_trace(path)
    t = tl.table
    assert len(t) == len(RECORDED)
    by_op = {str(o): i for i, o in enumerate(t["op"])}
    for op, (_, want) in RECORDED.items():
        i = by_op[op.removeprefix("aten::")]
        assert t["dtype"][i] == "fp32"
        for col, value in want.items():
            assert float(t[col][i]) == pytest.approx(value), (op, col)
    assert np.all(np.isfinite(t["host_launch_ns"]))
    assert set(t["step_kind"].tolist()) == {"prefill"} and set(t["step_tokens"].tolist()) == {32}
    assert tl.warnings == ()


def _hand_trace() -> dict[str, Any]:
    ev: list[dict[str, Any]] = []

    def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                   "dur": dur, "args": args})

    x("user_annotation", "ProfilerStep#4", 0.0, 500.0)
    x("cpu_op", "aten::convolution_backward", 10.0, 100.0,
      **{"External id": 5, "Input Dims": [[8, 64, 28, 28], [8, 32, 56, 56], [64, 32, 3, 3]]
         + [[]] * 8, "Input type": [H] * 3,
         "Concrete Inputs": ["", "", "", "[64]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]",
                             "1", "[True, True, False]"]})
    for corr, (name, dur) in enumerate([
            ("cudnn::engines_precompiled::nchwToNhwcKernel<__half>", 3.0),
            ("sm80_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", 40.0),
            ("sm80_xmma_wgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", 50.0)], start=1):
        x("cuda_runtime", "cudaLaunchKernel", 20.0 + corr, 1.0, correlation=corr,
          **{"External id": 5})
        x("kernel", name, 100.0 + 60 * corr, dur, tid=7, correlation=corr, stream=7,
          **{"External id": 5, "device": 0})
    x("cuda_runtime", "cudaMemcpyAsync", 200.0, 2.0, correlation=10)
    x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 400.0, 2.0, tid=7, correlation=10,
      bytes=4096, stream=7)
    x("gpu_memset", "Memset (Device)", 420.0, 1.0, tid=7, correlation=11, bytes=512, stream=7)
    return {"traceEvents": ev, "deviceProperties": [
        {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}]}


def test_conv_backward_kernels_memcpy_steps_device() -> None:
    tl = read_chrome_trace(_hand_trace())
    t = tl.table
    assert tl.device == "NVIDIA A100-SXM4-80GB" and tl.device_sm == 80
    names = [str(n) for n in t["name"]]
    helper = names.index("cudnn::engines_precompiled::nchwToNhwcKernel<__half>")
    dgrad = next(i for i, n in enumerate(names) if "dgrad" in n)
    wgrad = next(i for i, n in enumerate(names) if "wgrad" in n)
    assert (t["m"][dgrad], t["n"][dgrad], t["k"][dgrad]) == (8 * 56 * 56, 32, 64 * 9 // 4)  # stride 2
    assert (t["m"][wgrad], t["n"][wgrad], t["k"][wgrad]) == (64, 32 * 9, 8 * 28 * 28)
    assert t["m"][helper] == -1 and math.isnan(t["flops"][helper])
    assert t["op"][helper] == "convolution_backward" and t["dtype"][helper] == "fp16"
    mem = names.index("Memcpy DtoH (Device -> Pinned)")
    assert t["op"][mem] == "memcpy" and t["bytes"][mem] == 4096
    assert t["host_launch_ns"][mem] == 200_000.0
    assert t["op"][names.index("Memset (Device)")] == "memset"
    assert set(t["step"].tolist()) == {0} and set(t["step_kind"].tolist()) == {""}
    assert t["sync_after"][mem] == 0


# ---- the streaming reader -----------------------------------------------------------------------
def test_streaming_reader_matches_json_at_every_buffer_size(tmp_path: Path) -> None:
    doc = _load_fixture()
    text = json.dumps(doc, indent=1)
    p = tmp_path / "t.json"
    p.write_text(text)
    want = [("event", e) for e in doc["traceEvents"]]
    for size in (7, 1000, 1 << 20):
        got = [(k, v) for k, v, _ in iter_chrome_json(p, read_bytes=size) if k == "event"]
        assert got == want
    meta = {k: v for k, v, _ in iter_chrome_json(p) if k != "event"}
    assert meta["schemaVersion"] == doc["schemaVersion"]


def test_array_form_without_closing_bracket_and_trailing_comma() -> None:
    body = b'[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},\n'
    items = list(iter_chrome_json(io.BytesIO(body)))
    assert [k for k, _, _ in items] == ["event"] and items[0][2] == 1


@pytest.mark.parametrize(("body", "line", "expected"), [
    (b'{"traceEvents": [\n{"ph": "X"},\n{"ph": "X", "cat": "kernel", "ts": "soon"}\n]}', 3,
     "numeric 'ts'"),
    (b'{"traceEvents": [\n{"ph": "X"},\n{"ph": "X", "cat": \n', 4, "a JSON value"),
    (b'{"traceEvents": {"a": 1}}', 1, "'traceEvents' as a JSON array"),
    (b'\n\n"just a string"', 3, "a Chrome trace"),
    (b'{"traceEvents": []} trailing', 1, "end of the file"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": -4}]}', 1, "non-negative"),
])
def test_reader_errors_name_file_line_and_expectation(tmp_path: Path, body: bytes, line: int,
                                                      expected: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(body)
    with pytest.raises(TraceFormatError) as err:
        import_timeline(p)
    assert err.value.file == str(p) and err.value.line == line and expected in err.value.expected


def test_truncated_gzip_is_a_trace_format_error(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(_load_fixture()).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="cut.json.gz"):
        import_timeline(p)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["ph", "cat", "name", "ts", "dur", "args", "id", "tid", "pid",
                         "External id", "correlation", "Input Dims", "Input type", "grid",
                         "Concrete Inputs", "bytes", "deviceProperties"]), inner, max_size=6),
    max_leaves=20)
_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "s", "f", "i", 3]),
     "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "ac2g", "gpu_memcpy",
                             "user_annotation", None]),
     "ts": st.one_of(st.floats(-1e6, 1e12), st.integers(0, 10**9), st.text(max_size=3)),
     "name": st.one_of(st.sampled_from(["aten::mm", "aten::convolution_backward",
                                        "aten::_flash_attention_forward", "ProfilerStep#1",
                                        "sgemm"]), st.text(max_size=5), st.integers())},
    optional={"dur": st.one_of(st.floats(0, 1e4), st.text(max_size=2)), "args": _json,
              "id": _json, "tid": _json, "pid": _json})


@pytest.mark.slow  # a refit or a real capture: `make test` runs it, `make test-unit` leaves it out
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(st.one_of(_event, _json), max_size=12), cut=st.integers(0, 4000),
       flip=st.integers(0, 4000), byte=st.integers(0, 255))
def test_fuzz_reader_gives_trace_format_error_or_a_table(events: list[Any], cut: int, flip: int,
                                                         byte: int) -> None:
    doc = {"traceEvents": events, "deviceProperties": copy.deepcopy(events[:1])}
    raw = bytearray(json.dumps(doc).encode())
    variants = [bytes(raw), bytes(raw[:cut])]
    if raw:
        mutated = bytearray(raw)
        mutated[flip % len(mutated)] = byte
        variants.append(bytes(mutated))
    for body in variants:
        try:
            tl = read_chrome_trace_bytes(body)
        except TraceFormatError as exc:
            assert exc.file == "<fuzz>" and exc.expected
        else:
            assert len(tl.table) == len(tl.table["name"])


def read_chrome_trace_bytes(body: bytes) -> Any:
    from cascade.traces.chrome import _ChromeReader

    reader = _ChromeReader("<fuzz>")
    for key, value, line in iter_chrome_json(io.BytesIO(body), name="<fuzz>", read_bytes=64):
        reader.add(key, value, line)
    return reader.finish()


# ---- the real H100 traces in shared/data -------------------------------------------------------
@pytest.mark.parametrize("name", ["h100-bert-small", "h100-vit-nsfw-detection"])
def test_real_h100_traces_have_shapes_on_gemm_time(name: str) -> None:
    path = TIMELINES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    tl = read_chrome_trace(path)
    t = tl.table
    assert tl.device == "NVIDIA H100 80GB HBM3" and tl.device_sm == 90
    fam = opfamilies.families(t["op"], t["name"])
    gemm_class = np.isin(fam, [opfamilies.GEMM, opfamilies.ATTENTION]) & (t["op"] != "memcpy")
    shaped = gemm_class & (t["m"] > 0) & (t["n"] > 0) & (t["k"] > 0) & (t["flops"] > 0)
    dur = t["duration_ns"]
    share = dur[shaped].sum() / dur[gemm_class].sum()
    assert share >= 0.9, share
    kernels = t["op"] != "memcpy"
    assert np.all(t["op"][kernels & (t["op"] != "memset")] != "")
    assert np.all(np.isfinite(t["host_launch_ns"]))
    assert (t["dtype"][shaped] == "bf16").all()
    assert (t["bytes"][kernels] > 0).mean() > 0.9


def test_a_json_file_that_is_no_trace_is_refused_naming_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 1, "name": "run", "configs": []}))
    with pytest.raises(TraceFormatError) as exc:
        read_chrome_trace(path)
    assert exc.value.file == str(path) and "'traceEvents' array" in exc.value.expected
    assert "'schema_version', 'name', 'configs'" in str(exc.value)


def test_a_profile_without_gpu_kernels_is_refused_saying_how_to_record_one(tmp_path: Path) -> None:
    path = tmp_path / "cpu_only.json"
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10.0 + i, "dur": 1.0,
               "pid": 1, "tid": 1} for i in range(3)]
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(TraceFormatError) as exc:
        read_chrome_trace(path)
    assert "ProfilerActivity.CUDA" in exc.value.expected
    assert "3 trace events, none of them on the GPU" in str(exc.value)


def test_an_empty_trace_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"traceEvents": []}')
    with pytest.raises(TraceFormatError, match="no trace events"):
        read_chrome_trace(path)
    with pytest.raises(TraceFormatError, match="no trace events"):
        read_chrome_trace({"traceEvents": []})


_X = [16, 64, 256, 256]  # KernelBench's norm problems: 268 MB of FP32 input
_XB = 4.0 * math.prod(_X)
_C = [64]


@pytest.mark.parametrize(("name", "dims", "concrete", "passes"), [
    # batch statistics: a reduction kernel over the whole input, then the normalisation reads it again
    ("aten::native_batch_norm", [_X, _C, _C, _C, _C, [], [], []], ["", "", "", "", "", "True", "0.1", "1e-05"], 3),
    ("aten::cudnn_batch_norm", [_X, _C, _C, _C, _C, [], [], []], ["", "", "", "", "", "True", "0.1", "1e-05"], 3),
    ("aten::_native_batch_norm_legit", [_X, _C, _C, [], [], []], ["", "", "", "True", "0.1", "1e-05"], 3),
    ("aten::_batch_norm_with_update", [_X, _C, _C, _C, _C, [], []], ["", "", "", "", "", "0.1", "1e-05"], 3),
    ("aten::_batch_norm_no_update", [_X, _C, _C, [], [], [], []], ["", "", "", "", "", "0.1", "1e-05"], 3),
    ("aten::native_group_norm", [_X, _C, _C, [], [], [], [], []], ["", "", "", "16", "64", "65536", "8", "1e-05"], 3),
    # running statistics (eval), a row one block holds, or a mode the trace does not say: one read
    ("aten::native_batch_norm", [_X, _C, _C, _C, _C, [], [], []], ["", "", "", "", "", "False", "0.1", "1e-05"], 2),
    ("aten::_native_batch_norm_legit_no_training", [_X, _C, _C, _C, _C, [], []], [], 2),
    ("aten::_batch_norm_no_update", [_X, _C, _C, _C, _C, [], []], ["", "", "", "", "", "0.1", "1e-05"], 2),
    ("aten::native_batch_norm", [_X, _C, _C, _C, _C, [], [], []], [], 2),
    ("aten::native_layer_norm", [[4096, 1024], [], [1024], [1024], []], [], 2),
])
def test_a_norm_over_batch_statistics_reads_its_input_twice(name: str, dims: list[Any], concrete: list[str],
                                                             passes: int) -> None:
    """Statistics over more than one block holds (a batch norm in training, a group norm) are a
    reduction over the whole input before the normalisation reads it again: 2 reads + 1 write.
    KernelBench's BatchNorm, InstanceNorm and GroupNorm (this input) run at 62-77% of the T4's,
    A10's, A10G's and L40S's DRAM bandwidth counted so, the fraction its one-kernel scalar multiply
    reaches there (74-80%); counted as 1 read + 1 write they would reach 41-52%."""
    types = [F[0]] * sum(1 for d in dims if d)
    w = op_work(name, dims, types + [""] * (len(dims) - len(types)), concrete)
    assert w is not None and w.kind == "norm"
    params = 4.0 * sum(math.prod(d) for d in dims[1:] if d and d != [] and len(d) == 1)
    assert w.bytes == pytest.approx(passes * (_XB if dims[0] == _X else 4.0 * 4096 * 1024) + params)


@pytest.mark.parametrize(("name", "dims", "concrete", "streams"), [
    ("aten::native_batch_norm_backward", [_X, _X, _C, _C, _C, _C, _C, [], [], []],
     ["", "", "", "", "", "", "", "True", "1e-05", "[True, True, True]"], 5),
    ("aten::native_batch_norm_backward", [_X, _X, _C, _C, _C, _C, _C, [], [], []],
     ["", "", "", "", "", "", "", "False", "1e-05", "[True, True, True]"], 3),
    ("aten::native_group_norm_backward", [_X, _X, [16, 8], [16, 8], _C, [], [], [], [], []], [], 5),
    ("aten::native_layer_norm_backward", [_X, _X, [], [16, 64, 256, 1], [16, 64, 256, 1], [256], [256], []],
     ["", "", "[256]", "", "", "", "", "[True, True, True]"], 5),
    ("aten::native_layer_norm_backward", [_X, _X, [], [16, 64, 256, 1], [16, 64, 256, 1], [], [], []],
     ["", "", "[256]", "", "", "", "", "[True, False, False]"], 3),
    ("aten::native_layer_norm_backward", [_X, _X, [], [16, 64, 256, 1], [16, 64, 256, 1], [256], [256], []],
     [], 3),
])
def test_a_norms_backward_with_a_reduction_pass_reads_grad_and_input_twice(
        name: str, dims: list[Any], concrete: list[str], streams: int) -> None:
    """A batch or group norm's backward in training reduces over grad_out and the input, then the
    kernel that writes the input's gradient reads both again (5 streams); a layer norm's weight
    and bias gradients are a second kernel over the same two. Without them: 3 streams."""
    types = [F[0] if d else "" for d in dims]
    w = op_work(name, dims, types, concrete)
    assert w is not None and w.kind == "norm"
    small = 4.0 * sum(math.prod(d) for d in dims[2:] if d)
    assert w.bytes == pytest.approx(streams * _XB + 2.0 * small)


@pytest.mark.parametrize(("text", "value"), [
    ("[True, False, True]", [True, False, True]), ("[1, 2]", [1, 2]), ("[]", []), ("True", True),
    ("[True, 1]", None), ("[x]", None), ("3", 3), ("0.5", 0.5), ("", None),
])
def test_concrete_inputs_parse_to_ints_bools_and_their_lists(text: str, value: Any) -> None:
    """One parser for every ``Concrete Inputs`` cell: an ``output_mask`` is a list of bools (the
    convolution and norm backwards read it the same way), a mixed list is nothing."""
    from cascade.traces.opshapes import parse_scalar

    assert parse_scalar(text) == value and type(parse_scalar(text)) is type(value)
