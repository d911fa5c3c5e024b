"""A served model from its description: the bundled example ``config.json`` files, the
step-time source and KV cache of a config on a GPU, and the basis an answer quotes.

One wiring for every caller (``cascade scenario --hf-config``, ``POST /api/scenarios`` with a
``description``): :func:`describe_serving` turns a Hugging Face config (a dict), a GPU spec,
the precision and the TP / EP split into a :class:`DescribedServing` (the
:class:`~cascade.serving.described.DescribedStepCost` the simulator asks for step times, the
KV cache vLLM would size on that GPU, the model's context window and the
:class:`ServingBasis` that says where the figures come from, with the LLM kernel model's
expected error for the model's rows on that GPU). Cheaper, with nothing timed:
:func:`described_footprint` (weights and KV cache per GPU, whether vLLM would start) and
:func:`checkpoint_quant` (the precision a checkpoint's ``quantization_config`` names), for
callers that choose a TP or a precision before building one.

The example configs under ``cascade/serving/model_configs/`` carry the published
architecture figures of their models (no weights, no tokenizer); :data:`EXAMPLE_CONFIGS`
lists them. Pure apart from reading those package files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

from cascade.errors import NotFoundError, TooLargeError, ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.serving.described import DescribedStepCost, described_kv, group_kv, sglang_kv
from cascade.serving.kvcache import KVConfig
from cascade.serving.scenario import Scenario
from cascade.serving.schedulers import Sglang, Static, Vllm
from cascade.serving.sim import SCHEDULERS

#: Largest model config accepted inline (bytes of its JSON): a real config.json is a few KB.
MAX_CONFIG_BYTES = 256 * 1024

_NonNeg = Annotated[int, msgspec.Meta(ge=0, le=2**31)]
_Pos = Annotated[int, msgspec.Meta(ge=1, le=2**31)]


class ExampleConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One bundled example ``config.json``: a public architecture's figures."""

    name: str
    """What ``description.config`` names it by."""
    title: str
    """The model it follows."""
    summary: str
    """Its architecture in a line (dense / MoE, layers, heads, experts)."""
    quant: str = "bf16"
    """The precision its published checkpoint serves in (a suggestion, not a rule)."""
    moe_quant: str | None = None
    """The experts' precision in that checkpoint, where it differs."""
    context_tokens: int
    """max_position_embeddings."""
    config: dict[str, Any]
    """The config.json itself."""


#: name -> (the model it follows, suggested quant, suggested expert quant).
EXAMPLE_CONFIGS: dict[str, tuple[str, str, str | None]] = {
    "llama-3.1-8b": ("Llama-3.1-8B (dense, GQA)", "bf16", None),
    "qwen3-32b": ("Qwen3-32B (dense, GQA)", "bf16", None),
    "gpt-oss-120b": ("gpt-oss-120b (MoE, 128 experts, alternating sliding window)", "bf16", "mxfp4"),
    "deepseek-v3": ("DeepSeek-V3 / R1 (MoE, 256 experts + 1 shared, multi-head latent attention)", "fp8-block",
                    None),
}
ExampleName = Literal[tuple(EXAMPLE_CONFIGS)]  # type: ignore[valid-type]


