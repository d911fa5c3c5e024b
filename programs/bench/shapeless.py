"""`cascade bench shapeless`: a trace without shapes predicted on other GPUs, per kernel family.

The trace is a V100 FP32 ResNet-50 training step as the PyTorch profiler records it without
``record_shapes``: kernel names (cuDNN convolutions, cuBLAS SGEMM, cuDNN batch norm, ATen
elementwise / pooling / reduction / copy kernels, one unknown kernel) and measured durations,
no op, dtype, shape, FLOPs or bytes. The figures are the predicted speed-up of each family
over the V100 next to the spec ratios that bound it (FP32 and TF32-tensor peaks, DRAM
bandwidth).
"""

from __future__ import annotations

import argparse

import numpy as np

from cascade.kerneltable import KernelTable

NAME = "shapeless"
HELP = "predicted A100/H100 over V100 per kernel family for a trace without shapes"

#: (kernel name as a V100 trace names it, measured us, launches per step)
V100_RESNET50_FP32: tuple[tuple[str, float, int], ...] = (
    ("volta_scudnn_128x64_relu_interior_nn_v1", 412.0, 16),
    ("volta_scudnn_128x128_stridedB_splitK_interior_nn_v1", 655.0, 12),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", 388.0, 10),
    (("void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int, "
      "float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, "
      "int, float, int, int, int)"), 702.0, 16),
    (("void cudnn::detail::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false, 512>(int, int,"
      " int, float const*, int, float*, float const*, kernel_grad_params, unsigned long long,"
      " int, float, int, int, int, int)"), 845.0, 16),
    (("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, "
      "true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, "
      "unsigned long long, int, float, float, int, float const*, float const*, bool, int, "
      "int)"), 120.0, 2),
    ("volta_sgemm_128x64_nn", 95.0, 2),
    (("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, "
      "1>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float "
      "const*, float, float, float*, float*, float*, float*, float, float)"), 148.0, 53),
    (("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, "
      "float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, "
      "cudnnTensorStruct, float*, float*, float*, float const*, float const*, float const*, "
      "float)"), 231.0, 53),
    (("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
      "namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
      "at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
      "const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, "
      "2> >"), 96.0, 49),
    (("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
      "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
      "at::detail::Array<char*, 3>)"), 140.0, 16),
    (("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float"
      " const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, "
      "long*)"), 180.0, 1),
    (("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
      "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"), 35.0, 1),
    (("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::T"
      "ensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#8}::operator()() "
      "const::{lambda(float)#1}>"), 60.0, 4),
    (("void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)"), 24.0, 20),
    (("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
      "at::detail::Array<char*, 1> >"), 2.1, 60),
)


def shapeless_resnet_table() -> KernelTable:
    """The V100 trace above as a kernel table (name, duration, launch order; nothing else)."""
    rows = []
    t = 0.0
    for name, us, count in V100_RESNET50_FP32:
        for _ in range(count):
            rows.append({"name": name, "duration_ns": us * 1000.0, "host_launch_ns": t,
                         "start_ns": t + 5000.0, "stream": 7})
            t += us * 1000.0 + 3000.0
    table = KernelTable.from_rows(rows)
    table["kernel_id"] = np.arange(1, len(table) + 1)
    return table


def family_ratios(source: str = "SM70_V100_SXM2",
                  targets: tuple[str, ...] = ("SM80_A100", "SM90_H100")
                  ) -> dict[str, dict[str, float]]:
    """Per kernel family (and ``all``): source time / predicted target time, by target."""
    from cascade import opfamilies as ops
    from cascade.engine import predict_many

    table = shapeless_resnet_table()
    preds = predict_many(table, list(targets), source=source)
    fam = np.asarray(ops.FAMILIES, dtype=object)[ops.families(table["op"], table["name"])]
    src_t = table["duration_ns"]
    out: dict[str, dict[str, float]] = {}
    for p in preds:
        by = out.setdefault(p.target, {})
        by["all"] = float(src_t.sum() / p.predicted_ns.sum())
        for f in sorted(set(fam.tolist())):
            sel = fam == f
            by[str(f)] = float(src_t[sel].sum() / p.predicted_ns[sel].sum())
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="SM70_V100_SXM2", help="GPU the trace ran on")
    parser.add_argument("--targets", default="SM80_A100,SM90_H100", help="targets, comma-separated")


def run(args: argparse.Namespace) -> int:
    """Print per-family speed-ups beside the spec ratios."""
    from cascade.gpus import get_gpu

    src = get_gpu(args.source)
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    ratios = family_ratios(src.id, targets)
    print(f"shape-less FP32 ResNet-50 step traced on {src.id}: source time / predicted time")
    for tid in targets:
        spec = get_gpu(tid)
        print(f"\n{tid}: spec ratios  FP32 {spec.peak_flops('fp32', False) / src.peak_flops('fp32', False):.2f}"
              f"  TF32-tensor/FP32 {spec.peak_flops('tf32', True) / src.peak_flops('fp32', False):.2f}"
              f"  DRAM bandwidth {spec.bandwidth_bps / src.bandwidth_bps:.2f}")
        for fam, r in sorted(ratios[spec.id].items(), key=lambda kv: kv[0] != "all"):
            print(f"  {fam:<12} {r:6.2f}x")
    return 0
