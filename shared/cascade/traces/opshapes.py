"""Work of a PyTorch op from what the profiler records about it (``record_shapes=True``).

:func:`op_work` maps an aten op's name, ``Input Dims``, ``Input type`` and
``Concrete Inputs`` (its scalar arguments) to GEMM shape, FLOPs, DRAM bytes and
math dtype:

* GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``,
  ``addmv``/``mv``, ``_scaled_mm``, ``_int_mm``): ``flops = 2 batch m n k``,
  bytes = inputs + output.
* Convolutions as implicit GEMMs: forward ``M = N P Q``, ``N = K/g``,
  ``K = C/g R S``; data gradient ``M = N H W``, ``N = C/g``, ``K = K/g R S``;
  weight gradient ``M = K/g``, ``N = C/g R S``, ``K = N P Q`` (``batch`` = groups),
  each ``2 g M N K`` FLOPs; ``convolution_backward`` carries both passes its
  ``output_mask`` asks for.
* Attention (SDPA, flash, memory-efficient, cuDNN; forward and backward):
  ``batch = B H``, ``m = Lq``, ``n = Lk``, ``k = D``; forward
  ``4 B H Lq Lk D`` FLOPs (half when causal), backward 2.5x forward; bytes =
  q, k, v, output (and their gradients).
* Norms, softmax, embedding/index, elementwise, reductions, copies and casts:
  bytes from tensor sizes and each tensor's own element size (in-place ops read
  and write their first input; elementwise outputs have the broadcast shape),
  FLOPs a small per-element count.

Everything here is pure and tolerant: any unexpected value (a non-list dim, a
negative size) gives ``None`` rather than an exception.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, TypeGuard

import msgspec

#: PyTorch scalar type names (``Input type``) -> element size in bytes.
ELEMENT_BYTES: dict[str, int] = {
    "float": 4, "c10::Float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "long int": 8, "long": 8, "int": 4,
    "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::qint8": 1, "c10::quint8": 1, "c10::qint32": 4, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::complex<c10::Half>": 4, "unsigned int": 4,
    "unsigned short": 2, "unsigned long": 8,
}
#: PyTorch scalar type names -> Cascade math dtype (``KernelTable`` ``dtype``).
MATH_DTYPES: dict[str, str] = {
    "float": "fp32", "c10::Float": "fp32", "double": "fp64", "c10::Half": "fp16",
    "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8",
    "c10::qint8": "int8", "c10::complex<float>": "fp32", "c10::complex<double>": "fp64",
}

#: Op kinds :func:`op_work` reports (``OpWork.kind``).
KINDS = ("gemm", "conv", "attention", "norm", "softmax", "embedding", "elementwise", "reduce",
         "copy")


class Pass(msgspec.Struct, frozen=True, kw_only=True):
    """One GEMM-like pass of an op (a convolution backward op has up to two)."""

    name: str
    """``fwd``, ``dgrad`` or ``wgrad`` (attention: ``fwd`` / ``bwd``)."""
    batch: int
    m: int
    n: int
    k: int
    flops: float
    bytes: float


class OpWork(msgspec.Struct, frozen=True, kw_only=True):
    """What one op invocation computes and moves."""

    op: str
    """Op name without the ``aten::`` prefix."""
    kind: str
    """One of :data:`KINDS`."""
    dtype: str = ""
    """Math dtype (fp32, fp16, bf16, fp8, int8, fp64) of the op's first floating input."""
    flops: float = math.nan
    bytes: float = math.nan
    batch: int = -1
    m: int = -1
    n: int = -1
    k: int = -1
    passes: tuple[Pass, ...] = ()
    """GEMM-like passes (convolution backward: dgrad and/or wgrad; others: one or none)."""


def _numel(dims: Any) -> int | None:
    if not isinstance(dims, list):
        return None
    n = 1
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            return None
        n *= d
    return n


def _is_shape(dims: Any) -> TypeGuard[list[int]]:
    return isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                          for d in dims)


