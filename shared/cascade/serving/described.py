"""Step times of a model described from its config (:mod:`cascade.llm.describe`), for the
serving simulator: each step is timed at its own shape, with no trace and no fitted step law.

A step's time is :func:`cascade.llm.describe.step_time_ns` of its shape, split into parts that
each depend on few numbers and are tabulated once (the surfaces' interpolation costs about a
millisecond per row, so a simulation cannot ask for every step afresh):

- the rows that scale with the step's tokens T (projections, MLP or MoE, TP all-reduces),
  on a grid of T exact to 32 and 12 points an octave above, linear between;
- the LM head over the S sampling sequences, on the same grid;
- decode attention at batch B and mean context C: per 1/8 octave of C (computed the first
  time a context there is asked for), on a grid of B exact to 16 and 8 points an octave
  above, linear in B and in log2 C between;
- prefill attention per (chunks of equal shape, length): per 1/16 octave of the length,
  linear in log2 length between; a chunk on a cached prefix of c tokens costs the prefill of
  c + n less that of c;
- :func:`cascade.llm.describe.overhead_ns` in closed form.

With attention data parallelism (``desc.dp`` ranks) one simulated engine is the whole group of
ranks stepping together, as vLLM's data-parallel engines do (the MoE layers' gather and
scatter meet every rank each step; an idle rank runs a dummy step): the step's decodes spread
evenly over the ranks and each prefill chunk lands on the least-loaded one; a step lasts as
long as its busiest rank's own work (attention, dense layers, head, overheads) plus the MoE
layers over all the step's tokens. A prefill on one rank so stalls every rank's decodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.llm import describe as d
from cascade.llm import work
from cascade.llm.model import COLLECTOR_DEFAULT, LlmCalibration, model_times
from cascade.serving.kvcache import KVConfig, ModelShape
from cascade.serving.schedulers import sglang_mem_fraction_static

_T_EXACT = 32
_T_PER_OCTAVE = 12
_B_EXACT = 16
_B_PER_OCTAVE = 8
_C_PER_OCTAVE = 8
_L_PER_OCTAVE = 16


def _grid(top: int, exact: int, per_octave: int) -> np.ndarray:
    hi = max(int(top), exact, 2)
    steps = np.arange(int(math.log2(exact) * per_octave), int(math.ceil(math.log2(hi) * per_octave)) + 1)
    geo = np.round(2.0 ** (steps / per_octave)).astype(np.int64)
    return np.unique(np.concatenate([np.arange(1, exact + 1), geo[geo > exact]]))


#: Rows of :func:`cascade.llm.describe.token_rows` that run every data-parallel rank's tokens.
GROUP_ROWS = frozenset({"experts", "dp_gather", "dp_scatter"})


class DescribedStepCost:
    """Step times of one described model on one GPU spec (the simulator's step-time source).

    ``max_tokens`` / ``max_seqs``: the largest step (tokens, sequences) the grids cover
    (one rank's max_num_batched_tokens and max_num_seqs); a step beyond them is scaled
    linearly from the grid's end. With ``desc.dp`` > 1 a step is the whole data-parallel
    group's (the module's last paragraph).
    """

    def __init__(self, desc: d.ModelDescription, spec: GPUSpec, cal: LlmCalibration, *,
                 max_tokens: int = 8192, max_seqs: int = 256, calibration_digest: str | None = None,
                 async_scheduling: bool = True, collector: str = COLLECTOR_DEFAULT) -> None:
        self.desc = desc
        self.collector = collector
        """Whose kernel measurements time the rows first (:data:`cascade.llm.model.COLLECTOR_DEFAULT`:
        the newest vLLM's; an older release's where the deployment runs one)."""
        self.spec = spec
        self.cal = cal
        self.async_scheduling = async_scheduling
        """The engine builds the next step while this one runs (vLLM's async scheduling, on by
        default): a step takes max(GPU, host) instead of GPU + host."""
        digest = calibration_digest or cal.digest()
        kernels = "" if collector == COLLECTOR_DEFAULT else f", {collector} kernels first"
        self.source = f"described: {desc.label()} on {spec.id} (LLM calibration {cal.id} {digest}{kernels})"
        self.basis: dict[str, Any] = {
            "workload": desc.label(), "model_type": desc.model_type, "gpu": spec.id, "gpu_name": spec.name,
            "llm_calibration": {"id": cal.id, "version": cal.version, "digest": digest},
            "step_time": "cascade.llm.describe.step_time_ns at each step's shape (LLM-operator rows at "
                         "vLLM 0.24 CUDA-graph layer times, plus the documented per-step overhead; "
                         + ("the host's share hidden behind the GPU's by async scheduling)" if async_scheduling
                            else "the host's share added: synchronous scheduling)")}
        self.rows_timed = 0
        self.ranks = max(1, desc.dp)
        """Data-parallel ranks stepping together in one simulated engine."""
        self._tg = _grid(max(max_tokens, max_seqs) * self.ranks, _T_EXACT, _T_PER_OCTAVE)
        self._bg = _grid(max_seqs, _B_EXACT, _B_PER_OCTAVE)
        self._lin, self._moe, self._head = self._token_parts()
        self._decode: dict[int, np.ndarray] = {}
        self._prefill: dict[tuple[int, int], float] = {}

    # ---- the simulator's interface ------------------------------------------------------
    def step_cost(self) -> DescribedStepCost:
        return self

    def mixed_step_ns(self, chunks: Sequence[tuple[int, int]], decode_batch: int, decode_context: int) -> float:
        """A step of prefill ``chunks`` (new tokens, cached before) and ``decode_batch`` decodes
        whose contexts sum to ``decode_context``."""
        tokens = decode_batch + sum(int(new) for new, _ in chunks)
        if tokens <= 0:
            return 0.0
        if self.ranks > 1:
            return self._group_step_ns(chunks, decode_batch, decode_context, tokens)
        seqs = len(chunks) + decode_batch
        gpu = self._rank_gpu_ns(chunks, decode_batch, decode_context) + self._interp(self._moe, tokens)
        return float(self._with_host(np.asarray([gpu]), np.asarray([float(seqs)]))[0])

    def _rank_gpu_ns(self, chunks: Sequence[tuple[int, int]], decode_batch: int, decode_context: float) -> float:
        """GPU time of one rank's own share of a step: everything but the MoE layers."""
        tokens = decode_batch
        groups: dict[tuple[int, int], int] = {}
        for new, cached in chunks:
            tokens += new
            key = (int(new), int(cached))
            groups[key] = groups.get(key, 0) + 1
        if tokens <= 0:
            return 0.0
        seqs = len(chunks) + decode_batch
        total = self._interp(self._lin, tokens) + self._interp(self._head, seqs)
        for (new, cached), count in groups.items():
            if cached == 0:
                total += self._prefill_ns(count, new)
            else:
                total += max(self._prefill_ns(count, new + cached) - self._prefill_ns(count, cached), 0.0)
        if decode_batch:
            total += float(self._decode_ns(np.array([float(decode_batch)]),
                                           np.array([decode_context / decode_batch]))[0])
        return total + float(d.gpu_overhead_ns(self.desc, self.spec, tokens, seqs))

    def _group_step_ns(self, chunks: Sequence[tuple[int, int]], decode_batch: int, decode_context: int,
                       tokens: int) -> float:
        """A data-parallel group's step: decodes spread evenly, each prefill chunk (longest first)
        on the least-loaded rank; the busiest rank's own time plus the MoE layers over all
        ``tokens``; the host's share that of the rank with the most sequences."""
        r = self.ranks
        base, extra = divmod(int(decode_batch), r)
        decodes = [base + (1 if i < extra else 0) for i in range(r)]
        load = [float(x) for x in decodes]
        mine: list[list[tuple[int, int]]] = [[] for _ in range(r)]
        for new, cached in sorted(chunks, key=lambda c: -c[0]):
            i = min(range(r), key=load.__getitem__)
            mine[i].append((new, cached))
            load[i] += new
        mean_ctx = decode_context / decode_batch if decode_batch else 0.0
        gpu = max(self._rank_gpu_ns(mine[i], decodes[i], decodes[i] * mean_ctx) for i in range(r))
        seqs = max(len(mine[i]) + decodes[i] for i in range(r))
        gpu += self._interp(self._moe, tokens)
        return float(self._with_host(np.asarray([gpu]), np.asarray([float(seqs)]))[0])

    def decode_steps_ns(self, decode_batch: np.ndarray, decode_context: np.ndarray) -> np.ndarray:
        """Pure-decode steps, one per entry: the batch and the sum of its contexts (a group's:
        its busiest rank holds ceil(batch / ranks) of them)."""
        b = np.asarray(decode_batch, dtype=float)
        ctx = np.asarray(decode_context, dtype=float)
        out = np.zeros(len(b))
        live = b > 0
        if not live.any():
            return out
        bl = b[live]
        br = np.ceil(bl / self.ranks)
        gpu = (self._interp_many(self._lin, br) + self._interp_many(self._head, br)
               + self._decode_ns(br, ctx[live] / bl) + d.gpu_overhead_ns(self.desc, self.spec, br, br)
               + self._interp_many(self._moe, bl))
        out[live] = self._with_host(gpu, br)
        return out

    def _with_host(self, gpu: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Step wall time from its GPU time and its sequences' host work."""
        host = d.host_ns(seqs)
        return np.asarray(np.maximum(gpu, host) if self.async_scheduling else gpu + host, dtype=float)

    # ---- the tabulated parts ------------------------------------------------------------
    def _timed(self, rows: list[dict[str, Any]], graphed: bool = True) -> np.ndarray:
        table = KernelTable.from_rows(rows)
        self.rows_timed += len(table)
        return np.asarray(model_times(table, self.spec, self.cal, graphed=graphed, collector=self.collector).model_ns
                          * table["repeat"], dtype=float)

    def _token_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per grid point T: a rank's token rows at T tokens but the MoE layers, the MoE layers
        (and a group's gather / scatter) at T tokens of the whole step, the head at T sequences."""
        rows: list[dict[str, Any]] = []
        owner: list[int] = []
        group: list[bool] = []
        for i, t in enumerate(self._tg.tolist()):
            part = d.token_rows(self.desc, t, moe_tokens=t)
            rows += part
            owner += [i] * len(part)
            group += [row["name"] in GROUP_ROWS for row in part]
        n_lin = len(rows)
        for i, s in enumerate(self._tg.tolist()):
            part = d.head_rows(self.desc, s)
            rows += part
            owner += [i] * len(part)
        idx = np.asarray(owner)
        # a step of up to CUDA_GRAPH_MAX_TOKENS tokens replays a CUDA graph; a bigger one runs its
        # layers eagerly, each kernel's launch cost showing where its work is short
        eager = self._tg[idx] > d.CUDA_GRAPH_MAX_TOKENS
        times = self._timed(rows)
        if eager.any():
            times = np.where(eager, self._timed(rows, graphed=False), times)
        moe = np.asarray(group + [False] * (len(rows) - n_lin))
        own = ~moe
        own[n_lin:] = False
        n = len(self._tg)
        lin = np.bincount(idx[own], weights=times[own], minlength=n)
        moe_t = np.bincount(idx[moe], weights=times[moe], minlength=n)
        head = np.bincount(idx[n_lin:], weights=times[n_lin:], minlength=n)
        return lin, moe_t, head

    def _interp(self, values: np.ndarray, x: float) -> float:
        top = float(self._tg[-1])
        if x > top:
            return float(values[-1]) * x / top
        return float(np.interp(x, self._tg, values))

    def _interp_many(self, values: np.ndarray, x: np.ndarray) -> np.ndarray:
        top = float(self._tg[-1])
        return np.where(x > top, values[-1] * x / top, np.interp(x, self._tg, values))

    def _decode_column(self, j: int) -> np.ndarray:
        col = self._decode.get(j)
        if col is None:
            ctx = max(1, round(2.0 ** (j / _C_PER_OCTAVE)))
            rows: list[dict[str, Any]] = []
            owner: list[int] = []
            for i, b in enumerate(self._bg.tolist()):
                part = d.decode_attention_rows(self.desc, b, ctx)
                rows += part
                owner += [i] * len(part)
            col = np.bincount(np.asarray(owner), weights=self._timed(rows), minlength=len(self._bg))
            self._decode[j] = col
        return col

    def _decode_ns(self, batch: np.ndarray, context: np.ndarray) -> np.ndarray:
        pos = np.log2(np.maximum(context, 1.0)) * _C_PER_OCTAVE
        lo = np.floor(pos).astype(np.int64)
        frac = pos - lo
        out = np.empty(len(batch))
        top = float(self._bg[-1])
        for j in np.unique(lo).tolist():
            m = lo == j
            b = batch[m]
            a0 = np.interp(b, self._bg, self._decode_column(j))
            a1 = np.interp(b, self._bg, self._decode_column(j + 1))
            v = a0 + (a1 - a0) * frac[m]
            out[m] = np.where(b > top, v * b / top, v)
        return out

    def _prefill_at(self, count: int, j: int) -> float:
        key = (count, j)
        v = self._prefill.get(key)
        if v is None:
            length = max(1, round(2.0 ** (j / _L_PER_OCTAVE)))
            v = float(np.sum(self._timed(d.prefill_attention_rows(self.desc, count, length))))
            self._prefill[key] = v
        return v

    def _prefill_ns(self, count: int, length: int) -> float:
        if length < 1:
            return 0.0
        pos = math.log2(length) * _L_PER_OCTAVE
        lo = math.floor(pos)
        if pos == lo:
            return self._prefill_at(count, lo)
        a0, a1 = self._prefill_at(count, lo), self._prefill_at(count, lo + 1)
        return a0 + (a1 - a0) * (pos - lo)


def group_kv(kv: KVConfig, ranks: int) -> KVConfig:
    """The KV cache of a data-parallel group simulated as one engine: ``ranks`` times one
    rank's blocks (each rank holds its own requests' KV)."""
    if ranks <= 1:
        return kv
    return msgspec.structs.replace(kv, num_gpu_blocks_override=kv.num_blocks() * ranks)


def described_kv(desc: d.ModelDescription, spec: GPUSpec, *, gpu_memory_utilization: float = 0.9,
                 block_size: int = 16, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                 num_gpu_blocks_override: int | None = None) -> KVConfig:
    """KV-cache sizing of one GPU of the engine, as vLLM sizes it: (memory x utilisation -
    weights on the GPU - activation reserve) / KV bytes per token on the GPU."""
    shape = ModelShape(name=desc.model_type, layers=desc.kv_layers, kv_heads=desc.kv_heads_per_gpu,
                       head_dim=desc.cache_head_dim, kv_dtype_bytes=int(work.KV_BYTES[desc.kv_dtype]),
                       weights_bytes=desc.weight_bytes_per_gpu())
    return KVConfig(model=shape, gpu_memory_bytes=int(spec.memory_gb * d.GiB),
                    gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
                    activation_reserve_bytes=desc.activation_reserve_bytes(
                        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs),
                    num_gpu_blocks_override=num_gpu_blocks_override)


def sglang_kv(desc: d.ModelDescription, spec: GPUSpec, *, mem_fraction_static: float | None = None,
              version: tuple[int, int, int] | None = None) -> KVConfig:
    """KV-cache sizing of one GPU of an SGLang engine: the memory x ``mem_fraction_static`` (by
    default SGLang's own for the GPU and TP degree, :func:`~cascade.serving.schedulers.
    sglang_mem_fraction_static`; ``version`` picks the rule of releases before 0.5.3) less the
    weights on the GPU, in pages of one token (SGLang's default page size). What the fraction
    leaves out already holds activations and CUDA graphs: nothing else is reserved."""
    frac = mem_fraction_static or sglang_mem_fraction_static(spec.memory_gb, desc.tp, version)
    if not 0 < frac <= 1:
        raise ValidationError(f"SGLang's rule leaves no static memory on {spec.id} ({spec.memory_gb:g} GB) at TP "
                              f"{desc.tp} (mem_fraction_static {frac:g}): give the KV cache's size "
                              "(num_gpu_blocks_override) or pick a GPU with more memory", field="kv")
    shape = ModelShape(name=desc.model_type, layers=desc.kv_layers, kv_heads=desc.kv_heads_per_gpu,
                       head_dim=desc.cache_head_dim, kv_dtype_bytes=int(work.KV_BYTES[desc.kv_dtype]),
                       weights_bytes=desc.weight_bytes_per_gpu())
    return KVConfig(model=shape, gpu_memory_bytes=int(spec.memory_gb * d.GiB), gpu_memory_utilization=frac,
                    block_size=1)
