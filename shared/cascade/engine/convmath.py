"""Convolutions and window kernels as each GPU runs them: PyTorch's cuDNN moving FP32
convolutions to TF32 tensor cores (:func:`cudnn_math`, :func:`target_math`), the cost of the
cuDNN algorithm each GPU picks (:func:`conv_algorithm_costs`) and the CUDA-core roof of a window
kernel's address arithmetic (:func:`window_kinds`, :func:`with_simt_roof`)."""

from __future__ import annotations

import re

import numpy as np

from cascade import opfamilies
from cascade.calibration import Calibration, ResolvedParams
from cascade.engine import convalgo
from cascade.engine.extrapolation import FLAGS_DTYPE, OFF_TENSOR, SOFTWARE_FALLBACK, TF32_CONV
from cascade.engine.perf import (
    KernelTimes,
    clock_slowdown,
    matmul_simt_flops,
    on_spec,
    smooth_max,
    software_fallback,
)
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import DTYPES

_CUDNN_CONV = ("conv", "cudnn", "fprop", "dgrad", "wgrad", "winograd", "implicit_convolve")
#: Names that pin a convolution to FP32 multiply-adds on the CUDA cores whatever the GPU has
#: (cuDNN's ``scudnn`` / ``implicit_convolve_sgemm`` kernels, FFMA xmma kernels): the kernel that
#: ran says how it ran.
_FP32_CONV_NAME = ("scudnn", "sgemm", "ffma", "_simt")
#: FLOPs a TF32 cuDNN convolution spends per FLOP of the FP32 one it replaces (implicit-GEMM
#: address work, filter shapes that fill tiles poorly, FP32 operands to convert): KernelBench's
#: convolutions of at least 64 FLOPs per byte reach a median 15% of an A100's TF32 peak and 12%
#: of an L40S's (large TF32 GEMMs: about 75%); docs/ACCURACY.md, session 16, has the sweep (2.0 before;
#: 2.5-3 score best with each GPU left out of the transfer fit, 4 worse).
TF32_CONV_OVERHEAD = 3.0


