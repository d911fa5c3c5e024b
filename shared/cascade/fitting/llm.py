"""The LLM-kernel data sets (a folder laid out like ``measured/llm-kernels/``: NVIDIA
AIConfigurator's vLLM operator tables) as kernel-table rows; the fit of the LLM model's
surfaces (:mod:`cascade.llm.model`) and the cross-GPU protocol ``cascade validate --llm``.

Every measured latency here is a harness time per call (CUDA-graph replays averaged, warm
caches), one layer on one GPU: what the surfaces are fitted on, and what they predict.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.errors import TraceFormatError, UnknownGPUError, ValidationError
from cascade.gpus.registry import GPURegistry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.llm import model as llm_model
from cascade.llm import work

#: Files of the folder and the columns each must have.
FILES: dict[str, tuple[str, ...]] = {
    "gemm.parquet": ("m", "n", "k", "gemm_dtype"),
    "attention_context.parquet": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                                  "kv_cache_dtype"),
    "attention_generation.parquet": ("batch_size", "step", "num_heads", "num_key_value_heads", "head_dim",
                                     "kv_cache_dtype"),
    "moe.parquet": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                    "moe_ep_size", "moe_dtype"),
    "nccl.parquet": ("op_name", "nccl_dtype", "num_gpus", "message_size"),
    "allreduce_custom.parquet": ("num_gpus", "message_size", "backend"),
}
_COMMON = ("latency_ms", "version")
_NCCL_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "int8": 1, "float": 4, "float32": 4, "fp8": 1}


@dataclass(frozen=True, slots=True)
class LlmSet:
    """One file's rows on one GPU and one collector."""

    file: str
    gpu: GPUSpec
    collector: str
    table: KernelTable
    latency_ns: np.ndarray
    shape_keys: np.ndarray
    """Per row, the operator and its shape (no GPU, no implementation): how rows pair across GPUs."""
    family: np.ndarray
    """Per row, the report family (gemm, attention_prefill, attention_decode, moe, nccl_<op>,
    custom_all_reduce)."""
    dtype: np.ndarray
    """Per row, the dtype it is reported under (weights; the KV cache for attention)."""


def _collector(file: str, version: str) -> str:
    if file == "nccl.parquet":
        return "nccl"
    parts = version.split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() and "dev" not in version:
        return f"vllm-{parts[0]}.{parts[1]}"
    return "vllm-preview"


def _read(path: Path) -> dict[str, list[Any]]:
    import pyarrow.parquet as pq

    try:
        return dict(pq.read_table(path).to_pydict())
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
        raise TraceFormatError(str(path), 0, "a Parquet table (pyarrow could not read it)", str(exc)[:200]) from exc


def _gpu_of(reg: GPURegistry, path: Path, cols: dict[str, list[Any]], i: int) -> GPUSpec:
    for name in ("device", "gpu"):
        values = cols.get(name)
        if values is not None and values[i]:
            spec = reg.resolve(str(values[i]))
            if spec is not None:
                return spec
    from cascade.gpus.registry import suggest_gpus

    label = str((cols.get("device") or cols.get("gpu") or ["?"])[i])
    raise UnknownGPUError(label, reg.ids(), suggestions=suggest_gpus(reg, label),
                          hint=f"device of {path}; add a spec with --specs DIR or an alias")


def _num(cols: dict[str, list[Any]], name: str, n: int, default: float = 0.0) -> np.ndarray:
    values = cols.get(name)
    if values is None:
        return np.full(n, default)
    return np.asarray([default if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
                       for v in values])


def _str(cols: dict[str, list[Any]], name: str, n: int) -> np.ndarray:
    values = cols.get(name)
    if values is None:
        return np.full(n, "", dtype=object)
    return np.asarray(["" if v is None else str(v) for v in values], dtype=object)