def _tensors(dims: Sequence[Any], types: Sequence[Any]) -> list[tuple[list[int], str]]:
    """(shape, type) of every tensor argument (TensorList elements flattened)."""
    out: list[tuple[list[int], str]] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if t == "TensorList" or (isinstance(d, list) and d and all(isinstance(x, list) for x in d)):
            for sub in d if isinstance(d, list) else []:
                if _is_shape(sub) and sub != []:
                    out.append((sub, t if t in ELEMENT_BYTES else ""))
            continue
        if _is_shape(d) and (d != [] or t in ELEMENT_BYTES):
            if t in ("Scalar", "ScalarList", "") and d == []:
                continue
            out.append((d, t))
    return out


def _esize(t: str, default: int) -> int:
    return ELEMENT_BYTES.get(t, default)


def _math_dtype(types: Sequence[Any]) -> str:
    for t in types:
        if isinstance(t, str) and t in MATH_DTYPES:
            return MATH_DTYPES[t]
    return ""


def _bytes_of(tensors: list[tuple[list[int], str]], default: int) -> float:
    total = 0
    for shape, t in tensors:
        n = _numel(shape)
        if n is not None:
            total += n * _esize(t, default)
    return float(total)


def parse_scalar(text: Any) -> Any:
    """A ``Concrete Inputs`` cell as a Python value: int, float, bool, list of ints or of bools
    (an ``output_mask``), or None."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    if not s:
        return None
    if s in ("True", "False"):
        return s == "True"
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        if not inner:
            return []
        parts = [x.strip() for x in inner.split(",")]
        if all(x in ("True", "False") for x in parts):
            return [x == "True" for x in parts]
        try:
            return [int(x) for x in parts]
        except ValueError:
            return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _arg(concrete: Sequence[Any], i: int) -> Any:
    return parse_scalar(concrete[i]) if i < len(concrete) else None


def _pair(v: Any, default: int, n: int = 2) -> list[int]:
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return (v * n)[:n] if len(v) == 1 else list(v[:n]) + [v[-1]] * max(0, n - len(v))
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n
    return [default] * n


def _strip(name: str) -> str:
    for prefix in ("aten::", "torch::", "c10d::"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


# ---- GEMMs -------------------------------------------------------------------------------------
_GEMM_OPS = {"mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "matmul", "linear", "addmv",
             "mv", "_scaled_mm", "_int_mm", "addbmm", "dot", "vdot", "_mm_plus_mm"}


def _gemm_dims(op: str, dims: Sequence[Any]) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of a GEMM op from its input dims."""
    def sh(i: int) -> list[int] | None:
        return dims[i] if i < len(dims) and _is_shape(dims[i]) else None

    if op in ("mm", "_scaled_mm", "_int_mm"):
        a, b = sh(0), sh(1)
        if a and b and len(a) == 2 and len(b) == 2:
            return 1, a[0], b[1], a[1]
    elif op in ("addmm", "_addmm_activation"):
        a, b = sh(1), sh(2)
        if a and b and len(a) == 2 and len(b) == 2:
            return 1, a[0], b[1], a[1]
    elif op in ("bmm", "baddbmm", "addbmm"):
        a, b = (sh(0), sh(1)) if op == "bmm" else (sh(1), sh(2))
        if a and b and len(a) == 3 and len(b) == 3:
            return a[0], a[1], b[2], a[2]
    elif op == "linear":
        x, w = sh(0), sh(1)
        if x and w and len(w) == 2 and len(x) >= 1:
            return 1, math.prod(x[:-1]), w[0], x[-1]
    elif op in ("mv", "addmv"):
        a = sh(0) if op == "mv" else sh(1)
        if a and len(a) == 2:
            return 1, a[0], 1, a[1]
    elif op in ("dot", "vdot"):
        a = sh(0)
        if a and len(a) == 1:
            return 1, 1, 1, a[0]
    elif op == "matmul":
        a, b = sh(0), sh(1)
        if not a or not b:
            return None
        if len(a) == 1:
            a = [1, a[0]]
        if len(b) == 1:
            b = [b[0], 1]
        batch_a, batch_b = a[:-2], b[:-2]
        if len(a) >= 2 and len(b) >= 2:
            lead = max(len(batch_a), len(batch_b))
            pa = [1] * (lead - len(batch_a)) + batch_a
            pb = [1] * (lead - len(batch_b)) + batch_b
            batch = math.prod(max(x, y) for x, y in zip(pa, pb, strict=True))
            if len(b) == 2 and batch_a:  # [..., m, k] @ [k, n] is one GEMM of prod(...) * m rows
                return 1, math.prod(a[:-1]), b[-1], a[-1]
            return batch, a[-2], b[-1], a[-1]
    return None