def _conv_rows(w: Workload, names: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(convolutions by name, those whose name pins them to FP32 CUDA-core math), read for the
    ``rows`` asked about only, each distinct name once."""
    conv = np.zeros(len(w), dtype=bool)
    pinned = np.zeros(len(w), dtype=bool)
    idx = np.flatnonzero(rows)
    if len(idx) == 0:
        return conv, pinned
    uniq, inv = np.unique(names[idx].astype(str), return_inverse=True)
    lowered = np.char.lower(uniq)
    conv_u = np.zeros(len(uniq), dtype=bool)
    for word in _CUDNN_CONV:
        conv_u |= np.char.find(lowered, word) >= 0
    pinned_u = np.zeros(len(uniq), dtype=bool)
    for word in _FP32_CONV_NAME:
        pinned_u |= np.char.find(lowered, word) >= 0
    conv[idx] = conv_u[inv] & (w.family[idx] == opfamilies.GEMM)
    pinned[idx] = pinned_u[inv]
    return conv, pinned


def convolutions(w: Workload, names: np.ndarray) -> np.ndarray:
    """Convolution kernels: GEMM-family rows without GEMM dims whose op or name says convolution."""
    cand = (w.family == opfamilies.GEMM) & ~w.is_gemm
    return _conv_rows(w, names, cand)[0] if cand.any() else cand


def convolution_kernels(w: Workload, names: np.ndarray) -> np.ndarray:
    """Every convolution among the GEMM-family rows, by op or name, with GEMM dims (a trace with
    shapes gives its implicit GEMM) or without: cuDNN picks each GPU's own algorithm for all of
    them, so on another GPU (or from the work alone) each is flagged :data:`WINDOW` and quoted at
    the single-operator figure for convolutions (:func:`convolutions` are those the window roof
    is fitted on)."""
    cand = w.family == opfamilies.GEMM
    return _conv_rows(w, names, cand)[0] if cand.any() else cand


def cudnn_math(w: Workload, names: np.ndarray, spec: GPUSpec, *, measured: bool = False
               ) -> tuple[Workload, np.ndarray]:
    """The workload as PyTorch's cuDNN runs it on ``spec``: an FP32 convolution runs on TF32
    tensor cores where the spec has them (``torch.backends.cudnn.allow_tf32`` defaults to True),
    at :data:`TF32_CONV_OVERHEAD` FLOPs per FP32 FLOP; elsewhere, and for FP32 matmuls
    (``torch.backends.cuda.matmul.allow_tf32`` defaults to False), nothing changes.
    ``measured``: ``spec`` is the GPU the times were measured on, so a name that says how the
    kernel ran (``scudnn``, ``sgemm``, ``ffma``: FP32 CUDA-core math) is kept as it ran, and only
    a convolution whose name does not say (a harness row named ``conv``, a generic ``cudnn``
    kernel) is read as the TF32 one PyTorch ran there; on a target every FP32 convolution moves
    (cuDNN picks that GPU's own kernels). A convolution whose name says TF32 tensor cores
    (``sm80_xmma_fprop_implicit_gemm_tf32f32_...``) ran that path: it costs the same
    :data:`TF32_CONV_OVERHEAD`, on the GPU it was traced on and on any that keeps it there, so a
    traced TF32 convolution and a moved FP32 one are the same work. Returns the workload and
    the rows charged the overhead (what :func:`measured_work` takes back off)."""
    charged = np.zeros(len(w), dtype=bool)
    if spec.tensor_flops("tf32") <= 0 or len(w) == 0:
        return w, charged
    fp32, tf32 = DTYPES.index("fp32"), DTYPES.index("tf32")
    gemm = w.family == opfamilies.GEMM
    cand = gemm & (w.dtype_code == fp32) & ~w.tensor
    named = gemm & (w.dtype_code == tf32) & w.tensor
    if not (cand | named).any():
        return w, charged
    conv, pinned = _conv_rows(w, names, cand | named)
    moved = cand & conv & ~pinned if measured else cand & conv
    charged = moved | (named & conv)
    if not charged.any():
        return w, charged
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    dtype = w.dtype.copy()
    dtype[moved] = "tf32"
    code = w.dtype_code.copy()
    code[moved] = tf32
    fields.update(dtype=dtype, dtype_code=code, tensor=w.tensor | moved,
                  flops=np.where(charged, w.flops * TF32_CONV_OVERHEAD, w.flops))
    return Workload(**fields), charged


def measured_work(w: Workload, w_src: Workload, moved: np.ndarray) -> Workload:
    """``w`` (the kernels as the trace names them) with the work inferred on the source
    (``w_src``, after :func:`cudnn_math` moved ``moved`` rows to TF32 there), in the FP32 terms
    of ``w``: a moved row's TF32 FLOPs / :data:`TF32_CONV_OVERHEAD`. What the target's own
    :func:`target_math` starts from."""
    if w_src is w:
        return w
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    fields.update(flops=np.where(moved, w_src.flops / TF32_CONV_OVERHEAD, w_src.flops), bytes=w_src.bytes)
    return Workload(**fields)


def target_math(w: Workload, names: np.ndarray, src: GPUSpec, target: GPUSpec, *, cudnn_tf32: bool = True
                ) -> tuple[Workload, np.ndarray]:
    """The workload as the target runs it: FP32 convolutions on TF32 tensor cores where the
    target has them (:func:`cudnn_math`; flagged :data:`TF32_CONV` where the source had none, so
    the path changed), tensor-core kernels of a dtype the target has no tensor cores for on its
    CUDA cores (:func:`on_spec`, flagged :data:`OFF_TENSOR`). ``w`` is the workload as measured
    (before :func:`cudnn_math` on the source). ``cudnn_tf32`` False: the run turned TF32 off, so
    FP32 convolutions stay FP32. Returns the workload and the bits per kernel."""
    flags = np.where(software_fallback(w, target), SOFTWARE_FALLBACK, 0).astype(FLAGS_DTYPE)
    moved = on_spec(w, target)
    if moved is not w:
        flags |= np.where(w.tensor & ~moved.tensor, OFF_TENSOR, 0).astype(FLAGS_DTYPE)
        w = moved
    if not cudnn_tf32:
        return w, flags
    w, conv = cudnn_math(w, names, target)
    if src.tensor_flops("tf32") <= 0:
        flags |= np.where(conv, TF32_CONV, 0).astype(FLAGS_DTYPE)
    return w, flags


def fp32_convolutions(w: Workload, names: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Convolutions with their implicit GEMM known (m, n, k) that run FP32 on the CUDA cores: by
    op (``conv2d``, ``convolution``...) or by name (:func:`convolution_kernels`)."""
    cand = w.is_gemm & (w.dtype_code == DTYPES.index("fp32")) & ~w.tensor
    if not cand.any():
        return cand
    idx = np.flatnonzero(cand)
    uniq, inv = np.unique(np.asarray(op[idx]).astype(str), return_inverse=True)
    by_op = np.char.find(np.char.lower(uniq), "conv") >= 0
    out = np.zeros(len(w), dtype=bool)
    out[idx] = by_op[inv]
    return out | (cand & convolution_kernels(w, names))


def with_conv_cost(w: Workload, rows: np.ndarray, factor: np.ndarray) -> Workload:
    """``w`` with each of ``rows``' implicit GEMM run at ``factor`` times its direct work (its
    cuDNN algorithm's cost, :class:`cascade.calibration.ConvAlgos`): K and the FLOPs scaled."""
    if not rows.any():
        return w
    f = np.where(rows, factor, 1.0)
    fields = {name: getattr(w, name) for name in w.__dataclass_fields__}
    fields.update(k=w.k * f, flops=w.flops * f)
    return Workload(**fields)


def conv_algorithm_costs(w_src: Workload, w_tgt: Workload, names: np.ndarray, op: np.ndarray, src: GPUSpec,
                         target: GPUSpec, cal: Calibration) -> tuple[Workload, Workload, np.ndarray]:
    """The FP32 convolutions of a move as cuDNN runs them on each GPU (:class:`ConvAlgos` fitted):
    on the source the algorithm its kernel name says, at that algorithm's cost; on the target the
    cost of what the target's architecture picks for the shape (the source's own algorithm on the
    same SM design). Returns both workloads and the rows changed (none without a fit or on the
    source GPU itself)."""
    fit = cal.conv_algos
    none = np.zeros(len(w_src), dtype=bool)
    if fit is None or not fit.cost or src.id == target.id or len(w_src) == 0:
        return w_src, w_tgt, none
    rows = fp32_convolutions(w_src, names, op) & fp32_convolutions(w_tgt, names, op)
    if not rows.any():
        return w_src, w_tgt, none
    codes = np.full(len(w_src), convalgo.OTHER, dtype=np.int8)
    idx = np.flatnonzero(rows)
    codes[idx] = convalgo.algorithms(names[idx])
    f_src = convalgo.source_cost(codes, fit.cost)
    if src.sm_version == target.sm_version:
        f_tgt = f_src
    else:
        f_tgt = np.ones(len(w_src))
        cells = convalgo.shape_cells(w_tgt.m[idx], w_tgt.n[idx], w_tgt.k[idx], fit.width)
        f_tgt[idx] = convalgo.expected_cost(cells, target.arch, fit.choice, fit.cost)
    return with_conv_cost(w_src, rows, f_src), with_conv_cost(w_tgt, rows, f_tgt), rows


def sized_conv_ns(w: Workload, rows: np.ndarray, t_src: np.ndarray, src: GPUSpec, target: GPUSpec,
                  cal: Calibration, measurement: str) -> np.ndarray | None:
    """The FP32 convolutions ``rows`` of a move between SM designs by the campaign's size model
    (:class:`cascade.calibration.ConvSize`): the target's modelled time times the source's measured
    deviation from its own to the power ``beta``; None where no size model is fitted for times of
    the ``measurement`` kind (its floor is the campaign harness's, not a profiler's)."""
    fit = cal.conv_algos.size if cal.conv_algos is not None else None
    if fit is None or fit.measurement != measurement or not rows.any():
        return None
    idx = np.flatnonzero(rows)
    m, n, k, nbytes = w.m[idx], w.n[idx], w.k[idx], w.bytes[idx]

    def model(spec: GPUSpec) -> np.ndarray:
        return convalgo.size_model_log_ns(m, n, k, nbytes, spec.id, sms=float(spec.sms),
                                          fp32_flops=spec.peak_flops("fp32", False),
                                          bandwidth=spec.memory_bandwidth_gbps * 1e9, fit=fit)

    with np.errstate(divide="ignore", invalid="ignore"):
        carried = fit.beta * (np.log(np.asarray(t_src, dtype=np.float64)[idx]) - model(src))
    out = np.full(len(w), np.nan)
    out[idx] = np.exp(model(target) + np.where(np.isfinite(carried), carried, 0.0))
    return out


#: Window kernels: each output gathers a window of inputs (a convolution's receptive field, a
#: pooling window), and the address arithmetic of those gathers runs on the CUDA cores whatever
#: path the multiply-adds take. Per byte moved it is a property of the kernel's kind
#: (:attr:`Calibration.window_simt`, FP32 FLOPs per byte), and it makes a third roof: the GPUs
#: with the most DRAM bandwidth per CUDA-core cycle hit it first. KernelBench's standard 2D
#: convolutions reach 28-40% of a T4's and an A100's bandwidth (64 FP32 lanes per SM; the T4 at
#: its sustained clock) but 53-67% of an A10's, A10G's and L40S's (128 lanes per SM); 3D pooling
#: 33% of an A100's and 82% of an L40S's.
WINDOW_KINDS: tuple[str, ...] = ("conv", "depthwise", "pool")
#: Codes of :func:`window_kinds` (index into :data:`WINDOW_KINDS` + 1; 0: not a window kernel).
NOT_WINDOW = 0


#: A pooling kernel's or operator's name (PyTorch's ``max_pool_forward_nchw``,
#: ``avg_pool2d_out_cuda_frame``, ``adaptive_avg_pool``..., KernelBench's ``Max_Pooling_2D``), not a
#: BERT ``pooler`` (a linear layer and its tanh).
_POOLING = re.compile(r"pooling|(max|avg|average)_?pool|adaptive\w*pool")


def window_kinds(w: Workload, names: np.ndarray) -> np.ndarray:
    """Per kernel: 1 + its index in :data:`WINDOW_KINDS`, 0 for kernels that gather no window.
    A convolution by op or name (:func:`convolutions`), ``depthwise`` where the name says so
    (one input channel per output: nothing to amortise the window over); a 1x1 (``pointwise``)
    convolution is a GEMM, no window; ``pool`` where a memory-class kernel's name says pool."""
    out = np.zeros(len(w), dtype=np.int8)
    if len(w) == 0:
        return out
    # names are read only where they can matter, each distinct one once (a million-kernel table
    # has a few hundred): convolutions among GEMM-family rows without GEMM dims, pooling among
    # memory-class rows
    conv = convolutions(w, names)
    idx = np.flatnonzero(conv)
    if len(idx):
        kind = {n: ("" if "pointwise" in low else "depthwise" if "depthwise" in low and "separable" not in low
                    else "conv") for n in set(names[idx].tolist()) for low in (str(n).lower(),)}
        out[idx] = [WINDOW_KINDS.index(kind[n]) + 1 if kind[n] else 0 for n in names[idx].tolist()]
    idx = np.flatnonzero((opfamilies.work_class(w.family) == opfamilies.MEMORY_CLASS) & ~conv)
    if len(idx):
        pools = {n for n in set(names[idx].tolist()) if _POOLING.search(str(n).lower())}
        if pools:
            hit = np.fromiter((n in pools for n in names[idx].tolist()), dtype=bool, count=len(idx))
            out[idx[hit]] = WINDOW_KINDS.index("pool") + 1
    return out


def window_flops_per_byte(kinds: np.ndarray, per_kind: dict[str, float]) -> np.ndarray:
    """FP32 FLOPs per byte of each kernel's window arithmetic (0 where none or not fitted)."""
    table = np.array([0.0, *(per_kind.get(k, 0.0) for k in WINDOW_KINDS)])
    return table[kinds]


def with_simt_roof(t: KernelTimes, w: Workload, flops_per_byte: np.ndarray, spec: GPUSpec,
                   params: ResolvedParams, cal: Calibration) -> KernelTimes:
    """``t`` with the window roof: ``flops_per_byte`` x bytes at the CUDA cores' FP32 rate (its
    fitted efficiency; a power-limited board's clock settling as for any long compute), where that
    exceeds the DRAM time (it is the memory side's issue rate, not more FLOPs to add)."""
    rate = matmul_simt_flops(spec, "fp32") * params.simt_eff
    simt = flops_per_byte * np.nan_to_num(w.bytes) / rate * 1e9
    simt = simt * clock_slowdown(simt, spec, cal.globals.clock_tau_ns, cal.globals.sustained_clock_scale)
    bound = simt > t.memory_ns
    if not bound.any():
        return t
    memory = np.where(bound, simt, t.memory_ns)
    work = np.where(bound, smooth_max(t.compute_ns, memory, cal.globals.softness), t.work_ns)
    return KernelTimes(compute_ns=t.compute_ns, memory_ns=memory, work_ns=work, fixed_ns=t.fixed_ns,
                       total_ns=t.fixed_ns + work, regime=t.regime)