def _rows(file: str, cols: dict[str, list[Any]], n: int) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """(kernel-table columns, report family, report dtype) of one file's rows."""
    def s(name: str) -> np.ndarray:
        return _str(cols, name, n)

    def x(name: str, d: float = 0.0) -> np.ndarray:
        return _num(cols, name, n, d)

    def canon(values: np.ndarray) -> np.ndarray:
        return np.asarray([work.canonical_dtype(str(v)) for v in values], dtype=object)
    if file == "gemm.parquet":
        dtype = canon(s("gemm_dtype"))
        return ({"op": np.full(n, work.GEMM, dtype=object), "m": x("m"), "n": x("n"), "k": x("k"),
                 "dtype": dtype, "impl": s("kernel_source")}, np.full(n, "gemm", dtype=object), dtype)
    if file.startswith("attention_"):
        prefill = file == "attention_context.parquet"
        isl = x("isl", 1)
        context = isl if prefill else x("step") + 1
        kv = canon(s("kv_cache_dtype"))
        phase = "prefill" if prefill else "decode"
        return ({"op": np.full(n, work.ATTENTION, dtype=object), "phase": np.full(n, phase, dtype=object),
                 "batch": x("batch_size", 1), "seq": isl if prefill else np.ones(n), "context": context,
                 "heads": x("num_heads"), "kv_heads": x("num_key_value_heads"), "head_dim": x("head_dim"),
                 "window": x("window_size"), "kv_dtype": kv, "dtype": np.full(n, "bf16", dtype=object),
                 "impl": s("kernel_source")}, np.full(n, f"attention_{phase}", dtype=object), kv)
    if file == "moe.parquet":
        dtype = canon(s("moe_dtype"))
        return ({"op": np.full(n, work.MOE, dtype=object), "tokens": x("num_tokens"), "hidden": x("hidden_size"),
                 "inter": x("inter_size"), "experts": x("num_experts"), "topk": x("topk", 1),
                 "tp": x("moe_tp_size", 1), "ep": x("moe_ep_size", 1), "distribution": s("distribution"),
                 "dtype": dtype, "impl": s("kernel_source")}, np.full(n, "moe", dtype=object), dtype)
    if file == "nccl.parquet":
        coll = np.asarray([{"alltoall": "all_to_all"}.get(v, v) for v in s("op_name")], dtype=object)
        width = np.asarray([_NCCL_BYTES.get(v, 2) for v in s("nccl_dtype")], dtype=np.float64)
        return ({"op": np.full(n, work.COLLECTIVE, dtype=object), "collective": coll, "ranks": x("num_gpus"),
                 "comm_bytes": x("message_size") * width, "impl": np.full(n, "nccl", dtype=object),
                 "dtype": s("nccl_dtype")},
                np.asarray([f"nccl_{c}" for c in coll], dtype=object), s("nccl_dtype"))
    # allreduce_custom.parquet
    impl = np.asarray([f"vllm_custom_{b.removeprefix('vllm_')}" for b in s("backend")], dtype=object)
    return ({"op": np.full(n, work.COLLECTIVE, dtype=object), "collective": np.full(n, "all_reduce", dtype=object),
             "ranks": x("num_gpus"), "comm_bytes": x("message_size") * 2, "impl": impl,
             "dtype": np.full(n, "bf16", dtype=object)},
            np.asarray([f"custom_all_reduce_{b.removeprefix('vllm_')}" for b in s("backend")], dtype=object),
            np.full(n, "bf16", dtype=object))


#: Columns that identify an operator's shape across GPUs (what pairs a row with its twin).
_SHAPE_COLUMNS: tuple[str, ...] = ("op", "dtype", "m", "n", "k", "phase", "batch", "seq", "context", "heads",
                                   "kv_heads", "head_dim", "window", "kv_dtype", "tokens", "hidden", "inter",
                                   "experts", "topk", "tp", "ep", "distribution", "collective", "ranks",
                                   "comm_bytes")


def _shape_keys(cols: dict[str, Any], family: np.ndarray, n: int) -> np.ndarray:
    parts = [np.asarray(family, dtype=str)]
    for c in _SHAPE_COLUMNS:
        if c in cols:
            v = np.asarray(cols[c])
            parts.append(v.astype(np.int64).astype(str) if v.dtype.kind == "f" else v.astype(str))
    out = parts[0].astype(object)
    for p in parts[1:]:
        out = out + "|" + p.astype(object)
    return out