def _gemm(op: str, dims: Sequence[Any], types: Sequence[Any]) -> OpWork | None:
    shape = _gemm_dims(op, dims)
    dtype = _math_dtype(types)
    if shape is None:
        return None
    b, m, n, k = shape
    if min(b, m, n, k) < 0:
        return None
    es = 2 if dtype in ("fp16", "bf16") else 1 if dtype in ("fp8", "int8") else 4
    out_es = 4 if op == "_int_mm" else (2 if dtype == "fp8" else es)
    flops = 2.0 * b * m * n * k
    nbytes = _bytes_of(_tensors(dims, types), es) + float(b * m * n * out_es)
    return OpWork(op=op, kind="gemm", dtype=dtype, flops=flops, bytes=nbytes, batch=b, m=m, n=n, k=k,
                  passes=(Pass(name="fwd", batch=b, m=m, n=n, k=k, flops=flops, bytes=nbytes),))


# ---- convolutions ------------------------------------------------------------------------------
# op -> (index of stride, padding, dilation, transposed, groups) in the op's arguments
_CONV_ARGS: dict[str, tuple[int, int, int, int, int]] = {
    "convolution": (3, 4, 5, 6, 8), "_convolution": (3, 4, 5, 6, 8),
    "conv1d": (3, 4, 5, -1, 6), "conv2d": (3, 4, 5, -1, 6), "conv3d": (3, 4, 5, -1, 6),
    "cudnn_convolution": (3, 2, 4, -1, 5), "cudnn_convolution_relu": (3, 4, 5, -1, 6),
    "cudnn_convolution_add_relu": (5, 6, 7, -1, 8), "mkldnn_convolution": (4, 3, 5, -1, 6),
    "_convolution_mode": (3, 4, 5, -1, 6), "conv_transpose2d": (3, 4, 7, -2, 6),
    "conv_transpose1d": (3, 4, 7, -2, 6), "conv_transpose3d": (3, 4, 7, -2, 6),
    "cudnn_convolution_transpose": (4, 2, 5, -2, 6), "slow_conv2d_forward": (4, 5, -1, -1, -1),
    "_slow_conv2d_forward": (4, 5, -1, -1, -1), "thnn_conv2d": (4, 5, -1, -1, -1),
}


