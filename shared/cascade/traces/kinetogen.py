"""Synthetic PyTorch profiler (Kineto) traces of any size, in the schema real ones use.

:func:`write_kineto_trace` streams a transformer-like workload (linear / addmm,
layer_norm, flash attention, gelu, add; each op with ``Input Dims``, ``Input
type``, ``Concrete Inputs``; a ``cuda_runtime`` launch, a kernel, and the
``ac2g`` flow pair per kernel; ``python_function`` events around them as real
traces have) to disk without holding it in memory, and returns what the
importer must find. Used by ``cascade bench kineto``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import IO

import msgspec

#: (op, Input Dims, Input type, Concrete Inputs, kernel name, kernel us, GEMM-class)
_LAYER: tuple[tuple[str, str, str, str, str, float, bool], ...] = (
    ("aten::native_layer_norm", "[[8, 512, 1024], [], [1024], [1024], []]",
     '["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"]',
     '["", "[1024]", "", "", "1e-05"]',
     "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
     9.0, False),
    ("aten::addmm", "[[3072], [4096, 1024], [1024, 3072], [], []]",
     '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]',
     '["", "", "", "1", "1"]',
     ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
      "segment_k_off_kernel__5x_cublas"), 48.0, True),
    ("aten::_flash_attention_forward", ("[[8, 512, 16, 64], [8, 512, 16, 64], [8, 512, 16, 64], "
                                         "[], [], [], [], [], [], [], []]"),
     ('["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "", "", "Scalar", "Scalar", "Scalar", '
      '"Scalar", "Scalar", "Scalar"]'),
     '["", "", "", "", "", "512", "512", "0.", "True", "False", "0.125"]',
     ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, "
      "4, false, false, cutlass::bfloat16_t>, true, false, false, false, true, true, false>"
      "(pytorch_flash::Flash_fwd_params)"), 61.0, True),
    ("aten::addmm", "[[1024], [4096, 1024], [1024, 1024], [], []]",
     '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]',
     '["", "", "", "1", "1"]',
     ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_64x3_tn_align8>"
      "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_64x3_tn_align8::Params)"), 17.0, True),
    ("aten::add", "[[8, 512, 1024], [8, 512, 1024], []]",
     '["c10::BFloat16", "c10::BFloat16", "Scalar"]', '["", "", "1"]',
     ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
      "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
      "at::detail::Array<char*, 3>)"), 12.0, False),
    ("aten::gelu", "[[8, 512, 4096], []]", '["c10::BFloat16", ""]', '["", ""]',
     ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
      "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
      "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >"),
     30.0, False),
)


class KinetoTruth(msgspec.Struct, frozen=True, kw_only=True):
    """What an importer must find in a generated trace."""

    file_bytes: int
    """Size of the (uncompressed) JSON text."""
    kernels: int
    gemm_class_kernels: int
    kernel_time_us: float


def write_kineto_trace(path: str | Path, size_mb: float, *, gz: bool = False) -> KinetoTruth:
    """Write a Kineto trace of about ``size_mb`` MB of JSON text to ``path`` (gzip if ``gz``)."""
    path = Path(path)
    target = int(size_mb * 1e6)
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as raw:
        fh: IO[str] = raw
        written = 0
        head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": '
                '"NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9, '
                '"computeMinor": 0, "numSms": 132}\n  ],\n  "record_shapes": 1,\n'
                '  "traceEvents": [\n')
        fh.write(head)
        written += len(head)
        ts_cpu = 1_000_000.0
        ts_gpu = 1_000_000.0
        ext = 0
        corr = 0
        pyid = 0
        kernels = gemm = 0
        ktime = 0.0
        first = True
        step = 0
        while written < target:
            step += 1
            step_start = ts_cpu
            chunk: list[str] = []
            for _layer in range(24):
                for op, dims, types, concrete, kname, kus, is_gemm in _LAYER:
                    ext += 1
                    corr += 1
                    for depth in range(4):  # the Python frames a real trace records
                        pyid += 1
                        chunk.append(
                            f'{{"ph": "X", "cat": "python_function", "name": "torch/nn/modules/'
                            f'module.py(1750): _call_impl", "pid": 4242, "tid": 4242, "ts": '
                            f'{ts_cpu + depth * 0.1:.3f}, "dur": {9.0 - depth:.3f}, "args": '
                            f'{{"Python parent id": {pyid - 1}, "Python id": {pyid}, '
                            f'"Python module id": {depth}}}}}')
                    chunk.append(
                        f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": 4242, "tid": 4242, '
                        f'"ts": {ts_cpu + 1:.3f}, "dur": 6.000, "args": {{"External id": {ext}, '
                        f'"Record function id": 0, "Concrete Inputs": {concrete}, '
                        f'"Input type": {types}, "Input Strides": [], "Input Dims": {dims}, '
                        f'"Ev Idx": {ext}}}}}')
                    launch = ts_cpu + 3.0
                    chunk.append(
                        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": '
                        f'4242, "tid": 4242, "ts": {launch:.3f}, "dur": 2.500, "args": '
                        f'{{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}')
                    chunk.append(
                        f'{{"ph": "s", "id": {corr}, "pid": 4242, "tid": 4242, "ts": '
                        f'{launch:.3f}, "cat": "ac2g", "name": "ac2g"}}')
                    ts_gpu = max(ts_gpu, launch + 5.0)
                    chunk.append(
                        f'{{"ph": "X", "cat": "kernel", "name": {json.dumps(kname)}, "pid": 0, '
                        f'"tid": 7, "ts": {ts_gpu:.3f}, "dur": {kus:.3f}, "args": {{"External id": '
                        f'{ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, '
                        f'"correlation": {corr}, "registers per thread": 128, "shared memory": '
                        f'49152, "blocks per SM": 1.0, "warps per SM": 4.0, "grid": [132, 1, 1], '
                        f'"block": [128, 1, 1], "est. achieved occupancy %": 6}}}}')
                    chunk.append(
                        f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {ts_gpu:.3f}, '
                        f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
                    ts_gpu += kus + 1.0
                    ts_cpu += 10.0
                    kernels += 1
                    gemm += int(is_gemm)
                    ktime += kus
            chunk.append(
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": '
                f'4242, "tid": 4242, "ts": {step_start:.3f}, "dur": {ts_cpu - step_start:.3f}, '
                f'"args": {{"External id": 0}}}}')
            text = (("" if first else ",\n") + ",\n".join(chunk))
            first = False
            fh.write(text)
            written += len(text)
        tail = '\n  ],\n  "traceName": "generated"\n}\n'
        fh.write(tail)
        written += len(tail)
    return KinetoTruth(file_bytes=written, kernels=kernels, gemm_class_kernels=gemm,
                       kernel_time_us=ktime)