def read_folder(root: str | Path, reg: GPURegistry, *, log: Callable[[str], None] | None = None) -> list[LlmSet]:
    """Every file of ``root`` laid out like ``llm-kernels/``, split per GPU and collector.

    Device names resolve through the registry's aliases (``NVIDIA H100 80GB HBM3`` ->
    SM90_H100); a missing column is an error naming the file and the column; rows without a
    positive latency are dropped (and counted in ``log``)."""
    root = Path(root)
    if not root.is_dir():
        raise ValidationError(f"{root} is not a directory", field="data")
    found = [f for f in FILES if (root / f).is_file()]
    if not found:
        raise ValidationError(f"{root} holds none of {', '.join(FILES)} (a folder laid out like "
                              "measured/llm-kernels/)", field="data")
    out: list[LlmSet] = []
    for file in found:
        path = root / file
        cols = _read(path)
        missing = [c for c in (*FILES[file], *_COMMON) if c not in cols]
        if missing or ("device" not in cols and "gpu" not in cols):
            need = missing or ["device"]
            raise TraceFormatError(str(path), 0, f"columns {', '.join(FILES[file] + _COMMON)} and device",
                                   f"no column {', '.join(need)}")
        n = len(cols["latency_ms"])
        if n == 0:
            continue
        latency = _num(cols, "latency_ms", n, float("nan")) * 1e6
        version = _str(cols, "version", n)
        rows, family, dtype = _rows(file, cols, n)
        keys = _shape_keys(rows, family, n)
        gpus = [_gpu_of(reg, path, cols, i) for i in range(n)] if n < 50 else None
        if gpus is None:  # one registry lookup per distinct device name
            labels = _str(cols, "device", n) if "device" in cols else _str(cols, "gpu", n)
            by_label: dict[str, GPUSpec] = {}
            for i, lab in enumerate(labels):
                if lab not in by_label:
                    by_label[lab] = _gpu_of(reg, path, cols, i)
            gpus = [by_label[lab] for lab in labels]
        gpu_ids = np.asarray([g.id for g in gpus], dtype=object)
        coll = np.asarray([_collector(file, v) for v in version], dtype=object)
        ok = np.isfinite(latency) & (latency > 0)
        if log and (~ok).any():
            log(f"{path}: {int((~ok).sum())} rows without a positive latency_ms dropped")
        pairs = sorted(set(zip(gpu_ids[ok].tolist(), coll[ok].tolist(), strict=True)))
        spec_of = {g.id: g for g in gpus}
        for gid, cname in pairs:
            sel = ok & (gpu_ids == gid) & (coll == cname)
            table = KernelTable({k: np.asarray(v)[sel] for k, v in rows.items()})
            table["name"] = np.full(int(sel.sum()), file.removesuffix(".parquet"), dtype=object)
            out.append(LlmSet(file, spec_of[gid], cname, table, latency[sel], keys[sel], family[sel], dtype[sel]))
    return out


def heldout(keys: np.ndarray, fraction: float) -> np.ndarray:
    """True for shapes whose key hashes into the held-out fraction (the same on every GPU)."""
    cut = round(fraction * 1000)
    return np.fromiter((zlib.crc32(str(k).encode()) % 1000 < cut for k in keys), dtype=bool, count=len(keys))


#: Fixed floor under the roofline, as a fraction of a surface's smallest measured time.
FIXED_FRACTION = 0.6

#: Per file, the axis along which an operator's work only grows (GEMM rows, MoE tokens, the
#: attention's batch, a collective's bytes), the rest of its shape and its kernel held.
SIZE_AXIS: dict[str, str] = {"gemm.parquet": "m", "moe.parquet": "tokens", "attention_context.parquet": "batch",
                             "attention_generation.parquet": "batch", "nccl.parquet": "comm_bytes",
                             "allreduce_custom.parquet": "comm_bytes"}