def _conv_passes(x: list[int], w: list[int], stride: list[int], pad: list[int], dil: list[int],
                 groups: int, transposed: bool, es: int, which: tuple[str, ...],
                 grad_out: list[int] | None = None) -> list[Pass]:
    nd = len(x) - 2
    if nd < 1 or len(w) != len(x) or groups < 1:
        return []
    nb, c = x[0], x[1]
    spatial_in = x[2:]
    ksz = w[2:]
    if transposed:  # weight [C_in, K/g, ...]: the data gradient of the forward conv
        k_out = w[1] * groups
        out_sp = [(i - 1) * s - 2 * p + d * (r - 1) + 1
                  for i, s, p, d, r in zip(spatial_in, stride, pad, dil, ksz, strict=False)]
    else:
        k_out = w[0]
        if grad_out is not None and len(grad_out) == len(x):
            out_sp = grad_out[2:]
        else:
            out_sp = [(i + 2 * p - d * (r - 1) - 1) // max(s, 1) + 1
                      for i, s, p, d, r in zip(spatial_in, stride, pad, dil, ksz, strict=False)]
    if any(o <= 0 for o in out_sp) or len(out_sp) != nd:
        return []
    npq = nb * math.prod(out_sp)
    nhw = nb * math.prod(spatial_in)
    x_bytes = float(math.prod(x) * es)
    w_bytes = float(math.prod(w) * es)
    y_bytes = float(nb * k_out * math.prod(out_sp) * es)
    every = x_bytes + w_bytes + y_bytes
    taps = math.prod(ksz)
    # Every pass multiplies each weight tap with each pixel of the low-resolution side once: a
    # convolution's forward, data and weight gradient are the same FLOPs (as PyTorch's flop
    # counter and KernelBench count them). The high-resolution side's implicit GEMM (a strided
    # convolution's data gradient, a transposed one's forward) reduces over the taps that land on
    # a pixel, a 1 / stride^d share of them, not over all of them.
    if transposed:  # x is the low-resolution side; the weight is [C_in, K/g, ...]
        low, high, c_low, c_high = nhw, npq, c // groups, k_out // groups
    else:
        low, high, c_low, c_high = npq, nhw, k_out // groups, c // groups
    landing = c_low * taps * low / max(high, 1)  # the high side's reduction per output element
    to_low = (low, c_low, c_high * taps, float(c_high * taps))
    to_high = (high, c_high, max(1, round(landing)), landing)
    grad_w = (c_low, c_high * taps, low, float(low)) if not transposed else (c_high, c_low * taps, low, float(low))
    plain = {"fwd": to_low, "dgrad": to_high, "wgrad": grad_w}
    shapes = plain if not transposed else {"fwd": to_high, "dgrad": to_low, "wgrad": grad_w}
    out = []
    for name in which:
        m, n, k, k_exact = shapes[name]
        out.append(Pass(name=name, batch=groups, m=m, n=n, k=k, flops=2.0 * groups * m * n * k_exact,
                        bytes=every))
    return out


def _conv(op: str, dims: Sequence[Any], types: Sequence[Any], concrete: Sequence[Any]) -> OpWork | None:
    dtype = _math_dtype(types)
    es = 2 if dtype in ("fp16", "bf16") else 1 if dtype in ("fp8", "int8") else 4
    if op in ("convolution_backward", "cudnn_convolution_backward",
              "convolution_backward_overrideable"):
        if op == "cudnn_convolution_backward":  # (self, grad_output, weight, padding, stride, ...)
            xi, gi, wi, si, pi, di, ti, gri, mi = 0, 1, 2, 4, 3, 5, -1, 6, 9
        else:  # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
            #   output_padding, groups, output_mask)
            gi, xi, wi, si, pi, di, ti, gri, mi = 0, 1, 2, 4, 5, 6, 7, 9, 10
        go = dims[gi] if gi < len(dims) else None
        x = dims[xi] if xi < len(dims) else None
        w = dims[wi] if wi < len(dims) else None
        if not (_is_shape(go) and _is_shape(x) and _is_shape(w)):
            return None
        mask = _arg(concrete, mi)
        which: list[str] = []
        flags = [bool(v) for v in mask] if isinstance(mask, list) else []
        if not flags:
            flags = [True, True]
        if flags[0]:
            which.append("dgrad")
        if len(flags) > 1 and flags[1]:
            which.append("wgrad")
        nd = len(x) - 2
        groups = _arg(concrete, gri)
        transposed = bool(_arg(concrete, ti)) if ti >= 0 else False
        passes = _conv_passes(x, w, _pair(_arg(concrete, si), 1, nd), _pair(_arg(concrete, pi), 0, nd),
                              _pair(_arg(concrete, di), 1, nd),
                              groups if isinstance(groups, int) and groups > 0 else 1, transposed,
                              es, tuple(which), grad_out=go)
    else:
        idx = _CONV_ARGS.get(op)
        if idx is None:
            return None
        si, pi, di, ti, gri = idx
        x = dims[0] if dims else None
        w = dims[1] if len(dims) > 1 else None
        if not (_is_shape(x) and _is_shape(w)):
            return None
        nd = len(x) - 2
        groups = _arg(concrete, gri) if gri >= 0 else 1
        transposed = ti == -2 or (ti >= 0 and bool(_arg(concrete, ti)))
        passes = _conv_passes(x, w, _pair(_arg(concrete, si), 1, nd) if si >= 0 else [1] * nd,
                              _pair(_arg(concrete, pi), 0, nd) if pi >= 0 else [0] * nd,
                              _pair(_arg(concrete, di), 1, nd) if di >= 0 else [1] * nd,
                              groups if isinstance(groups, int) and groups > 0 else 1, transposed,
                              es, ("fwd",))
    if not passes:
        return None
    first = passes[0]
    return OpWork(op=op, kind="conv", dtype=dtype, flops=sum(p.flops for p in passes),
                  bytes=sum(p.bytes for p in passes), batch=first.batch, m=first.m, n=first.n,
                  k=first.k, passes=tuple(passes))


