"""The work of today's LLM operators (GEMMs by dtype, paged attention, fused MoE, collectives)
on one GPU: FLOPs, bytes, the peak each runs at, and what the target's software would run.

Rows are kernel-table rows (:mod:`cascade.kerneltable`): ``op`` names the operator
(:data:`LLM_OPS`), the LLM columns describe its shape. Everything here is columnar numpy and
free of I/O.

A row's *kernel key* (:func:`keys`) names the measured surface the calibration fits its
efficiency on; its *features* (:func:`features`) are the log2 shape coordinates the surface
interpolates over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

#: Operators the LLM model predicts (``op`` column values).
GEMM, ATTENTION, MOE, COLLECTIVE = "gemm", "attention", "moe", "collective"
LLM_OPS: tuple[str, ...] = (GEMM, ATTENTION, MOE, COLLECTIVE)

#: Weight / math dtypes of LLM GEMMs and MoE layers (``dtype`` column).
LLM_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp8_block", "fp4", "int4", "mxfp4")
#: Collectives (``collective`` column).
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

#: Bytes per weight element, by weight dtype (FP4 / INT4: half a byte plus their scales).
WEIGHT_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4 / (128 * 128),
                                  "fp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32, "int4": 0.5 + 2 / 128}
#: Bytes per activation element the GEMM reads (FP8 / FP4 paths quantise the activation).
ACT_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4 / 128,
                               "fp4": 0.5 + 1 / 16, "mxfp4": 2.0, "int4": 2.0}
#: Tensor-core peak each dtype's math runs at where the GPU has it (weight-only formats
#: dequantise to BF16 and run at its rate; MXFP4 weights with BF16 activations likewise).
MATH_DTYPE: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8", "fp4": "fp4",
                              "mxfp4": "bf16", "int4": "bf16"}
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "": 2.0}


def canonical_dtype(value: str) -> str:
    """An LLM dtype as the tables spell it (``bfloat16`` -> ``bf16``, ``nvfp4`` -> ``fp4``,
    ``int4_wo`` / ``w4a16`` -> ``int4``, ``w4a16_mxfp4`` -> ``mxfp4``, ``half`` -> ``fp16``)."""
    v = value.strip().lower()
    table = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "nvfp4": "fp4", "int4_wo": "int4",
             "w4a16": "int4", "w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "fp4", "float8": "fp8",
             "fp8_e4m3": "fp8", "e4m3": "fp8", "fp8-block": "fp8_block", "int8": "fp8"}
    return table.get(v, v)


@dataclass(frozen=True, slots=True)
class Substitution:
    """What the target's software runs for each row (the requested dtype where it can)."""

    dtype: np.ndarray
    """Weight dtype actually run (object array)."""
    impl: np.ndarray
    """Implementation actually run (a collective's path: ``multimem`` -> ``nccl`` without NVLink SHARP)."""
    kv_dtype: np.ndarray
    """KV-cache dtype actually run."""
    note: np.ndarray
    """Per row: '' where the row runs as asked, else what replaced it (named in predictions)."""


def has_math(spec: GPUSpec, dtype: str) -> bool:
    """Whether the GPU's tensor cores take this math dtype natively."""
    math = MATH_DTYPE.get(dtype, dtype)
    if math == "fp4":
        return spec.tensor_flops("fp4") > 0
    return spec.tensor_flops(math) > 0


