"""``llm``: today's LLM operators (GEMMs by dtype, paged attention, fused MoE, collectives)
predicted by the measured-surface model of :mod:`cascade.llm.model`.

Rows it takes are those :func:`cascade.llm.model.llm_rows` recognises (an ``op`` of gemm,
attention, moe or collective with the shape columns set); ``auto`` sends them here first. With
a measured source time the target time is that time times the ratio of the two GPUs' model
times; without one, the target's model time. On the source GPU itself the measured times stay.
A row the target's software runs differently (FP8 weights on an A100: weight-only Marlin; an
FP8 KV cache without FP8 attention: BF16 FlashAttention 2) is predicted as that and named.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from cascade.engine import extrapolation, perf
from cascade.engine.base import ModelContext, ModelOutput, model_column, source_durations
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.llm import model as llm_model
from cascade.llm import work


class LlmConfig(msgspec.Struct, frozen=True, kw_only=True, tag="llm", tag_field="kind"):
    """Settings of the LLM-operator model."""

    collector: Annotated[str, msgspec.Meta(pattern="^[a-z0-9.-]{1,32}$")] = llm_model.COLLECTOR_DEFAULT
    """Which measurement's surfaces to prefer where a GPU has several."""


class LlmModel:
    """Measured source time x (LLM model time on target / on source), or the target's model time."""

    name = "llm"
    config_type = LlmConfig

    def predict(self, table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext) -> ModelOutput:
        cfg = ctx.config if isinstance(ctx.config, LlmConfig) else LlmConfig()
        cal = llm_model.load_llm_calibration()
        llm_model.require_calibrated_keys(table)
        n = len(table)
        rows = llm_model.llm_rows(table)
        pred = np.full(n, np.nan)
        regime = np.zeros(n, dtype=np.int8)
        flags = np.zeros(n, dtype=extrapolation.FLAGS_DTYPE)
        if rows.any():
            idx = np.flatnonzero(rows)
            sub = llm_model.canonical_ops(table.take(idx))
            # a trace's kernel durations are GPU time (graphed or not), never an eager call's host overhead
            tgt = llm_model.model_times(sub, target, cal, collector=cfg.collector, graphed=True)
            t_src = source_durations(sub)
            src_spec = ctx.source
            if src_spec is not None and np.isfinite(t_src).any():
                src = llm_model.model_times(sub, src_spec, cal, collector=cfg.collector, graphed=True)
                out = np.maximum(llm_model.carry(t_src, src, tgt), tgt.roofline_ns)
                if src_spec.id == target.id:  # identity: the measured times, exactly
                    out = np.where(np.isfinite(t_src), t_src, out)
                src_fitted = src.own
            else:  # physics first: never faster than the work at the target's peaks
                out = np.maximum(tgt.model_ns, tgt.roofline_ns)
                src_fitted = np.ones(len(idx), dtype=bool)
            pred[idx] = out
            wk = work.work(sub, target)
            with np.errstate(divide="ignore", invalid="ignore"):
                compute = np.where(wk.peak_flops > 0, wk.flops / wk.peak_flops, 0.0)
            memory = np.maximum(wk.bytes / target.bandwidth_bps, wk.link_bytes / work.link_bandwidth_bps(target))
            reg = np.where(compute >= memory, 0, 1)
            reg = np.where(out > 3 * tgt.roofline_ns + target.launch_overhead_ns, 2, reg)  # latency-bound
            regime[idx] = reg
            f = np.zeros(len(idx), dtype=extrapolation.FLAGS_DTYPE)
            f |= np.where(~tgt.own, extrapolation.TARGET_UNCALIBRATED, 0).astype(extrapolation.FLAGS_DTYPE)
            f |= np.where(~src_fitted, extrapolation.SOURCE_UNCALIBRATED, 0).astype(extrapolation.FLAGS_DTYPE)
            f |= np.where(tgt.distance > 1.0, extrapolation.SHAPE_OUTSIDE, 0).astype(extrapolation.FLAGS_DTYPE)
            f |= np.where(tgt.note != "", extrapolation.SOFTWARE_FALLBACK, 0).astype(extrapolation.FLAGS_DTYPE)
            flags[idx] = f
        rest = ~rows
        if rest.any():  # not an LLM operator: bound only (auto never sends such rows here)
            pred[rest] = perf.roofline_ns(w, target)[rest] + target.launch_overhead_ns
            flags[rest] |= extrapolation.BOUND_ONLY
            regime[rest] = 3
        return ModelOutput(pred, regime, model_column(n, self.name), flags, {self.name: n}, None)


def substitutions(table: KernelTable, target: GPUSpec) -> np.ndarray:
    """Per row, what the target's software runs instead of the row as traced ('' where as traced)."""
    return work.substitute(table, target).note