# ---- attention ---------------------------------------------------------------------------------
# op -> (layout, q index, k index, v index, is_causal index (-1: none), custom-mask index, backward)
# layout "bhld": [..., H, L, D]; "blhd": [B, L, H, D] (the flash / efficient kernels' own ops)
_ATTN: dict[str, tuple[str, int, int, int, int, int, bool]] = {
    "scaled_dot_product_attention": ("bhld", 0, 1, 2, 5, -1, False),
    "_scaled_dot_product_flash_attention": ("bhld", 0, 1, 2, 4, -1, False),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhld", 0, 1, 2, 4, -1, False),
    "_scaled_dot_product_efficient_attention": ("bhld", 0, 1, 2, 6, -1, False),
    "_scaled_dot_product_cudnn_attention": ("bhld", 0, 1, 2, 6, -1, False),
    "_scaled_dot_product_fused_attention_overrideable": ("bhld", 0, 1, 2, 5, -1, False),
    "_flash_attention_forward": ("blhd", 0, 1, 2, 8, -1, False),
    "_efficient_attention_forward": ("blhd", 0, 1, 2, -1, 9, False),
    "_cudnn_attention_forward": ("bhld", 0, 1, 2, 9, -1, False),
    "_scaled_dot_product_flash_attention_backward": ("bhld", 1, 2, 3, 11, -1, True),
    "_scaled_dot_product_efficient_attention_backward": ("bhld", 1, 2, 3, 11, -1, True),
    "_scaled_dot_product_cudnn_attention_backward": ("bhld", 1, 2, 3, 12, -1, True),
    "_flash_attention_backward": ("blhd", 1, 2, 3, 11, -1, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": ("bhld", 1, 2, 3, 7, -1, True),
    "_efficient_attention_backward": ("blhd", 1, 2, 3, -1, 14, True),
    "_cudnn_attention_backward": ("bhld", 1, 2, 3, 14, -1, True),
}


def _attention(op: str, dims: Sequence[Any], types: Sequence[Any],
               concrete: Sequence[Any]) -> OpWork | None:
    layout, qi, ki, vi, ci, mi, backward = _ATTN[op]

    def sh(i: int) -> list[int] | None:
        return dims[i] if i < len(dims) and _is_shape(dims[i]) and len(dims[i]) >= 2 else None

    q, kk, v = sh(qi), sh(ki), sh(vi)
    if q is None or kk is None or v is None:
        return None
    if layout == "blhd":
        if len(q) != 4 or len(kk) != 4:
            return None
        b, lq, h, d = q
        lk = kk[1]
        dv = v[3] if len(v) == 4 else d
    else:
        lq, d = q[-2], q[-1]
        lk = kk[-2]
        dv = v[-1]
        b, h = math.prod(q[:-3]) if len(q) > 3 else 1, q[-3] if len(q) >= 3 else 1
    causal = False
    if ci >= 0:
        causal = _arg(concrete, ci) is True
    elif mi >= 0:
        causal = _arg(concrete, mi) in (1, 2)
    dtype = _math_dtype(types)
    es = 2 if dtype in ("fp16", "bf16") else 1 if dtype == "fp8" else 4
    fwd_flops = 2.0 * b * h * lq * lk * (d + dv)
    if causal:
        fwd_flops *= 0.5
    io = float(b * h * (lq * d + lk * d + lk * dv + lq * dv) * es)
    flops = 2.5 * fwd_flops if backward else fwd_flops
    nbytes = 2.0 * io if backward else io
    name = "bwd" if backward else "fwd"
    bh = b * h
    return OpWork(op=op, kind="attention", dtype=dtype, flops=flops, bytes=nbytes, batch=bh, m=lq,
                  n=lk, k=d, passes=(Pass(name=name, batch=bh, m=lq, n=lk, k=d, flops=flops,
                                          bytes=nbytes),))


# ---- memory-class ops --------------------------------------------------------------------------
_NORM_OPS = {"layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm",
             "native_group_norm", "batch_norm", "native_batch_norm", "cudnn_batch_norm",
             "_batch_norm_impl_index", "_native_batch_norm_legit",
             "_native_batch_norm_legit_no_training", "instance_norm", "_batch_norm_with_update",
             "_batch_norm_no_update"}
_NORM_BWD_OPS = {"native_layer_norm_backward", "_fused_rms_norm_backward",
                 "native_group_norm_backward", "native_batch_norm_backward",
                 "cudnn_batch_norm_backward", "_batch_norm_impl_index_backward",
                 "batch_norm_backward"}
_SOFTMAX_OPS = {"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
                "_masked_softmax"}
_SOFTMAX_BWD_OPS = {"_softmax_backward_data", "_log_softmax_backward_data",
                    "_masked_softmax_backward"}
_EMBEDDING_OPS = {"embedding", "index_select", "embedding_bag", "_embedding_bag", "gather",
                  "index", "take", "embedding_dense_backward", "index_add_", "index_put_",
                  "scatter", "scatter_", "scatter_add_", "scatter_add", "_index_put_impl_"}
_COPY_OPS = {"copy_", "_to_copy", "to", "clone", "contiguous", "cat", "_cat", "stack", "type_as",
             "_copy_from", "_copy_from_and_resize", "fill_", "zero_", "zeros_like", "ones_like",
             "full_like", "zeros", "ones", "full", "pad", "constant_pad_nd", "flip", "roll",
             "repeat", "tril", "triu", "where"}
_REDUCE_OPS = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any",
               "norm", "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "prod",
               "logsumexp", "topk", "sort", "cumsum", "cross_entropy_loss", "nll_loss",
               "nll_loss_forward", "nll_loss_backward", "_fused_adam_", "_fused_adamw_",
               "count_nonzero", "nonzero", "unique", "_unique2"}