def substitute(table: KernelTable, spec: GPUSpec) -> Substitution:
    """The dtype each row runs in on ``spec``, as vLLM / PyTorch would run it there.

    - FP4 weights without FP4 tensor cores (before Blackwell): a weight-only dequantising GEMM
      (Marlin) at the BF16 tensor rate, reading 4-bit weights;
    - FP8 weights without FP8 tensor cores (before Ada / Hopper): weight-only FP8 Marlin at the
      BF16 (FP16) rate, reading 8-bit weights;
    - an FP8 KV cache where the attention kernels take no FP8 (before Ada): BF16 FlashAttention 2
      over a BF16 cache.
    Never a CUDA-core fallback: no deployment runs an LLM layer that way.
    """
    n = len(table)
    dtype = canonical_dtypes(table["dtype"])
    kv = canonical_dtypes(table["kv_dtype"])
    impl = np.asarray(table["impl"], dtype=object).copy()
    note = np.full(n, "", dtype=object)
    fp8 = spec.tensor_flops("fp8") > 0
    fp4 = spec.tensor_flops("fp4") > 0

    def add(mask: np.ndarray, text: np.ndarray | str) -> None:
        joined = np.where(note != "", note + "; ", "") + text
        note[mask] = np.asarray(joined, dtype=object)[mask] if isinstance(joined, np.ndarray) else joined

    if not fp4:
        m4 = dtype == "fp4"
        dtype[m4] = "w4_marlin"
        add(m4, "fp4 weights: weight-only Marlin GEMM at the BF16 tensor rate (no FP4 tensor cores)")
    if not fp8:
        for d in ("fp8", "fp8_block"):
            m8 = dtype == d
            dtype[m8] = "w8_marlin"
            add(m8, f"{d} weights: weight-only FP8 Marlin GEMM at the BF16 tensor rate (no FP8 tensor cores)")
        mkv = kv == "fp8"
        kv[mkv] = "bf16"
        add(mkv, "FP8 KV cache: BF16 FlashAttention 2 (no FP8 attention)")
    if not spec.nvls:
        why = "no NVLink SHARP" if spec.nvlink_gbps else "no NVLink"
        for name in ("multimem", "symm_mem", "trtllm_ar"):
            mm = impl == name
            add(mm, f"{name} all-reduce: NCCL ring / tree ({why})")
            impl[mm] = "nccl"
    return Substitution(dtype=dtype, impl=impl, kv_dtype=kv, note=note)


def canonical_dtypes(values: np.ndarray) -> np.ndarray:
    """:func:`canonical_dtype` of a column, once per distinct value (object array)."""
    col = np.asarray(values, dtype=object)
    if len(col) == 0:
        return np.zeros(0, dtype=object)
    uniq, codes = factorize(col)
    return np.asarray(np.asarray([canonical_dtype(str(u)) for u in uniq], dtype=object)[codes], dtype=object)


_SUB_WEIGHT = {"w4_marlin": 0.5 + 1 / 16, "w8_marlin": 1.0}


def _weight_bytes(d: str) -> float:
    return _SUB_WEIGHT.get(d) or WEIGHT_BYTES.get(d, 2.0)


def _act_bytes(d: str) -> float:
    return 2.0 if d in _SUB_WEIGHT else ACT_BYTES.get(d, 2.0)


def _math(d: str) -> str:
    return "bf16" if d in _SUB_WEIGHT else MATH_DTYPE.get(d, "bf16")


def _col(table: KernelTable, name: str) -> np.ndarray:
    return np.maximum(table[name].astype(np.float64), 0.0)


@dataclass(frozen=True, slots=True)
class Work:
    """Per row: FLOPs, DRAM bytes, interconnect bytes and the tensor peak used (FLOP/s)."""

    flops: np.ndarray
    bytes: np.ndarray
    link_bytes: np.ndarray
    peak_flops: np.ndarray


