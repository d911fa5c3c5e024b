"""A served model described from its Hugging Face ``config.json``, and the LLM-operator rows
one engine step of it runs on one GPU.

:func:`describe_model` reads the fields every decoder-only transformer of the supported
families carries (dense GQA: Llama, Mistral, Qwen2/3; mixture of experts: Qwen3-MoE, Mixtral,
gpt-oss) into a :class:`ModelDescription` for one tensor/expert-parallel split. A config
without one of the needed fields, or with an attention this module does not model (MLA), is
refused with a :class:`~cascade.errors.ValidationError` naming the field.

:func:`step_table` turns one step's shape (the prefill chunks and the decode contexts in it)
into kernel-table rows of :mod:`cascade.llm.work` operators, each per-layer row emitted once
with its ``repeat`` (how many times the step runs it); :func:`step_time_ns` sums their model
times (:func:`cascade.llm.model.model_times`, vLLM's own layer times under CUDA graphs) times
``repeat``, plus :func:`overhead_ns` for the work no LLM-operator row covers.

Pure: no I/O; the caller reads the config file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.llm import work
from cascade.llm.model import LlmCalibration, model_times

GiB = 1 << 30

#: Quantisations the CLI takes (``--quant``), as the LLM tables spell the dtype.
QUANTS: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8-block": "fp8_block",
                          "fp8_block": "fp8_block", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "mxfp4", "int4": "int4"}
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8")

#: TP all-reduces up to this many bytes take vLLM's custom all-reduce (captured in the CUDA
#: graph); larger ones go to NCCL (vLLM's custom all-reduce limit, 8 MiB by default).
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 * 1024 * 1024

# ---- the per-step work no LLM-operator row covers ------------------------------------------
#: Elementwise kernels per layer outside the timed operators: the two fused residual-add +
#: RMSNorm kernels, rotary embedding, and the SiLU-and-mul activation of a dense MLP (a fused
#: MoE layer's activation is inside its timed call). vLLM's torch.compile fusions leave about
#: this many.
ELEMENTWISE_KERNELS_PER_LAYER = 4
#: Shortest time of one such kernel on the GPU under a CUDA graph (ns): a small elementwise
#: kernel's device time plus the gap between graph nodes, about 2 us on H100/B200-class GPUs
#: (a priori estimate, not fitted on the serving data).
ELEMENTWISE_FLOOR_NS = 2_000.0
#: Fraction of the spec's DRAM bandwidth those memory-bound streams sustain.
STREAM_EFFICIENCY = 0.8
#: Host time of one engine step not hidden behind the GPU (ns): vLLM V1's scheduler, input
#: preparation, sampler launch and output processing, about 1 ms a step for a small batch
#: (a priori estimate from published vLLM V1 step profiles, not fitted on the serving data).
STEP_HOST_NS = 1_000_000.0
#: Host time per scheduled sequence on top (ns): per-request bookkeeping in the scheduler and
#: the output processor, a few microseconds each (same origin).
STEP_HOST_PER_SEQUENCE_NS = 3_000.0
#: GPU time of the sampler besides streaming the logits (ns): a handful of small kernels
#: (temperature, top-p/top-k masks, argmax / multinomial) run eagerly after the graph.
SAMPLER_FIXED_NS = 60_000.0

#: The largest step (tokens) vLLM V1 replays as a CUDA graph (its default largest capture size);
#: bigger steps run their layers eagerly.
CUDA_GRAPH_MAX_TOKENS = 512

# ---- memory besides weights and KV cache ----------------------------------------------------
#: Memory vLLM keeps out of the KV cache besides weights and peak activations: CUDA graphs,
#: NCCL and custom all-reduce buffers, the CUDA context's allocations (about 1.5 GiB).
RESERVE_FIXED_BYTES = int(1.5 * GiB)


class ModelDescription(msgspec.Struct, frozen=True, kw_only=True):
    """One decoder-only transformer as one GPU of a tensor/expert-parallel split serves it."""

    model_type: str
    """``model_type`` of the config (``llama``, ``qwen3_moe``, ``gpt_oss``, ...)."""
    hidden: int
    """hidden_size."""
    layers: int
    """num_hidden_layers."""
    heads: int
    """num_attention_heads (the model's, before the TP split)."""
    kv_heads: int
    """num_key_value_heads (the model's)."""
    head_dim: int
    """head_dim (default hidden_size / num_attention_heads)."""
    inter: int
    """Dense MLP intermediate_size (0: no dense MLP layer)."""
    vocab: int
    """vocab_size."""
    tie_word_embeddings: bool = False
    windows: tuple[int, ...] = ()
    """Per layer: the sliding window in tokens (0: full attention)."""
    moe_layers: tuple[bool, ...] = ()
    """Per layer: whether its MLP is a mixture of experts."""
    experts: int = 0
    """Routed experts of a MoE layer (the model's)."""
    topk: int = 0
    """Experts per token."""
    moe_inter: int = 0
    """Intermediate size of one expert (the model's, before the TP split)."""
    quant: str = "bf16"
    """Dtype of the dense linear layers (QKV, O, dense MLP)."""
    moe_quant: str = "bf16"
    """Dtype of the experts."""
    kv_dtype: str = "bf16"
    tp: int = 1
    """Tensor-parallel GPUs (attention heads and dense MLPs split over them)."""
    ep: int = 1
    """Expert-parallel ranks among the MoE layers' dp x tp GPUs (experts split over them; each
    expert's intermediate size split over dp x tp / ep)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the rank of the compressed KV
    latent each token caches, shared by every head and kept whole on every TP rank (0: none)."""
    q_lora_rank: int = 0
    """MLA: the rank of the compressed query (0: queries projected directly)."""
    rope_dim: int = 0
    """MLA: qk_rope_head_dim, the rotary part of a head (``head_dim`` is qk_nope + qk_rope)."""
    v_head_dim: int = 0
    """MLA: the value head size (0: ``head_dim``)."""
    shared_experts: int = 0
    """Experts every token runs beside its routed ones (DeepSeek's n_shared_experts, each of
    ``moe_inter``), TP-split like a dense MLP."""
    dp: int = 1
    """Attention data-parallel ranks (vLLM ``--data-parallel-size``): each rank an engine of its
    own (scheduler, KV cache) over ``tp`` GPUs, its attention and dense layers split over those;
    the MoE layers span all dp x tp GPUs and run every rank's tokens (gathered before the
    experts and scattered back after them, the ranks stepping together). One rank is what
    :func:`step_table` describes, in a balanced steady state (every rank as loaded as this)."""

    # ---- derived figures -----------------------------------------------------------------
    @property
    def heads_per_gpu(self) -> int:
        return self.heads // self.tp

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads one GPU holds (replicated when there are fewer than tp; MLA: the one latent)."""
        return 1 if self.mla else max(1, self.kv_heads // self.tp)

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def cache_head_dim(self) -> int:
        """The head size the KV cache is sized by, K and V each: MLA caches one latent of
        kv_lora_rank + rope_dim per token and layer, half of it counted as K and half as V."""
        return (self.kv_lora_rank + self.rope_dim + 1) // 2 if self.mla else self.head_dim

    def _attn_params(self, heads: float, kv_heads: float, *, replicated: float = 1.0) -> float:
        """Attention weights (``heads`` / ``kv_heads`` of them; MLA's down-projections counted
        ``replicated`` times: whole on every TP rank)."""
        h, d = self.hidden, self.head_dim
        if not self.mla:
            return h * (heads + 2 * kv_heads) * d + heads * d * h
        v = self.v_head_dim or d
        q = (self.q_lora_rank * replicated * h + self.q_lora_rank * heads * d) if self.q_lora_rank else h * heads * d
        kv = h * (self.kv_lora_rank + self.rope_dim) * replicated + self.kv_lora_rank * heads * (d - self.rope_dim + v)
        return q + kv + heads * v * h

    @property
    def moe_tp(self) -> int:
        """GPUs splitting each expert's intermediate size."""
        return max(1, self.tp * self.dp // self.ep)

    @property
    def n_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def n_dense_layers(self) -> int:
        return self.layers - self.n_moe_layers

    def window_counts(self) -> dict[int, int]:
        """Sliding window (0: full) -> layers with it."""
        out: dict[int, int] = {}
        for w in self.windows:
            out[w] = out.get(w, 0) + 1
        return out

    def params(self, *, active: bool = False) -> int:
        """Parameters of the model (``active``: those one token uses, top-k experts only);
        embeddings and the LM head included, norms left out."""
        attn = self._attn_params(self.heads, self.kv_heads)
        dense = 3 * self.hidden * self.inter
        n_exp = (self.topk if active else self.experts) + self.shared_experts
        moe = n_exp * 3 * self.hidden * self.moe_inter + self.experts * self.hidden
        emb = self.vocab * self.hidden * (1 if self.tie_word_embeddings else 2)
        return int(self.layers * attn + self.n_dense_layers * dense + self.n_moe_layers * moe + emb)

    def weight_bytes_per_gpu(self) -> int:
        """Bytes of weights one GPU holds: its share of every layer at the layers' dtypes, the
        router and the vocabulary-parallel embedding / LM head in BF16."""
        wb, mb = work.WEIGHT_BYTES[self.quant], work.WEIGHT_BYTES[self.moe_quant]
        h = self.hidden
        attn = self._attn_params(self.heads_per_gpu, self.kv_heads_per_gpu) * wb
        dense = 3 * h * (self.inter / self.tp) * wb
        moe = ((self.experts / self.ep) * 3 * h * (self.moe_inter / self.moe_tp) * mb + self.experts * h * 2
               + self.shared_experts * 3 * h * (self.moe_inter / self.tp) * wb)
        emb = (self.vocab / self.tp) * h * 2 * (1 if self.tie_word_embeddings else 2)
        return int(self.layers * attn + self.n_dense_layers * dense + self.n_moe_layers * moe + emb)

    @property
    def kv_layers(self) -> int:
        """Layers whose KV cache grows with every token: the full-attention ones. Sliding-window
        layers hold at most their window per sequence (vLLM's hybrid cache manager), so they
        are left out where full layers exist (all layers where none is)."""
        return sum(1 for w in self.windows if w == 0) or self.layers

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes on one GPU: K and V of :attr:`kv_layers` layers."""
        return int(2 * self.kv_layers * self.kv_heads_per_gpu * self.cache_head_dim * work.KV_BYTES[self.kv_dtype])

    def activation_reserve_bytes(self, *, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256) -> int:
        """Memory kept from the KV cache besides weights: the peak activations of a forward of
        ``max_num_batched_tokens`` tokens (hidden states, QKV, the MLP's intermediate), the
        sampler's FP32 logits of ``max_num_seqs`` sequences, and :data:`RESERVE_FIXED_BYTES`."""
        t = max_num_batched_tokens
        inter = max(self.inter / self.tp, self.topk * self.moe_inter / self.moe_tp if self.experts else 0.0)
        qkv = (self.heads_per_gpu + 2 * self.kv_heads_per_gpu) * self.head_dim
        act = t * (4 * self.hidden + qkv + 3 * inter) * 2
        logits = max_num_seqs * self.vocab * 4 * 2
        return int(act + logits + RESERVE_FIXED_BYTES)

    def label(self) -> str:
        moe = f", {self.experts} experts top-{self.topk}" if self.experts else ""
        heads = (f"{self.heads} heads x {self.head_dim}, MLA latent {self.kv_lora_rank}" if self.mla
                 else f"{self.heads}/{self.kv_heads} heads x {self.head_dim}")
        if self.shared_experts:
            moe += f" + {self.shared_experts} shared"
        return (f"{self.model_type}: {self.layers} layers, hidden {self.hidden}, {heads}{moe}; {self.quant} (experts {self.moe_quant}), KV {self.kv_dtype}, "
                f"TP {self.tp} EP {self.ep}" + (f" DP {self.dp}" if self.dp > 1 else ""))


def _need_int(config: Mapping[str, Any], *names: str, default: int | None = None) -> int:
    for name in names:
        v = config.get(name)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or v < 0:
                raise ValidationError(f"expected a non-negative integer, got {v!r}", field=name)
            return int(v)
    if default is not None:
        return default
    raise ValidationError("missing from the model config (needed to describe the model)", field=names[0])


def _quant(value: str, field: str) -> str:
    q = QUANTS.get(value.strip().lower()) if isinstance(value, str) else None
    if q is None:
        raise ValidationError(f"expected one of {', '.join(sorted(QUANTS))}, got {value!r}", field=field)
    return q


def describe_model(config: Mapping[str, Any], *, quant: str = "bf16", kv_dtype: str = "bf16", tp: int = 1,
                   ep: int = 1, moe_quant: str | None = None, dp: int = 1) -> ModelDescription:
    """Describe the model of a Hugging Face ``config.json`` (as a dict) on one GPU of a
    ``tp``-way tensor-parallel engine whose experts are split over ``ep`` of those GPUs; with
    ``dp`` attention data-parallel ranks (:attr:`ModelDescription.dp`), the experts over ``ep``
    of all dp x tp GPUs.

    ``quant`` is the dtype of the linear layers (``moe_quant``, default ``quant``, that of the
    experts); ``kv_dtype`` the KV cache's. ValidationError names the field that is missing or
    wrong.
    """
    if not isinstance(config, Mapping):
        raise ValidationError("expected a JSON object", field="config")
    if isinstance(config.get("text_config"), Mapping) and "hidden_size" not in config:
        config = config["text_config"]
    q = _quant(quant, "quant")
    mq = _quant(moe_quant, "moe_quant") if moe_quant is not None else q
    kv = kv_dtype.strip().lower().replace("float8", "fp8").replace("bfloat16", "bf16")
    if kv not in KV_DTYPES:
        raise ValidationError(f"expected one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}", field="kv_dtype")
    if tp < 1:
        raise ValidationError(f"expected >= 1, got {tp}", field="tp")
    if dp < 1:
        raise ValidationError(f"expected >= 1, got {dp}", field="dp")
    if ep < 1 or (tp * dp) % ep:
        gpus = f"tp={tp}" if dp == 1 else f"dp x tp = {dp * tp}"
        raise ValidationError(f"expected a divisor of {gpus}, got {ep}", field="ep")
    model_type = str(config.get("model_type") or (config.get("architectures") or ["unknown"])[0])
    hidden = _need_int(config, "hidden_size")
    layers = _need_int(config, "num_hidden_layers")
    heads = _need_int(config, "num_attention_heads")
    kv_heads = _need_int(config, "num_key_value_heads", default=heads)
    vocab = _need_int(config, "vocab_size")
    if min(hidden, layers, heads, kv_heads, vocab) < 1:
        raise ValidationError("hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads and "
                              "vocab_size must all be >= 1", field="hidden_size")
    head_dim = _need_int(config, "head_dim", default=hidden // heads)
    mla: dict[str, int] = {}
    if config.get("kv_lora_rank") is not None:  # DeepSeek-V2/V3, Kimi K2: multi-head latent attention
        rope = _need_int(config, "qk_rope_head_dim")
        mla = {"kv_lora_rank": _need_int(config, "kv_lora_rank"), "rope_dim": rope,
               "q_lora_rank": _need_int(config, "q_lora_rank", default=0),
               "v_head_dim": _need_int(config, "v_head_dim", default=0)}
        head_dim = _need_int(config, "qk_nope_head_dim") + rope
        if mla["kv_lora_rank"] < 1:
            raise ValidationError("expected >= 1", field="kv_lora_rank")
    if heads % tp:
        raise ValidationError(f"{heads} attention heads do not split over tp={tp}", field="tp")
    # experts: Qwen3-MoE / Qwen2-MoE num_experts, Mixtral / gpt-oss num_local_experts, DeepSeek
    # n_routed_experts (beside n_shared_experts every token runs)
    experts = _need_int(config, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    shared = 0
    topk = moe_inter = 0
    moe_layers = tuple(False for _ in range(layers))
    inter = 0
    if experts:
        topk = _need_int(config, "num_experts_per_tok", "experts_per_token")
        if "moe_intermediate_size" in config:  # Qwen MoE: experts differ from the dense MLP
            moe_inter = _need_int(config, "moe_intermediate_size")
            inter = _need_int(config, "intermediate_size", default=0)
        else:  # Mixtral, gpt-oss: every MLP is a MoE of intermediate_size experts
            moe_inter = _need_int(config, "intermediate_size")
        step = _need_int(config, "decoder_sparse_step", default=1) or 1
        only = config.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
            raise ValidationError("expected a list of layer indices", field="mlp_only_layers")
        first = _need_int(config, "first_k_dense_replace", default=0)  # DeepSeek: the first k layers dense
        freq = _need_int(config, "moe_layer_freq", default=1) or 1
        moe_layers = tuple((i not in only) and (i + 1) % step == 0 and i >= first and (i - first) % freq == 0
                           for i in range(layers))
        shared = _need_int(config, "n_shared_experts", default=0)
        if not all(moe_layers) and inter < 1:
            raise ValidationError("dense MLP layers need intermediate_size", field="intermediate_size")
        if experts % ep:
            raise ValidationError(f"{experts} experts do not split over ep={ep}", field="ep")
    else:
        inter = _need_int(config, "intermediate_size")
    windows = _windows(config, layers)
    return ModelDescription(
        model_type=model_type, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        inter=inter, vocab=vocab, tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        windows=windows, moe_layers=moe_layers, experts=experts, topk=topk, moe_inter=moe_inter,
        quant=q, moe_quant=mq, kv_dtype=kv, tp=tp, ep=ep, dp=dp, shared_experts=shared, **mla)


def _windows(config: Mapping[str, Any], layers: int) -> tuple[int, ...]:
    """Per-layer sliding window: ``layer_types`` (gpt-oss, Gemma) where given, else every
    layer windowed when ``sliding_window`` is set and ``use_sliding_window`` is not false
    (Mistral); Qwen's ``max_window_layers`` bounds the windowed layers from below."""
    sw = config.get("sliding_window")
    window = int(sw) if isinstance(sw, int | float) and not isinstance(sw, bool) and sw > 0 else 0
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ValidationError(f"expected {layers} entries (num_hidden_layers), got {len(types)}",
                                  field="layer_types")
        if window == 0 and any(t == "sliding_attention" for t in types):
            raise ValidationError("sliding_attention layers need sliding_window", field="sliding_window")
        return tuple(window if t == "sliding_attention" else 0 for t in types)
    if window and config.get("use_sliding_window", True) is not False:
        first = int(config.get("max_window_layers") or 0) if "max_window_layers" in config else 0
        return tuple(window if i >= first else 0 for i in range(layers))
    return tuple(0 for _ in range(layers))


# ---- step rows ------------------------------------------------------------------------------


def _gemm(name: str, m: int, n: int, k: int, dtype: str, repeat: float) -> dict[str, Any]:
    return {"name": name, "op": work.GEMM, "m": m, "n": n, "k": k, "dtype": dtype, "repeat": repeat}


def token_rows(desc: ModelDescription, tokens: int, *, moe_tokens: int | None = None) -> list[dict[str, Any]]:
    """Rows of one step whose shape depends only on the tokens in it: the QKV and O
    projections, the dense MLP or the MoE layer with its router GEMM, and the two TP
    all-reduces of every layer. ``moe_tokens``: the tokens the experts run (every
    data-parallel rank's; default ``tokens`` x dp, the ranks equally loaded)."""
    t = int(tokens)
    moe_t = int(moe_tokens) if moe_tokens is not None else t * desc.dp
    h, d, tp = desc.hidden, desc.head_dim, desc.tp
    if desc.mla:
        rows = _mla_rows(desc, t)
    else:
        rows = [_gemm("qkv_proj", t, (desc.heads_per_gpu + 2 * desc.kv_heads_per_gpu) * d, h, desc.quant, desc.layers),
                _gemm("o_proj", t, h, desc.heads_per_gpu * d, desc.quant, desc.layers)]
    if desc.n_dense_layers:
        rows += [_gemm("gate_up_proj", t, 2 * desc.inter // tp, h, desc.quant, desc.n_dense_layers),
                 _gemm("down_proj", t, h, desc.inter // tp, desc.quant, desc.n_dense_layers)]
    if desc.n_moe_layers and desc.shared_experts:
        width = desc.shared_experts * desc.moe_inter // tp
        rows += [_gemm("shared_gate_up_proj", t, 2 * width, h, desc.quant, desc.n_moe_layers),
                 _gemm("shared_down_proj", t, h, width, desc.quant, desc.n_moe_layers)]
    if desc.n_moe_layers:
        # data-parallel attention: the experts run every rank's tokens, gathered over the dp
        # ranks before them and scattered back after (vLLM's all-gather / reduce-scatter
        # all2all backend), once per MoE layer
        rows += [_gemm("router", t, desc.experts, h, "bf16", desc.n_moe_layers),
                 {"name": "experts", "op": work.MOE, "tokens": moe_t, "hidden": h, "inter": desc.moe_inter,
                  "experts": desc.experts, "topk": desc.topk, "tp": desc.moe_tp, "ep": desc.ep,
                  "dtype": desc.moe_quant, "distribution": "balanced", "repeat": desc.n_moe_layers}]
        if desc.dp > 1:
            gathered = float(moe_t * h * 2)
            rows += [{"name": "dp_gather", "op": work.COLLECTIVE, "collective": "all_gather", "ranks": desc.dp,
                      "comm_bytes": gathered, "impl": "nccl", "repeat": desc.n_moe_layers},
                     {"name": "dp_scatter", "op": work.COLLECTIVE, "collective": "reduce_scatter",
                      "ranks": desc.dp, "comm_bytes": gathered, "impl": "nccl", "repeat": desc.n_moe_layers}]
    if tp > 1:
        size = t * h * 2
        impl = "vllm_custom_graph" if size <= CUSTOM_ALL_REDUCE_MAX_BYTES else "nccl"
        rows.append({"name": "tp_all_reduce", "op": work.COLLECTIVE, "collective": "all_reduce", "ranks": tp,
                     "comm_bytes": float(size), "impl": impl, "repeat": 2 * desc.layers})
    return rows


def _mla_rows(desc: ModelDescription, t: int) -> list[dict[str, Any]]:
    """Multi-head latent attention's projections of ``t`` tokens (vLLM's MLA): the query's
    down- and up-projection (or one projection without a query rank), the KV latent's
    down-projection (kept whole on every TP rank), the latent's up-projection into each head's
    no-rope key and value (absorbed into the query and output in a decode: the same FLOPs), and
    the output projection."""
    h, d, hp, n = desc.hidden, desc.head_dim, desc.heads_per_gpu, desc.layers
    v = desc.v_head_dim or d
    rows = ([_gemm("q_a_proj", t, desc.q_lora_rank, h, desc.quant, n),
             _gemm("q_b_proj", t, hp * d, desc.q_lora_rank, desc.quant, n)] if desc.q_lora_rank
            else [_gemm("q_proj", t, hp * d, h, desc.quant, n)])
    return rows + [_gemm("kv_a_proj", t, desc.kv_lora_rank + desc.rope_dim, h, desc.quant, n),
                   _gemm("kv_b_proj", t, hp * (d - desc.rope_dim + v), desc.kv_lora_rank, desc.quant, n),
                   _gemm("o_proj", t, h, hp * v, desc.quant, n)]


def head_rows(desc: ModelDescription, sequences: int) -> list[dict[str, Any]]:
    """The LM head over the last token of each sequence that samples, and (TP) the gather of
    the vocabulary-parallel logits."""
    s = int(sequences)
    rows = [_gemm("lm_head", s, desc.vocab // desc.tp, desc.hidden, "bf16", 1)]
    if desc.tp > 1:
        rows.append({"name": "logits_gather", "op": work.COLLECTIVE, "collective": "all_gather", "ranks": desc.tp,
                     "comm_bytes": float(s * desc.vocab * 2), "impl": "nccl", "repeat": 1})
    return rows


def _attention(desc: ModelDescription, phase: str, batch: int, seq: int, context: int, window: int,
               repeat: int) -> dict[str, Any]:
    kv_heads, head_dim = desc.kv_heads_per_gpu, desc.head_dim
    if desc.mla:
        # MLA: a prefill attends over keys and values decompressed per head (multi-head, the
        # query's head size); a decode over the one cached latent each head shares, its bytes
        # those of the latent (K and V halves of :attr:`ModelDescription.cache_head_dim`)
        kv_heads, head_dim = ((desc.heads_per_gpu, desc.head_dim) if phase == "prefill"
                              else (1, desc.cache_head_dim))
    return {"name": f"attention_{phase}", "op": work.ATTENTION, "phase": phase, "batch": int(batch), "seq": int(seq),
            "context": int(context), "heads": desc.heads_per_gpu, "kv_heads": kv_heads,
            "head_dim": head_dim, "window": int(window), "kv_dtype": desc.kv_dtype, "repeat": repeat}


def prefill_attention_rows(desc: ModelDescription, batch: int, seq: int) -> list[dict[str, Any]]:
    """``batch`` sequences of ``seq`` new tokens and no cached prefix, one row per window kind."""
    return [_attention(desc, "prefill", batch, seq, seq, w, n) for w, n in sorted(desc.window_counts().items())]


def decode_attention_rows(desc: ModelDescription, batch: int, context: int) -> list[dict[str, Any]]:
    """``batch`` decoding sequences at ``context`` tokens each, one row per window kind."""
    return [_attention(desc, "decode", batch, 1, context, w, n) for w, n in sorted(desc.window_counts().items())]


def _check_prefill(prefill: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for i, item in enumerate(prefill):
        try:
            new, cached = int(item[0]), int(item[1])
        except (TypeError, ValueError, IndexError):
            raise ValidationError(f"entry {i}: expected (new_tokens, cached_tokens), got {item!r}",
                                  field="prefill") from None
        if new < 1 or cached < 0:
            raise ValidationError(f"entry {i}: expected new_tokens >= 1 and cached_tokens >= 0, got {item!r}",
                                  field="prefill")
        out.append((new, cached))
    return out


def step_table(desc: ModelDescription, *, prefill: Sequence[tuple[int, int]] = (),
               decode_contexts: np.ndarray | Sequence[int] = ()) -> KernelTable:
    """The LLM-operator rows of one engine step on one GPU, each with ``repeat``.

    ``prefill``: per prefilling sequence, (new tokens in this step, tokens already cached);
    ``decode_contexts``: per decoding sequence, its context after the step (cached + 1).
    Prefill chunks of equal shape share one attention row (``batch`` = how many); a chunk on a
    cached prefix of c tokens is the prefill of c + n tokens less that of c, so it is emitted
    as a row of c + n with ``repeat`` +1 and a row of c with ``repeat`` -1 (an attention row
    is a prefill without a cached prefix). Decodes share one row at their mean context.
    """
    chunks = _check_prefill(prefill)
    ctx = np.asarray(decode_contexts, dtype=np.int64)
    if ctx.size and int(ctx.min()) < 1:
        raise ValidationError("expected contexts >= 1", field="decode_contexts")
    tokens = sum(n for n, _ in chunks) + int(ctx.size)
    if tokens < 1:
        raise ValidationError("a step needs at least one prefill chunk or decoding sequence", field="prefill")
    rows = token_rows(desc, tokens)
    groups: dict[tuple[int, int], int] = {}
    for c in chunks:
        groups[c] = groups.get(c, 0) + 1
    for (new, cached), count in sorted(groups.items()):
        if cached == 0:
            rows += prefill_attention_rows(desc, count, new)
            continue
        for r in prefill_attention_rows(desc, count, new + cached):
            rows.append(r)
        for r in prefill_attention_rows(desc, count, cached):
            r["repeat"] = -r["repeat"]
            rows.append(r)
    if ctx.size:
        rows += decode_attention_rows(desc, int(ctx.size), max(1, round(float(ctx.mean()))))
    rows += head_rows(desc, len(chunks) + int(ctx.size))
    return KernelTable.from_rows(rows)


def overhead_ns(desc: ModelDescription, spec: GPUSpec, tokens: np.ndarray | float,
                sequences: np.ndarray | float) -> np.ndarray:
    """GPU and host time of one step besides its LLM-operator rows (ns), per entry of
    ``tokens`` / ``sequences``:

    - per layer, :data:`ELEMENTWISE_KERNELS_PER_LAYER` memory-bound kernels (fused
      add + RMSNorm twice, rotary embedding, the dense MLP's activation) streaming
      tokens x (8 hidden + 4 (q + k width) + 3 MLP width) x 2 bytes at
      :data:`STREAM_EFFICIENCY` of the spec's bandwidth, each at least
      :data:`ELEMENTWISE_FLOOR_NS` (a CUDA graph: no launch gaps beyond that floor);
    - the sampler: the FP32 logits of the sampling sequences read three times plus
      :data:`SAMPLER_FIXED_NS`;
    - the host: :data:`STEP_HOST_NS` + :data:`STEP_HOST_PER_SEQUENCE_NS` per sequence.
    """
    return np.asarray(gpu_overhead_ns(desc, spec, tokens, sequences) + host_ns(sequences), dtype=np.float64)


def host_ns(sequences: np.ndarray | float) -> np.ndarray:
    """Host time of one step (ns): :data:`STEP_HOST_NS` + :data:`STEP_HOST_PER_SEQUENCE_NS` per
    scheduled sequence. With vLLM's async scheduling it overlaps the GPU's work of the step
    before, so a step takes the longer of the two."""
    return np.asarray(STEP_HOST_NS + STEP_HOST_PER_SEQUENCE_NS * np.asarray(sequences, dtype=np.float64),
                      dtype=np.float64)


def gpu_overhead_ns(desc: ModelDescription, spec: GPUSpec, tokens: np.ndarray | float,
                    sequences: np.ndarray | float) -> np.ndarray:
    """The GPU part of :func:`overhead_ns`: elementwise streams and the sampler."""
    t = np.asarray(tokens, dtype=np.float64)
    s = np.asarray(sequences, dtype=np.float64)
    bw = spec.bandwidth_bps * STREAM_EFFICIENCY
    qk = (desc.heads_per_gpu + desc.kv_heads_per_gpu) * desc.head_dim
    per_token_dense = (8 * desc.hidden + 4 * qk + 3 * desc.inter / desc.tp) * 2
    per_token_moe = (8 * desc.hidden + 4 * qk) * 2
    stream = t * (desc.n_dense_layers * per_token_dense + desc.n_moe_layers * per_token_moe) / bw * 1e9
    floor = desc.layers * ELEMENTWISE_KERNELS_PER_LAYER * ELEMENTWISE_FLOOR_NS
    sampler = s * (desc.vocab / desc.tp) * 4 * 3 / bw * 1e9 + SAMPLER_FIXED_NS
    return np.asarray(np.maximum(stream, floor) + sampler, dtype=np.float64)


def step_time_ns(desc: ModelDescription, spec: GPUSpec, cal: LlmCalibration, *,
                 prefill: Sequence[tuple[int, int]] = (),
                 decode_contexts: np.ndarray | Sequence[int] = (), async_scheduling: bool = True) -> float:
    """Wall time of one engine step (ns): every row of :func:`step_table` at its model time
    times its ``repeat``, plus :func:`gpu_overhead_ns`, and :func:`host_ns` on top
    (``async_scheduling`` False) or hidden behind that GPU time where it is shorter (True: vLLM
    builds the next step while this one runs)."""
    table = step_table(desc, prefill=prefill, decode_contexts=decode_contexts)
    ctx = np.asarray(decode_contexts)
    graphed = sum(int(p[0]) for p in prefill) + int(ctx.size) <= CUDA_GRAPH_MAX_TOKENS
    times = model_times(table, spec, cal, graphed=graphed).model_ns
    total = float(np.sum(times * table["repeat"]))
    ctx = np.asarray(decode_contexts)
    chunks = len(prefill)
    tokens = sum(int(p[0]) for p in prefill) + int(ctx.size)
    seqs = chunks + int(ctx.size)
    gpu = max(total, 0.0) + float(gpu_overhead_ns(desc, spec, tokens, seqs))
    host = float(host_ns(seqs))
    return max(gpu, host) if async_scheduling else gpu + host