#: Ops that never launch work of their own (views, metadata): no work, whatever the dims.
VIEW_OPS = frozenset({
    "view", "reshape", "_unsafe_view", "as_strided", "slice", "select", "t", "transpose",
    "permute", "expand", "expand_as", "unsqueeze", "squeeze", "detach", "alias", "empty",
    "empty_like", "empty_strided", "resize_", "lift_fresh", "size", "stride", "numel",
    "is_nonzero", "result_type", "split", "chunk", "unbind", "narrow", "view_as", "flatten",
    "unflatten", "_reshape_alias", "set_", "split_with_sizes", "movedim", "diagonal",
    "_has_compatible_shallow_copy_type", "record_stream", "broadcast_tensors",
})


def _broadcast(shapes: list[list[int]]) -> list[int] | None:
    if not shapes:
        return None
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        size = 1
        for s in shapes:
            j = i - (nd - len(s))
            if j >= 0 and s[j] != 1:
                if size not in (1, s[j]):
                    return None
                size = s[j]
        out.append(size)
    return out


#: Where a batch-statistics norm's ``training`` flag sits in its arguments (``Concrete Inputs``).
_TRAINING_ARG = {"native_batch_norm": 5, "cudnn_batch_norm": 5, "batch_norm": 5, "_batch_norm_impl_index": 5,
                 "instance_norm": 5, "_native_batch_norm_legit": 5}
#: Where a norm backward's training flag (batch norms) sits.
_BWD_TRAINING_ARG = {"native_batch_norm_backward": 7, "batch_norm_backward": 7,
                     "_batch_norm_impl_index_backward": 8}
#: Where a row-norm backward's ``output_mask`` sits (its weight / bias gradients: a second pass).
_BWD_MASK_ARG = {"native_layer_norm_backward": 7, "_fused_rms_norm_backward": 5}