def work(table: KernelTable, spec: GPUSpec, sub: Substitution | None = None) -> Work:
    """FLOPs and bytes of every LLM row as ``spec`` runs it (after :func:`substitute`)."""
    sub = sub or substitute(table, spec)
    n = len(table)
    op = table["op"]
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    link = np.zeros(n)
    peak = np.full(n, max(spec.tensor_flops("bf16"), spec.tensor_flops("fp16"), spec.simt_flops("fp16")))
    uniq, codes = factorize(sub.dtype)
    wb = np.asarray([_weight_bytes(str(d)) for d in uniq], dtype=np.float64)[codes]
    ab = np.asarray([_act_bytes(str(d)) for d in uniq], dtype=np.float64)[codes]
    mp = np.asarray([spec.tensor_flops(_math(str(d))) or spec.tensor_flops("fp16") or spec.simt_flops("fp16")
                     for d in uniq], dtype=np.float64)[codes]
    # GEMM: out[m, n] = act[m, k] @ w[n, k]^T
    g = op == GEMM
    m, nn, k = _col(table, "m"), _col(table, "n"), _col(table, "k")
    flops[g] = 2 * m[g] * nn[g] * k[g]
    nbytes[g] = m[g] * k[g] * ab[g] + nn[g] * k[g] * wb[g] + 2 * m[g] * nn[g]
    peak[g] = mp[g]
    # attention over a paged KV cache: prefill (``seq`` new tokens, causal, no prefix) or decode
    a = op == ATTENTION
    if a.any():
        b, seq, ctx = _col(table, "batch"), _col(table, "seq"), _col(table, "context")
        h, kvh, d = _col(table, "heads"), _col(table, "kv_heads"), _col(table, "head_dim")
        kvh = np.where(kvh > 0, kvh, h)  # no KV-head count: multi-head attention (one per query head)
        win = _col(table, "window")
        kvb = np.where(sub.kv_dtype == "fp8", 1.0, 2.0)
        ctx = np.where(ctx > 0, ctx, seq)
        span = np.where(win > 0, np.minimum(ctx, win), ctx)
        prefill = table["phase"] == "prefill"
        # causal prefill: each new token attends to half the span on average (the whole window)
        attended = np.where(prefill, np.where(win > 0, np.minimum(seq, win), (seq + 1) / 2), span)
        q_tokens = np.where(prefill, seq, np.maximum(seq, 1))
        fl = 4 * b * h * q_tokens * attended * d
        kv_read = b * np.where(prefill, seq, span) * 2 * kvh * d * kvb
        qo = b * q_tokens * h * d * 2 * 2
        flops[a] = fl[a]
        nbytes[a] = (kv_read + qo + b * q_tokens * 2 * kvh * d * kvb)[a]
        # an FP8 cache's attention runs at its BF16 units' rate (llm-kernels: FP8 / BF16 prefill
        # medians 1.04 on the B200, 1.12 on the H100): its bytes change, not its math
        peak[a] = max(spec.tensor_flops("bf16"), spec.tensor_flops("fp16")) or spec.simt_flops("fp16")
    # fused MoE on one rank: tokens x top-k assignments, the share routed to this rank's experts
    e = op == MOE
    if e.any():
        tok, hid, inter = _col(table, "tokens"), _col(table, "hidden"), _col(table, "inter")
        experts, topk = _col(table, "experts"), np.maximum(_col(table, "topk"), 1)
        tp, ep = np.maximum(_col(table, "tp"), 1), np.maximum(_col(table, "ep"), 1)
        local_e = np.maximum(experts / ep, 1)
        local_i = inter / tp
        rows = tok * topk / ep
        flops[e] = (6 * rows * hid * local_i)[e]
        # experts touched: the expected distinct experts among ``rows`` balanced assignments
        with np.errstate(over="ignore", invalid="ignore"):
            touched = local_e * (1 - np.power(1 - 1 / local_e, rows))
        touched = np.where(np.isfinite(touched), np.minimum(touched, local_e), local_e)
        weights = touched * 3 * hid * local_i * wb
        acts = tok * hid * 2 * 2 + rows * (3 * local_i) * 2 * 2
        nbytes[e] = (weights + acts)[e]
        peak[e] = mp[e]
    # collectives: bytes over the links (ring-equivalent traffic per GPU)
    c = op == COLLECTIVE
    if c.any():
        size = _col(table, "comm_bytes")
        ranks = np.maximum(_col(table, "ranks"), 1)
        kind = table["collective"]
        factor = np.where(kind == "all_reduce", 2 * (ranks - 1) / ranks, (ranks - 1) / ranks)
        link[c] = (size * factor)[c]
        nbytes[c] = (size * 2)[c]
    return Work(flops, nbytes, link, peak)


def link_bandwidth_bps(spec: GPUSpec) -> float:
    """Per-GPU, per-direction bandwidth collectives between GPUs of one box run at: NVLink
    where the board has it, else PCIe."""
    return max(spec.nvlink_gbps if spec.nvlink_gbps > 0 else spec.pcie_gbps, 1.0) * 1e9


def roofline_ns(table: KernelTable, spec: GPUSpec, sub: Substitution | None = None) -> np.ndarray:
    """The time each row's work needs at the GPU's peaks (no fixed cost, no efficiency)."""
    wk = work(table, spec, sub)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(wk.peak_flops > 0, wk.flops / wk.peak_flops, 0.0)
    memory = wk.bytes / spec.bandwidth_bps
    link = wk.link_bytes / link_bandwidth_bps(spec)
    return np.maximum(np.maximum(compute, memory), link) * 1e9