def example_config(name: str) -> dict[str, Any]:
    """The bundled config.json named ``name`` (NotFoundError lists the names)."""
    if name not in EXAMPLE_CONFIGS:
        raise NotFoundError(f"no example model config {name!r}; known: {', '.join(EXAMPLE_CONFIGS)}")
    text = resources.files("cascade.serving").joinpath("model_configs", f"{name}.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def example_configs() -> list[ExampleConfig]:
    """Every bundled example, with its summary."""
    from cascade.llm.describe import describe_model

    out = []
    for name, (title, quant, moe_quant) in EXAMPLE_CONFIGS.items():
        config = example_config(name)
        desc = describe_model(config)
        kind = (f"MoE, {desc.experts} experts (top {desc.topk})" if desc.experts else "dense")
        attention = (f"{desc.heads} heads on one latent KV of {desc.kv_lora_rank}" if desc.mla
                     else f"{desc.heads} heads / {desc.kv_heads} KV heads")
        summary = f"{kind}; {desc.layers} layers, hidden {desc.hidden}, {attention}"
        out.append(ExampleConfig(name=name, title=title, summary=summary, quant=quant, moe_quant=moe_quant,
                                 context_tokens=int(config.get("max_position_embeddings") or 0),
                                 config=config))
    return out


class ConfigFields(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a Hugging Face config.json a description reads, with their types (the
    config may carry any others; they are ignored)."""

    model_type: str | None = None
    architectures: list[str] | None = None
    hidden_size: _Pos
    num_hidden_layers: Annotated[int, msgspec.Meta(ge=1, le=4096)]
    num_attention_heads: _Pos
    num_key_value_heads: _Pos | None = None
    head_dim: _Pos | None = None
    intermediate_size: _NonNeg | None = None
    vocab_size: _Pos
    num_experts: _NonNeg | None = None
    num_local_experts: _NonNeg | None = None
    num_experts_per_tok: _NonNeg | None = None
    experts_per_token: _NonNeg | None = None
    moe_intermediate_size: _NonNeg | None = None
    decoder_sparse_step: _NonNeg | None = None
    mlp_only_layers: list[_NonNeg] | None = None
    sliding_window: _NonNeg | None = None
    use_sliding_window: bool | None = None
    max_window_layers: _NonNeg | None = None
    layer_types: list[str] | None = None
    tie_word_embeddings: bool | None = None
    max_position_embeddings: _Pos | None = None
    # multi-head latent attention and DeepSeek's MoE (DeepSeek-V2/V3, Kimi K2)
    kv_lora_rank: _Pos | None = None
    q_lora_rank: _NonNeg | None = None
    qk_nope_head_dim: _NonNeg | None = None
    qk_rope_head_dim: _NonNeg | None = None
    v_head_dim: _Pos | None = None
    n_routed_experts: _NonNeg | None = None
    n_shared_experts: _NonNeg | None = None
    first_k_dense_replace: _NonNeg | None = None
    moe_layer_freq: _Pos | None = None


def checked_config(config: dict[str, Any], field: str) -> dict[str, Any]:
    """``config`` (or its ``text_config``) when the fields a description reads have their
    types; else a ValidationError naming ``field.<name>``; over :data:`MAX_CONFIG_BYTES` a
    TooLargeError."""
    size = len(msgspec.json.encode(config))
    if size > MAX_CONFIG_BYTES:
        raise TooLargeError(field, size, MAX_CONFIG_BYTES)
    inner = config.get("text_config")
    if isinstance(inner, dict) and "hidden_size" not in config:
        config, field = inner, f"{field}.text_config"
    try:
        msgspec.convert(config, ConfigFields)
    except msgspec.ValidationError as exc:
        text = str(exc)
        where = text.split("at `$.", 1)[1].split("`", 1)[0] if "at `$." in text else ""
        if text.startswith("Object missing required field `"):
            where = text.split("`", 2)[1]
        name = where.split("[", 1)[0]
        raise ValidationError(text.split(" - at `", 1)[0], field=f"{field}.{name}" if name else field) from None
    return config


class CalibrationRef(msgspec.Struct, frozen=True, kw_only=True):
    """Which LLM kernel calibration timed the steps."""

    id: str
    version: str
    digest: str


class ExpectedKernelError(msgspec.Struct, frozen=True, kw_only=True):
    """The LLM kernel model's measured error for the model's operators on the GPU (per kernel,
    on held-out shapes: not an error of TTFT or TPOT)."""

    mape_pct: float | None
    worst_pct: float | None
    cells: int
    basis: str
    """Which protocol cells it comes from."""


class ServingBasis(msgspec.Struct, frozen=True, kw_only=True):
    """Where an answer's step times come from."""

    kind: Literal["described", "traced"]
    """described: a model config timed by the LLM kernel model, no trace; traced: the per-step
    times of a finished simulation of a traced workload."""
    workload: str
    """The model (its description's label, or the trace's id)."""
    gpu: str
    """GPU spec id."""
    gpu_name: str = ""
    gpu_memory_gb: float | None = None
    step_model: str
    """The step-time source as the result names it."""
    llm_calibration: CalibrationRef | None = None
    expected_kernel_error: ExpectedKernelError | None = None
    """Null for traced answers (their error is the simulated run's)."""
    kv_cache_tokens: int | None = None
    """Tokens the KV cache of one replica holds."""
    kv_cache_sizing: str | None = None
    """How it was sized: vLLM's rule (memory x gpu_memory_utilization - weights - activations),
    SGLang's (memory x mem_fraction_static - weights), or a given block count."""
    weights_gib_per_gpu: float | None = None
    context_tokens: int | None = None
    """The model's context window (max_position_embeddings), when known."""
    data_parallel: int = 1
    """Attention data-parallel ranks of each replica, simulated together (:func:`data_parallel`);
    ``kv_cache_tokens`` is one rank's."""


@dataclass(frozen=True)
class DescribedServing:
    """A described model on one GPU, ready to simulate."""

    cost: DescribedStepCost
    kv: KVConfig
    context_tokens: int | None
    basis: ServingBasis

    def serve(self, scenario: Scenario) -> Scenario:
        """``scenario`` as this model's engines take it: no request past its context window, each
        replica's data-parallel ranks engines of their own (:func:`data_parallel`)."""
        if self.context_tokens is not None:
            scenario = msgspec.structs.replace(scenario, max_context_tokens=self.context_tokens)
        return data_parallel(scenario, self.basis.data_parallel)


def describe_serving(config: dict[str, Any], spec: GPUSpec, *, quant: str | None = None, moe_quant: str | None = None,
                     kv_dtype: str = "bf16", tp: int = 1, ep: int = 1, dp: int = 1, calibration: str | None = None,
                     max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                     gpu_memory_utilization: float = 0.9, block_size: int = 16,
                     num_gpu_blocks_override: int | None = None, label: str = "",
                     typical_prompt: int = 1024, typical_batch: int = 64,
                     async_scheduling: bool = True, engine: str = "vllm") -> DescribedServing:
    """The step-time source, KV cache and basis of ``config`` on ``spec``.

    ``quant`` None: the precision the checkpoint's ``quantization_config`` names
    (:func:`checkpoint_quant`, bf16 without one; ``moe_quant`` then its experts' unless given).
    ``typical_prompt`` / ``typical_batch`` shape the step whose rows the expected kernel error
    is weighted over (a prefill of that many tokens beside a decode batch of that size).
    ``engine`` ``sglang`` (:func:`kv_engine`): the KV cache sized as SGLang sizes it
    (:func:`~cascade.serving.described.sglang_kv`, ``gpu_memory_utilization`` and ``block_size``
    unused) unless ``num_gpu_blocks_override`` fixes it.
    ValidationError names the config field or setting that is wrong."""
    from cascade.llm.describe import describe_model, step_table
    from cascade.llm.model import expected_error, load_llm_calibration

    fields = _text_config(config)
    heads, hidden = fields.get("num_attention_heads"), fields.get("hidden_size")
    if fields.get("head_dim") is None and isinstance(heads, int) and isinstance(hidden, int) and 0 < hidden < heads:
        raise ValidationError(f"hidden_size {hidden} / num_attention_heads {heads} leaves no head dimension; give "
                              "head_dim", field="head_dim")
    if quant is None:
        quant, own = checkpoint_quant(config)
        moe_quant = moe_quant or own
    desc = describe_model(config, quant=quant, moe_quant=moe_quant, kv_dtype=kv_dtype, tp=tp, ep=ep, dp=dp)
    cal = load_llm_calibration(calibration)
    cost = DescribedStepCost(desc, spec, cal, max_tokens=max_num_batched_tokens, max_seqs=max_num_seqs,
                             async_scheduling=async_scheduling)
    if label:
        cost.basis["config"] = label
    if engine == "sglang" and num_gpu_blocks_override is None:
        kv = sglang_kv(desc, spec)
        sizing = f"SGLang's: mem_fraction_static {kv.gpu_memory_utilization:g} of {spec.memory_gb:g} GB less the weights"
    else:
        kv = described_kv(desc, spec, gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
                          max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                          num_gpu_blocks_override=num_gpu_blocks_override)
        sizing = (f"given: {num_gpu_blocks_override} blocks of {block_size} tokens" if num_gpu_blocks_override
                  else f"vLLM's: gpu_memory_utilization {gpu_memory_utilization:g} of {spec.memory_gb:g} GB less "
                       "the weights and activations")
    kv_tokens = kv.num_blocks() * kv.block_size
    weights = round(desc.weight_bytes_per_gpu() / (1 << 30), 2)
    cost.basis["kv_cache_tokens"] = kv_tokens
    cost.basis["weights_gib_per_gpu"] = weights
    prompt = max(1, min(typical_prompt, max_num_batched_tokens))
    batch = max(1, min(typical_batch, max_num_seqs))
    table = step_table(desc, prefill=[(prompt, 0)], decode_contexts=np.full(batch, prompt + 1))
    err = expected_error(cal, table, None, spec)
    context_tokens = context_tokens_of(config)
    basis = ServingBasis(
        kind="described", workload=desc.label(), gpu=spec.id, gpu_name=spec.name, gpu_memory_gb=spec.memory_gb,
        step_model=cost.source,
        llm_calibration=CalibrationRef(id=cal.id, version=cal.version,
                                       digest=str(cost.basis["llm_calibration"]["digest"])),
        expected_kernel_error=ExpectedKernelError(mape_pct=err.mape_pct, worst_pct=err.worst_pct,
                                                  cells=err.cells, basis=err.basis),
        kv_cache_tokens=kv_tokens, kv_cache_sizing=sizing, weights_gib_per_gpu=weights, context_tokens=context_tokens,
        data_parallel=dp)
    return DescribedServing(cost=cost, kv=group_kv(kv, dp), context_tokens=context_tokens, basis=basis)


def kv_engine(scheduler: Any) -> str:
    """Whose rule sizes the KV cache under ``scheduler`` (a name, dict or config): ``sglang``
    for SGLang's scheduler, else ``vllm``."""
    return "sglang" if isinstance(SCHEDULERS.resolve(scheduler, "scheduler"), Sglang) else "vllm"


def data_parallel(scenario: Scenario, dp: int) -> Scenario:
    """The scenario with each replica a group of ``dp`` attention data-parallel ranks stepping
    together (vLLM's data-parallel engines: each rank its own scheduler limits and KV cache; the
    step cost :class:`~cascade.serving.described.DescribedStepCost` times the group): the
    scheduler's limits ``dp`` times one rank's, no request's prefill chunk above one rank's
    token budget. Call it after the limits are resolved for the GPU (:func:`~cascade.serving.
    requests.for_gpu`)."""
    if dp <= 1:
        return scenario
    sched = SCHEDULERS.resolve(scenario.scheduler, "scheduler")
    if isinstance(sched, Vllm):
        budget, seqs = sched.limits
        sched = msgspec.structs.replace(
            sched, max_num_batched_tokens=budget * dp, max_num_seqs=seqs * dp,
            long_prefill_token_threshold=min(sched.long_prefill_token_threshold or budget, budget))
    elif isinstance(sched, Sglang):
        sched = msgspec.structs.replace(
            sched, chunked_prefill_size=sched.chunked_prefill_size * dp, max_prefill_tokens=sched.max_prefill_tokens * dp,
            max_running_requests=sched.max_running_requests and sched.max_running_requests * dp)
    elif isinstance(sched, Static):
        sched = msgspec.structs.replace(sched, batch_size=sched.batch_size * dp)
    return msgspec.structs.replace(scenario, scheduler=sched)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The fields a description reads: the config's, or its ``text_config``'s (a multimodal
    config)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) and "hidden_size" not in config else config


def context_tokens_of(config: dict[str, Any]) -> int | None:
    """The model's context window (``max_position_embeddings``, the text config's where the
    config nests one), or None when the config does not say."""
    context = config.get("max_position_embeddings")
    if _text_config(config) is not config:
        context = config["text_config"].get("max_position_embeddings", context)
    return int(context) if isinstance(context, int) and not isinstance(context, bool) and context > 1 else None


def checkpoint_quant(config: dict[str, Any]) -> tuple[str, str | None]:
    """(linear layers' dtype, experts' dtype or None for the same) a checkpoint serves in, from
    its ``quantization_config`` (bf16 where it names none): ``mxfp4`` -> MXFP4 experts beside
    BF16 attention (gpt-oss, as vLLM serves it); FP8 with ``weight_block_size`` -> fp8-block;
    other FP8 -> fp8; NVFP4 (ModelOpt) -> fp4; 4-bit AWQ / GPTQ -> int4."""
    qc = _text_config(config).get("quantization_config", config.get("quantization_config"))
    if not isinstance(qc, dict):
        return "bf16", None
    method = str(qc.get("quant_method", "")).lower()
    algo = str(qc.get("quant_algo", "")).lower()
    if method == "mxfp4":
        return "bf16", "mxfp4"
    if method == "fp8":
        return ("fp8-block" if qc.get("weight_block_size") else "fp8"), None
    if method == "modelopt" and "fp4" in algo:
        return "fp4", None
    if method == "modelopt" and "fp8" in algo:
        return "fp8", None
    if method in ("awq", "gptq") and qc.get("bits") == 4:
        return "int4", None
    return "bf16", None


class DescribedFootprint(msgspec.Struct, frozen=True, kw_only=True):
    """What a described model takes on one GPU of its engine, as vLLM sizes it (no step timed)."""

    weight_bytes_per_gpu: int
    kv_cache_tokens: int
    """Tokens the KV cache holds (0: the weights and reserve leave no room for one block)."""
    context_tokens: int | None
    """max_position_embeddings."""

    @property
    def fits(self) -> bool:
        """vLLM would start with its defaults: the KV cache holds one request of the whole
        context window (of at least one block where the config names no window)."""
        return self.kv_cache_tokens >= (self.context_tokens or 1)


def described_footprint(config: dict[str, Any], spec: GPUSpec, *, quant: str = "bf16",
                        moe_quant: str | None = None, kv_dtype: str = "bf16", tp: int = 1, ep: int = 1,
                        max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                        gpu_memory_utilization: float = 0.9, block_size: int = 16) -> DescribedFootprint:
    """The weights and KV cache of ``config`` on one GPU of a ``tp``-way engine of ``spec``,
    from the description alone (cheap: nothing is timed). ValidationError names a config field
    or setting (``tp``, ``ep``, ``quant``) that cannot be described."""
    from cascade.llm.describe import describe_model

    desc = describe_model(config, quant=quant, moe_quant=moe_quant, kv_dtype=kv_dtype, tp=tp, ep=ep)
    kv = described_kv(desc, spec, gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
                      max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    try:
        tokens = kv.num_blocks() * kv.block_size
    except ValidationError:
        tokens = 0
    return DescribedFootprint(weight_bytes_per_gpu=desc.weight_bytes_per_gpu(), kv_cache_tokens=tokens,
                              context_tokens=context_tokens_of(config))


def traced_basis(*, workload: str, spec_id: str, spec: GPUSpec | None, step_model: str, kv: KVConfig,
                 context_tokens: int | None) -> ServingBasis:
    """The basis of an answer from a finished simulation's steps."""
    return ServingBasis(kind="traced", workload=workload, gpu=spec_id, gpu_name=spec.name if spec else "",
                        gpu_memory_gb=spec.memory_gb if spec else None, step_model=step_model,
                        kv_cache_tokens=kv.num_blocks() * kv.block_size, context_tokens=context_tokens)