def _flag(concrete: Sequence[Any], i: int) -> bool | None:
    v = _arg(concrete, i)
    return v if isinstance(v, bool) else None


def _mask(concrete: Sequence[Any], i: int) -> list[bool] | None:
    v = _arg(concrete, i)
    return v if isinstance(v, list) and all(isinstance(x, bool) for x in v) else None


def _statistics_pass(op: str, dims: Sequence[Any], concrete: Sequence[Any]) -> bool:
    """Whether a norm reads its input twice: statistics over more than one block holds (a batch
    norm's per-channel batch statistics, a group norm's groups) are one kernel (a reduction over
    the whole tensor), the normalisation a second that reads the input again (PyTorch's
    ``batch_norm_collect_statistics`` then ``batch_norm_elemt``, ``RowwiseMoments`` then the
    group norm's apply kernel; cuDNN's batch norm likewise). A layer or RMS norm's row fits one
    block, which reads it once. A batch norm in eval mode (running statistics) reads it once;
    one whose mode the trace does not say is taken as one read."""
    if op in ("native_group_norm", "group_norm", "_batch_norm_with_update"):
        return True
    if op == "_batch_norm_no_update":  # batch statistics where no running ones are given
        return not (len(dims) > 3 and isinstance(dims[3], list) and len(dims[3]) > 0)
    if op == "_native_batch_norm_legit" and 0 < len(concrete) <= 6:  # the no_stats overload
        return _flag(concrete, 3) is True
    i = _TRAINING_ARG.get(op)
    return i is not None and _flag(concrete, i) is True


def _reduction_pass(op: str, concrete: Sequence[Any]) -> bool:
    """Whether a norm's backward reads ``grad_out`` and the input twice (five streams, not
    three): a batch or group norm in training reduces over them (``batch_norm_backward_reduce``)
    before the kernel that writes the input gradient reads them again; a layer or RMS norm's
    weight and bias gradients are a second, column-wise kernel over the same two."""
    if op in ("native_group_norm_backward", "cudnn_batch_norm_backward"):
        return True
    if op in _BWD_TRAINING_ARG:
        return _flag(concrete, _BWD_TRAINING_ARG[op]) is True
    mask = _mask(concrete, _BWD_MASK_ARG[op]) if op in _BWD_MASK_ARG else None
    return mask is not None and any(mask[1:])


