"""Re-shape the kernels of one engine step to another step shape.

Used to extrapolate the step-time model past its calibration range with a
kernel model: the reference step's kernels are re-shaped to the requested
(tokens, context, batch) and handed to the caller's ``predict_table``.

Rules by ``op`` (case-insensitive):

- GEMMs (linear, matmul, mm, addmm, gemm, dense): GEMM ``m`` is the tokens in
  the step, so it scales with tokens; FLOPs scale with ``m``; bytes are the
  weights (``n * k * dtype size``, constant) plus activations (the rest, scale
  with ``m``). Without ``n``/``k`` the bytes are taken as weights (constant).
- Attention (attention, sdpa, flash*, paged*, bmm, softmax over scores):
  FLOPs scale with tokens x context; bytes (dominated by reading the KV
  cache) scale with sequences x context; GEMM ``batch`` scales with sequences
  and ``m`` with new tokens per sequence.
- Everything else with an op name (norms, activations, elementwise, rope,
  embedding, sampling...): FLOPs, bytes and ``m`` scale with tokens.
- Rows without an op name keep their shape (nothing is known about them).

Rows whose shape changed get ``duration_ns`` = NaN (the measured duration no
longer applies; the original is kept in ``source_duration_ns``) and their
``step_tokens`` / ``step_context`` set to the new shape.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable

GEMM_OPS = frozenset({"linear", "matmul", "mm", "addmm", "gemm", "dense", "gemv", "qkv_proj",
                      "o_proj", "gate_up_proj", "down_proj", "lm_head"})
ATTENTION_PREFIXES = ("attention", "attn", "sdpa", "flash", "paged", "bmm",
                      "scaled_dot_product")

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "fp64": 8}


def step_shape(table: KernelTable, kind: str) -> tuple[int, int, int]:
    """(tokens, context, sequences) of the step the table's rows belong to."""
    tokens = table["step_tokens"]
    context = table["step_context"]
    if len(table) == 0 or np.max(tokens) < 1:
        raise ValidationError("reference kernels need step_tokens >= 1", field="step_tokens")
    ntok = int(np.max(tokens))
    nctx = int(np.max(context)) if np.max(context) >= 1 else ntok
    seqs = ntok if kind == "decode" else 1
    return ntok, nctx, seqs


def _is_attention(op: str) -> bool:
    return op.startswith(ATTENTION_PREFIXES)


def reshape_kernels(table: KernelTable, tokens: int, context: int, batch: int,
                    *, kind: str | None = None) -> KernelTable:
    """Copy of ``table`` (the kernels of one step) re-shaped to ``tokens`` new tokens over
    ``batch`` sequences at ``context`` tokens each after the step.

    The source shape is read from the rows' ``step_tokens``/``step_context`` (and
    ``step_kind``, or ``kind``, for the number of sequences).
    """
    for name, value in (("tokens", tokens), ("context", context), ("batch", batch)):
        if value < 1:
            raise ValidationError("must be >= 1", field=name)
    if len(table) == 0:
        return table.take(np.zeros(0, dtype=bool))
    if kind is None:
        kinds = [k for k in table["step_kind"] if k]
        kind = kinds[0] if kinds else "prefill"
    src_tok, src_ctx, src_seq = step_shape(table, kind)
    s_tok = tokens / src_tok
    s_att = (tokens * context) / (src_tok * src_ctx)
    s_kv = (batch * context) / (src_seq * src_ctx)
    s_seq = batch / src_seq
    s_tok_per_seq = (tokens / batch) / (src_tok / src_seq)

    out = KernelTable(dict(table.as_dict()), n=len(table))
    ops = np.array([str(o).lower() for o in table["op"]], dtype=object)
    m = table["m"].astype(float)
    n = table["n"].astype(float)
    k = table["k"].astype(float)
    flops = table["flops"].astype(float).copy()
    nbytes = table["bytes"].astype(float).copy()
    new_m = table["m"].copy()
    new_batch = table["batch"].copy()
    esize = np.array([DTYPE_BYTES.get(str(d), 2) for d in table["dtype"]], dtype=float)

    is_gemm = np.array([o in GEMM_OPS for o in ops], dtype=bool)
    is_att = np.array([_is_attention(o) for o in ops], dtype=bool) & ~is_gemm
    is_other = (ops != "") & ~is_gemm & ~is_att

    # GEMMs: m follows tokens; weights constant, activations scale.
    g = is_gemm
    m_known = g & (m > 0)
    new_m[m_known] = np.maximum(1, np.rint(m[m_known] * s_tok)).astype(np.int64)
    m_ratio = np.where(m_known, new_m / np.where(m > 0, m, 1), s_tok)
    flops[g] = flops[g] * m_ratio[g]
    weights = np.where((n > 0) & (k > 0), n * k * esize, np.nan)
    w = np.where(np.isnan(weights), nbytes, np.minimum(weights, nbytes))
    nbytes[g] = w[g] + (nbytes[g] - w[g]) * m_ratio[g]

    # Attention: flops with tokens x context, bytes with sequences x context.
    a = is_att
    flops[a] = flops[a] * s_att
    nbytes[a] = nbytes[a] * s_kv
    b_known = a & (table["batch"] > 0)
    new_batch[b_known] = np.maximum(1, np.rint(table["batch"][b_known] * s_seq)).astype(np.int64)
    am_known = a & (m > 0)
    new_m[am_known] = np.maximum(1, np.rint(m[am_known] * s_tok_per_seq)).astype(np.int64)

    # Other annotated ops scale with tokens.
    o = is_other
    flops[o] = flops[o] * s_tok
    nbytes[o] = nbytes[o] * s_tok
    om_known = o & (m > 0)
    new_m[om_known] = np.maximum(1, np.rint(m[om_known] * s_tok)).astype(np.int64)

    changed = g | a | o
    out["flops"] = flops
    out["bytes"] = nbytes
    out["m"] = new_m
    out["batch"] = new_batch
    out["source_duration_ns"] = table["duration_ns"].astype(float)
    dur = table["duration_ns"].astype(float).copy()
    same = (tokens == src_tok) and (context == src_ctx) and (batch == src_seq)
    if not same:
        dur[changed] = np.nan
    out["duration_ns"] = dur
    out["step_tokens"] = np.where(changed, tokens, table["step_tokens"])
    out["step_context"] = np.where(changed, context, table["step_context"])
    return out


def roofline_predictor(flops_per_s: float, bytes_per_s: float,
                       launch_ns: float = 0.0) -> Callable[[KernelTable], np.ndarray]:
    """A simple kernel model: max(flops / peak, bytes / bandwidth) + launch overhead per row.

    Rows with neither FLOPs nor bytes known keep their ``duration_ns`` (or
    ``source_duration_ns``). For tests and the CLI when no engine predictor is wired.
    """
    if flops_per_s <= 0 or bytes_per_s <= 0:
        raise ValidationError("peaks must be > 0", field="roofline")

    def predict(table: KernelTable) -> np.ndarray:
        fl = np.nan_to_num(table["flops"].astype(float))
        by = np.nan_to_num(table["bytes"].astype(float))
        t = np.maximum(fl / flops_per_s, by / bytes_per_s) * 1e9 + launch_ns
        unknown = (fl == 0) & (by == 0)
        fallback = table["duration_ns"].astype(float)
        if "source_duration_ns" in table:
            fallback = np.where(np.isnan(fallback), table["source_duration_ns"], fallback)
        out: np.ndarray = np.where(unknown, np.nan_to_num(fallback), t)
        return out

    return predict