#: A measured time over both bounds of its neighbours along the size axis by this factor is a
#: spike (:func:`spikes`).
SPIKE = 1.5


def spikes(file: str, table: KernelTable, latency_ns: np.ndarray) -> np.ndarray:
    """True for rows that time an isolated spike: slower by :data:`SPIKE` than the next bigger
    size of the same operator, shape and kernel (which could run it padded) and than as many
    runs of the next smaller size as cover it (which could run it split). Such a point breaks
    both bounds no kernel choice explains (vLLM 0.14's H100 collector timed BF16 GEMMs of 2,048
    and 4,096 rows at a fifth of their neighbours' throughput, 17 points, where 0.24 measured
    the same shapes at theirs); a surface fitted through it carries the spike to every shape
    near it. Repeats of one size count as their mean; the ends of a run are kept."""
    n = len(table)
    out = np.zeros(n, dtype=bool)
    axis = SIZE_AXIS.get(file)
    if axis is None or axis not in table or n < 3:
        return out
    size = np.asarray(table[axis], dtype=np.float64)
    group = np.full(n, "", dtype=object)
    for c in (*_SHAPE_COLUMNS, "impl"):
        if c in table and c != axis:
            group = group + "|" + np.asarray(table[c]).astype(str).astype(object)
    order = np.lexsort((size, group))
    g, s, t = group[order], size[order], np.asarray(latency_ns, dtype=np.float64)[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], n], strict=True):
        sizes, inv = np.unique(s[a:b], return_inverse=True)
        if len(sizes) < 3:
            continue
        mean = np.bincount(inv, weights=t[a:b]) / np.bincount(inv)
        mid = mean[1:-1]
        split = np.ceil(sizes[1:-1] / np.maximum(sizes[:-2], 1.0)) * mean[:-2]
        bad = np.zeros(len(sizes), dtype=bool)
        bad[1:-1] = (mid > SPIKE * mean[2:]) & (mid > SPIKE * split)
        out[order[a:b]] = bad[inv]
    return out


def fit(sets: Iterable[LlmSet], *, heldout_fraction: float = 0.2, source: str = "",
        version: str = "") -> llm_model.LlmCalibration:
    """Surfaces per (GPU, collector, operator key) from the sets' rows outside the held-out split,
    isolated spikes (:func:`spikes`) left out of the fit (the protocol still scores them)."""
    surfaces: list[llm_model.SurfaceInfo] = []
    arrays: dict[str, np.ndarray] = {}
    for s in sets:
        keep = ~heldout(s.shape_keys, heldout_fraction) if heldout_fraction > 0 else np.ones(len(s.table), bool)
        keep &= ~spikes(s.file, s.table, s.latency_ns)
        table = s.table.take(np.flatnonzero(keep))
        lat = s.latency_ns[keep]
        sub = work.substitute(table, s.gpu)
        keys = work.keys(table, sub)
        roof = work.roofline_ns(table, s.gpu, sub)
        feats = work.features(table)
        for key in sorted(set(keys.tolist()) - {""}):
            rows = np.flatnonzero(keys == key)
            dims = work.FEATURE_DIMS[key.split("|")[0]]
            fixed = FIXED_FRACTION * float(np.min(lat[rows]))
            resid = np.log(lat[rows] / (fixed + roof[rows]))
            x = feats[rows, :dims]
            # one point per distinct shape (the mean log residual of repeats)
            uniq, inv = np.unique(np.round(x, 6), axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            r = np.bincount(inv, weights=resid) / np.bincount(inv)
            i = len(surfaces)
            surfaces.append(llm_model.SurfaceInfo(gpu=s.gpu.id, arch=s.gpu.arch, sm_version=s.gpu.sm_version,
                                                  collector=s.collector, key=key, dims=dims, fixed_ns=fixed,
                                                  count=len(uniq)))
            arrays[f"x{i}"] = uniq.astype(np.float16)  # log2 shapes: 0.01 of an octave at 2^30
            arrays[f"r{i}"] = r.astype(np.float16)
    return llm_model.LlmCalibration(version=version, source=source, heldout=heldout_fraction, surfaces=surfaces,
                                    arrays=arrays)


class LlmScore(msgspec.Struct, frozen=True, kw_only=True):
    """One cell of the protocol: a family and dtype predicted from one GPU into another."""

    op: str
    dtype: str
    source: str
    target: str
    n: int
    mape_pct: float
    median_pct: float
    p90_pct: float
    baseline_mape_pct: float
    """The ratio roofline: the source time x the ratio of the two GPUs' rooflines."""
    variant: str = "calibrated"
    """``calibrated`` (shipped surfaces), or ``target left out`` (the target's own surfaces removed)."""


def _subset(s: LlmSet, mask: np.ndarray) -> LlmSet:
    idx = np.flatnonzero(mask)
    return LlmSet(s.file, s.gpu, s.collector, s.table.take(idx), s.latency_ns[idx], s.shape_keys[idx],
                  s.family[idx], s.dtype[idx])


@dataclass
class _Cache:
    times: dict[tuple[str, str, str, frozenset[str]], llm_model.LlmTimes] = field(default_factory=dict)


def _times(cache: _Cache, s: LlmSet, spec: GPUSpec, cal: llm_model.LlmCalibration, collector: str,
           exclude: frozenset[str], rows: np.ndarray) -> llm_model.LlmTimes:
    # a GPU's model times change with what is left out only where it is itself left out
    exclude = exclude if spec.id in exclude else frozenset()
    key = (s.file + s.gpu.id + s.collector, spec.id, collector, exclude)
    if key not in cache.times:
        cache.times[key] = llm_model.model_times(s.table, spec, cal, collector=collector, exclude=exclude)
    t = cache.times[key]
    return llm_model.LlmTimes(t.model_ns[rows], t.roofline_ns[rows], t.basis[rows], t.own[rows], t.note[rows],
                              t.distance[rows])


def _ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred - meas) / meas * 100.0


