"""Bodies of the OpenAI-style ``/v1``: completion and chat requests, and the answers in
OpenAI's shapes with Cascade's ``metrics`` and ``cascade`` objects."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from cascade.calibration.accuracy import AccuracyEstimate
from cascade.runs.estimates import DEFAULT_TOKEN_BUDGET
from cascade.serving.description import ServingBasis
from cascade.serving.stepmodel import CalibrationRange, OutOfRange

#: Where a /v1 model's figures come from: a finished simulation of a traced workload, or a
#: model described by its config.json and timed by the LLM kernel model (no trace).
Source = Literal["traced", "described"]


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False


class CommonRequest(msgspec.Struct, kw_only=True):
    model: str
    """A model id from GET /v1/models (an unknown one is a 404)."""
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Output tokens (default 16); prompt + max_tokens must fit the model's max_model_len."""
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=1)] = 1
    cascade_pace: bool = False
    cascade_token_budget: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = DEFAULT_TOKEN_BUDGET
    """Token budget of one engine step (chunked prefill); vLLM's max_num_batched_tokens."""
    cascade_itl: Literal["summary", "full"] = "summary"
    """'full' adds ``metrics.itl_ms``, every inter-token gap, to the answer."""
    temperature: Annotated[float, msgspec.Meta(extra_json_schema={"minimum": 0, "maximum": 2})] | None = None
    top_p: Annotated[float, msgspec.Meta(extra_json_schema={"minimum": 0, "maximum": 1})] | None = None
    presence_penalty: Annotated[float, msgspec.Meta(
        extra_json_schema={"minimum": -2, "maximum": 2})] | None = None
    frequency_penalty: Annotated[float, msgspec.Meta(
        extra_json_schema={"minimum": -2, "maximum": 2})] | None = None


PROMPT_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string"},
    {"type": "array", "minItems": 1, "items": {"type": "string"}},
    {"type": "array", "minItems": 1, "items": {"type": "integer"}},
    {"type": "array", "minItems": 1,
     "items": {"type": "array", "minItems": 1, "items": {"type": "integer"}}},
]}


class CompletionRequest(CommonRequest, kw_only=True):
    """OpenAI completions request (other OpenAI fields are accepted and ignored)."""

    prompt: Annotated[msgspec.Raw, msgspec.Meta(extra_json_schema=PROMPT_SCHEMA)]
    """The prompt's JSON, counted by :func:`cascade.serving.prompts.count_prompt_json`."""


MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role"], "properties": {
            "role": {"type": "string"},
            "content": {"anyOf": [
                {"type": "string"}, {"type": "null"},
                {"type": "array", "items": {"type": "object", "properties": {
                    "type": {"type": "string"}, "text": {"type": "string"}}}}]}}}}


class ChatRequest(CommonRequest, kw_only=True):
    """OpenAI chat completions request (other OpenAI fields are accepted and ignored)."""

    messages: Annotated[Any, msgspec.Meta(extra_json_schema=MESSAGES_SCHEMA)]