def _memory_op(op: str, dims: Sequence[Any], types: Sequence[Any],
               concrete: Sequence[Any]) -> OpWork | None:
    tensors = _tensors(dims, types)
    if not tensors:
        return None
    dtype = _math_dtype(types)
    default = 4
    first_shape, first_t = tensors[0]
    first_n = _numel(first_shape) or 0
    first_b = float(first_n * _esize(first_t, default))
    inputs = _bytes_of(tensors, default)
    if op in _NORM_OPS:
        params = inputs - first_b
        reads = 2.0 if _statistics_pass(op, dims, concrete) else 1.0
        return OpWork(op=op, kind="norm", dtype=dtype, flops=8.0 * first_n,
                      bytes=(reads + 1.0) * first_b + params)
    if op in _NORM_BWD_OPS:
        streams = 5.0 if _reduction_pass(op, concrete) else 3.0
        return OpWork(op=op, kind="norm", dtype=dtype, flops=12.0 * first_n,
                      bytes=streams * first_b + 2.0 * (inputs - 2.0 * first_b if inputs > 2 * first_b else 0))
    if op in _SOFTMAX_OPS:
        return OpWork(op=op, kind="softmax", dtype=dtype, flops=5.0 * first_n, bytes=2.0 * first_b)
    if op in _SOFTMAX_BWD_OPS:
        return OpWork(op=op, kind="softmax", dtype=dtype, flops=3.0 * first_n, bytes=3.0 * first_b)
    if op in _EMBEDDING_OPS:
        if op in ("embedding", "index_select") and len(tensors) >= 2:
            table_shape, table_t = tensors[0]
            index_shape, index_t = tensors[1]
            rows = _numel(index_shape) or 0
            if op == "index_select":
                dim = _arg(concrete, 1)
                d = dim if isinstance(dim, int) and -len(table_shape) <= dim < len(table_shape) else 0
                width = (_numel(table_shape) or 0) // max(table_shape[d], 1) if table_shape else 0
            else:
                width = table_shape[-1] if table_shape else 0
            row_b = rows * width * _esize(table_t, default)
            return OpWork(op=op, kind="embedding", dtype=dtype, flops=0.0,
                          bytes=2.0 * row_b + rows * _esize(index_t, 8))
        return OpWork(op=op, kind="embedding", dtype=dtype, flops=0.0, bytes=2.0 * inputs)
    if op in _COPY_OPS or op.startswith("fill"):
        if op in ("copy_", "_copy_from") and len(tensors) >= 2:
            return OpWork(op=op, kind="copy", dtype=dtype, flops=0.0, bytes=inputs)
        if op in ("fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like",
                  "full_like"):
            return OpWork(op=op, kind="copy", dtype=dtype, flops=0.0, bytes=first_b)
        return OpWork(op=op, kind="copy", dtype=dtype, flops=0.0, bytes=2.0 * inputs)
    if op in _REDUCE_OPS or op.endswith("_backward") and "loss" in op:
        return OpWork(op=op, kind="reduce", dtype=dtype, flops=float(first_n),
                      bytes=inputs)
    # elementwise: inputs + output of the broadcast shape (in place: output is the first input)
    shapes = [s for s, _ in tensors]
    out = _broadcast(shapes)
    out_n = _numel(out) if out is not None else first_n
    out_b = float((out_n or 0) * _esize(first_t, default))
    inplace = op.endswith("_") and not op.endswith("__")
    nbytes = inputs + (first_b if inplace else out_b)
    return OpWork(op=op, kind="elementwise", dtype=dtype, flops=float(out_n or 0), bytes=nbytes)


def op_work(name: str, dims: Any, types: Any = None, concrete: Any = None) -> OpWork | None:
    """The work of one op from its profiler record; None when it is not known or does no work.

    ``name``: the cpu_op name (``aten::addmm``); ``dims``: ``args["Input Dims"]``;
    ``types``: ``args["Input type"]``; ``concrete``: ``args["Concrete Inputs"]``.
    """
    if not isinstance(name, str) or not isinstance(dims, list):
        return None
    op = _strip(name)
    types = types if isinstance(types, list) else []
    concrete = concrete if isinstance(concrete, list) else []
    try:
        if op in VIEW_OPS:
            return None
        if op in _GEMM_OPS:
            return _gemm(op, dims, types)
        if op in _CONV_ARGS or op in ("convolution_backward", "cudnn_convolution_backward",
                                      "convolution_backward_overrideable"):
            return _conv(op, dims, types, concrete)
        if op in _ATTN:
            return _attention(op, dims, types, concrete)
        if not name.startswith("aten::"):
            return None
        return _memory_op(op, dims, types, concrete)
    except (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError):
        return None


_SPLIT_NAME = re.compile(r"splitk|split_k_reduce|nchwtonhwc|nhwctonchw|elementwise_kernel|fill_kernel|"
                         r"memset|transpose_kernel|permute_kernel|copy_kernel|convert_kernel|"
                         r"reduce_kernel", re.IGNORECASE)
_DGRAD = re.compile(r"dgrad|bwd_data|backward_data|data_grad|convolve_dgrad", re.IGNORECASE)
_WGRAD = re.compile(r"wgrad|bwd_filter|backward_filter|weight_grad|convolve_wgrad", re.IGNORECASE)


def is_helper_kernel(kernel_name: str) -> bool:
    """A kernel a GEMM/conv/attention op launches besides its main one (split-K reduction,
    layout transform, bias or fill kernel)."""
    return bool(_SPLIT_NAME.search(kernel_name))


def pass_of_kernel(kernel_name: str) -> str:
    """``dgrad``, ``wgrad`` or '' from a convolution kernel's name."""
    if _DGRAD.search(kernel_name):
        return "dgrad"
    if _WGRAD.search(kernel_name):
        return "wgrad"
    return ""