def evaluate(sets: list[LlmSet], cal: llm_model.LlmCalibration, *, heldout_only: bool = False,
             sources: Iterable[str] | None = None, left_out: bool = True) -> list[LlmScore]:
    """Each GPU the calibration measured into every other GPU of ``sets``, per report family and
    dtype: MAPE, median and p90 beside the ratio roofline; with ``left_out`` each target scored
    again with its own surfaces removed. Pairs match on shape and prefer the target's collector."""
    calibrated = {s.gpu for s in cal.surfaces}
    src_ids = set(sources) if sources is not None else calibrated
    if heldout_only:  # only held-out shapes are ever scored: model them alone
        sets = [_subset(s, heldout(s.shape_keys, cal.heldout)) for s in sets]
        sets = [s for s in sets if len(s.table)]
    by_gpu: dict[str, list[LlmSet]] = {}
    for s in sets:
        by_gpu.setdefault(s.gpu.id, []).append(s)
    cache = _Cache()
    out: list[LlmScore] = []
    for tgt_set in sets:
        tgt = tgt_set.gpu
        for src_id in sorted(src_ids):
            if src_id == tgt.id or src_id not in by_gpu:
                continue
            cands = [s for s in by_gpu[src_id] if s.file == tgt_set.file]
            cands.sort(key=lambda s: s.collector != tgt_set.collector)
            if not cands:
                continue
            src_set = cands[0]
            index = {k: i for i, k in enumerate(src_set.shape_keys.tolist())}
            pos = np.asarray([index.get(k, -1) for k in tgt_set.shape_keys.tolist()])
            sel = pos >= 0
            if not sel.any():
                continue
            t_rows = np.flatnonzero(sel)
            s_rows = pos[sel]
            t_src = src_set.latency_ns[s_rows]
            t_meas = tgt_set.latency_ns[t_rows]
            variants = [("calibrated", frozenset[str]())]
            if left_out and tgt.id in calibrated:
                variants.append(("target left out", frozenset({tgt.id})))
            for variant, exclude in variants:
                m_src = _times(cache, src_set, src_set.gpu, cal, src_set.collector, exclude, s_rows)
                m_tgt = _times(cache, tgt_set, tgt, cal, tgt_set.collector, exclude, t_rows)
                pred = llm_model.carry(t_src, m_src, m_tgt)
                with np.errstate(divide="ignore", invalid="ignore"):
                    base = t_src * m_tgt.roofline_ns / m_src.roofline_ns
                ape = _ape(pred, t_meas)
                bape = _ape(base, t_meas)
                fam = tgt_set.family[t_rows]
                dt = tgt_set.dtype[t_rows]
                for f, d in sorted(set(zip(fam.tolist(), dt.tolist(), strict=True))):
                    cell = (fam == f) & (dt == d)
                    a = ape[cell]
                    out.append(LlmScore(op=f, dtype=d, source=src_id, target=tgt.id, n=int(cell.sum()),
                                        mape_pct=round(float(a.mean()), 2),
                                        median_pct=round(float(np.median(a)), 2),
                                        p90_pct=round(float(np.percentile(a, 90)), 2),
                                        baseline_mape_pct=round(float(np.nanmean(bape[cell])), 2),
                                        variant=variant))
    return out