class KernelProvenance(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How the sim's kernel times were predicted (empty when its result could not be read)."""

    model: str | msgspec.UnsetType = msgspec.UNSET
    spec_id: str | msgspec.UnsetType = msgspec.UNSET
    spec_hash: str | msgspec.UnsetType = msgspec.UNSET
    source_spec_id: str | msgspec.UnsetType = msgspec.UNSET
    calibration: str | msgspec.UnsetType = msgspec.UNSET
    accuracy: AccuracyEstimate | None | msgspec.UnsetType = msgspec.UNSET
    extrapolated: int | msgspec.UnsetType = msgspec.UNSET
    kernel_count: int | msgspec.UnsetType = msgspec.UNSET
    extrapolation: dict[str, int] | msgspec.UnsetType = msgspec.UNSET


class CascadeInfo(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where an estimate came from: the sim, its step model's calibration, extrapolation; for a
    described model its basis (no sim, run or trace: those are empty)."""

    config: str
    """GPU spec id."""
    sim: str
    run: str
    trace: str
    extrapolated: bool
    extrapolation: dict[str, OutOfRange]
    calibration_range: CalibrationRange | None
    """The step shapes the sim's step model was fitted on (null: described, nothing fitted)."""
    kernels: KernelProvenance
    prompt_tokens_approximate: bool
    method: str
    prefill_steps: int
    token_budget: int
    idle_replica: bool
    source: Source = "traced"
    basis: ServingBasis | None = None
    """Where the step times come from: the workload, the GPU, the step-time source and, for a
    described model, the LLM calibration and the kernel model's expected error."""


class TokenTime(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    index: int
    time_ms: float
    gap_ms: float


class ChunkDelta(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    role: Literal["assistant"] | msgspec.UnsetType = msgspec.UNSET
    content: str


class ChunkChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    index: int
    logprobs: None
    finish_reason: Literal["length"] | None
    text: str | msgspec.UnsetType = msgspec.UNSET
    """Completions."""
    delta: ChunkDelta | msgspec.UnsetType = msgspec.UNSET
    """Chat completions."""


class StreamChunk(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The JSON ``data`` of one streamed event: a token, the last with ``metrics`` and
    ``cascade``, and with ``stream_options.include_usage`` a final chunk of ``usage`` only."""

    id: str
    object: Literal["text_completion", "chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    cascade_token: TokenTime | msgspec.UnsetType = msgspec.UNSET
    metrics: MetricsBody | msgspec.UnsetType = msgspec.UNSET
    cascade: CascadeInfo | msgspec.UnsetType = msgspec.UNSET
    usage: UsageBody | msgspec.UnsetType = msgspec.UNSET


#: ``stream: true``: unnamed events whose data is a :class:`StreamChunk`, then ``[DONE]``.
SSE_EVENTS: dict[str | None, Any] = {None: StreamChunk}


class DescribedModelInfo(msgspec.Struct, kw_only=True):
    """What a described model id names, and what it takes on one GPU."""

    config: str
    """Bundled config.json name (GET /api/model-configs)."""
    gpu: str
    """GPU spec id."""
    tp: int
    ep: int
    quant: str
    """Linear layers' dtype."""
    moe_quant: str | None
    """Experts' dtype where it differs."""
    weights_gib_per_gpu: float
    kv_cache_tokens: int
    """Tokens one engine's KV cache holds (vLLM's sizing at 90% of the memory)."""
    context_tokens: int | None
    """The config's max_position_embeddings."""


class CascadeModelInfo(msgspec.Struct, kw_only=True):
    trace: str
    config: str
    """GPU spec id."""
    sim: str
    run: str
    source: Source = "traced"
    described: DescribedModelInfo | None = None
    """A described model's config, parallelism, precision and footprint (null: traced)."""


class ModelCard(msgspec.Struct, kw_only=True):
    """An OpenAI model object (plus ``max_model_len``, the context window, ``cascade_source`` and
    ``cascade``)."""

    id: str
    object: Literal["model"]
    created: int
    """When the sim finished (0 for a described model: nothing was simulated ahead)."""
    owned_by: str
    """'cascade' (a finished sim of a traced workload) or 'cascade-described'."""
    max_model_len: int
    cascade: CascadeModelInfo
    cascade_source: Source = "traced"


class ModelListBody(msgspec.Struct, kw_only=True):
    object: Literal["list"]
    data: list[ModelCard]


class UsageBody(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class MetricsBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Simulated timings of the request (``itl_ms`` only with ``cascade_itl: "full"``)."""

    ttft_ms: float
    tpot_ms: float
    itl_mean_ms: float
    itl_count: int
    itl_min_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    itl_max_ms: float
    e2e_ms: float
    queue_ms: float
    itl_ms: list[float] | None = None


class CompletionChoiceBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    text: str
    logprobs: None
    finish_reason: Literal["length"]
    metrics: MetricsBody | None = None
    cascade: CascadeInfo | None = None


class CompletionBody(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoiceBody]
    usage: UsageBody
    metrics: MetricsBody
    cascade: CascadeInfo


class AssistantMessage(msgspec.Struct, kw_only=True):
    role: Literal["assistant"]
    content: str


class ChatChoiceBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: Literal["length"]
    metrics: MetricsBody | None = None
    cascade: CascadeInfo | None = None


class ChatCompletionBody(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoiceBody]
    usage: UsageBody
    metrics: MetricsBody
    cascade: CascadeInfo