def _log2(x: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(x.astype(np.float64), 1.0))


def keys(table: KernelTable, sub: Substitution) -> np.ndarray:
    """Per row, the surface the calibration fits its efficiency on (object array of strings)."""
    n = len(table)
    if n == 0:
        return np.zeros(0, dtype=object)
    cols = (table["op"], sub.dtype, sub.kv_dtype, table["phase"], np.maximum(table["window"], 0),
            table["distribution"], table["collective"], sub.impl, np.maximum(table["ranks"], 1))
    combo = np.zeros(n, dtype=np.int64)
    values: list[list[object]] = []
    for col in cols:  # one code per distinct combination of the columns a key reads
        uniq, codes = factorize(col)
        values.append(uniq)
        combo = combo * len(uniq) + codes
    combos, back = factorize(combo)
    out = []
    for code in np.asarray(combos, dtype=np.int64).tolist():
        parts = []
        for uniq in reversed(values):
            parts.append(uniq[int(code) % len(uniq)])
            code = int(code) // len(uniq)
        o, d, kv, phase, win, dist, coll, impl, ranks = reversed(parts)
        if o == GEMM:
            out.append(f"gemm|{d}")
        elif o == ATTENTION:
            out.append(f"attention|{phase}|{kv or 'bf16'}|w{int(win)}")  # type: ignore[call-overload]
        elif o == MOE:
            out.append(f"moe|{d}|{dist or 'balanced'}")
        elif o == COLLECTIVE:
            out.append(f"collective|{coll}|{impl or 'nccl'}|{int(ranks)}")  # type: ignore[call-overload]
        else:
            out.append("")
    return np.asarray(np.asarray(out, dtype=object)[back], dtype=object)


def factorize(values: np.ndarray) -> tuple[list[object], np.ndarray]:
    """(distinct values in first-seen order, int64 code per element), one dict pass: a column
    of a million rows of a few dozen values costs no sort."""
    items = np.asarray(values).tolist()
    index: dict[object, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in items), dtype=np.int64, count=len(items))
    return list(index), codes


def features(table: KernelTable) -> np.ndarray:
    """Per row, the log2 shape coordinates its surface interpolates over (5 columns, the
    unused ones 0)."""
    n = len(table)
    out = np.zeros((n, 5))
    op = table["op"]
    g = op == GEMM
    m = np.maximum(table["m"].astype(np.float64), 1.0)
    out[g, 0], out[g, 1], out[g, 2] = _log2(m)[g], _log2(table["n"])[g], _log2(table["k"])[g]
    # the rows the M tiles pad to (16-row MMA fragments, 64-row warpgroup / CTA tiles): m = 33
    # costs like 48 or 64, not like 32 (held-out shapes: H100 FP8 9.2 -> 2.9%, B200 block FP8
    # 17.8 -> 5.9%)
    for j, tile in ((3, 16.0), (4, 64.0)):
        out[g, j] = _log2(np.ceil(m / tile) * tile)[g]
    a = op == ATTENTION
    if a.any():
        prefill = table["phase"] == "prefill"
        length = np.where(prefill, table["seq"], np.where(table["context"] > 0, table["context"], table["seq"]))
        kv_heads = np.where(table["kv_heads"] > 0, table["kv_heads"], table["heads"])
        cols = (table["batch"], length, table["heads"], kv_heads, table["head_dim"])
        for j, c in enumerate(cols):
            out[a, j] = _log2(c)[a]
    e = op == MOE
    if e.any():
        tp, ep = np.maximum(table["tp"], 1), np.maximum(table["ep"], 1)
        cols = (table["tokens"], table["hidden"], table["inter"] / tp, table["experts"] / ep, table["topk"])
        for j, c in enumerate(cols):
            out[e, j] = _log2(np.asarray(c))[e]
    c = op == COLLECTIVE
    out[c, 0] = _log2(table["comm_bytes"])[c]
    return out


#: Feature columns each operator uses (the rest are 0).
FEATURE_DIMS: dict[str, int] = {GEMM: 5, ATTENTION: 5, MOE: 5, COLLECTIVE: 1}