def summary(scores: list[LlmScore]) -> dict[str, Any]:
    """Means over cells per variant and op (count-weighted)."""
    out: dict[str, Any] = {}
    for variant in sorted({s.variant for s in scores}):
        rows = [s for s in scores if s.variant == variant]
        n = sum(s.n for s in rows)
        out[variant] = {
            "cells": len(rows), "n": n,
            "mape_pct": round(sum(s.mape_pct * s.n for s in rows) / max(n, 1), 2),
            "baseline_mape_pct": round(sum(s.baseline_mape_pct * s.n for s in rows) / max(n, 1), 2),
            "worst_cell_pct": max((s.mape_pct for s in rows), default=0.0),
            "cells_worse_than_baseline": sum(1 for s in rows if s.mape_pct > s.baseline_mape_pct),
        }
    return out


#: Report groups of the condensed table (:func:`condensed`): label -> (op prefix, dtypes or None).
GROUPS: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("GEMM bf16", "gemm", ("bf16", "fp16")), ("GEMM fp8", "gemm", ("fp8",)),
    ("GEMM fp8 block", "gemm", ("fp8_block",)), ("GEMM fp4", "gemm", ("fp4",)),
    ("prefill attn", "attention_prefill", None), ("decode attn", "attention_decode", None),
    ("MoE", "moe", None), ("NCCL", "nccl_", None), ("custom AR", "custom_all_reduce", None),
)


def condensed(scores: Iterable[LlmScore], source: str, variant: str = "calibrated") -> list[dict[str, Any]]:
    """Per target of ``source``: each group's row-weighted MAPE and ratio-roofline MAPE (None
    where the target has no such rows)."""
    rows = [s for s in scores if s.source == source and s.variant == variant]
    out = []
    for target in sorted({s.target for s in rows}):
        line: dict[str, Any] = {"target": target}
        for label, prefix, dtypes in GROUPS:
            cells = [s for s in rows if s.target == target and s.op.startswith(prefix)
                     and (dtypes is None or s.dtype in dtypes)]
            n = sum(c.n for c in cells)
            line[label] = None if not n else (round(sum(c.mape_pct * c.n for c in cells) / n, 1),
                                              round(sum(c.baseline_mape_pct * c.n for c in cells) / n, 1))
        out.append(line)
    return out


def condensed_markdown(scores: list[LlmScore], source: str, variant: str = "calibrated") -> str:
    """:func:`condensed` as a markdown table: ``MAPE (ratio roofline)`` per cell."""
    head = "| " + source + " -> | " + " | ".join(g[0] for g in GROUPS) + " |"
    lines = [head, "|" + "---|" * (len(GROUPS) + 1)]
    for line in condensed(scores, source, variant):
        cells = [("-" if line[g[0]] is None else f"{line[g[0]][0]:.1f} ({line[g[0]][1]:.1f})") for g in GROUPS]
        lines.append(f"| {line['target']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
