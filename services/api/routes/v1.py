"""OpenAI-style ``/v1`` estimates of one request alone on an idle engine, for two kinds of model:

- traced: a finished simulation of a traced workload, id ``cascade/<trace>/<config>``, timed by
  the sim's fitted step model (:func:`cascade.runs.estimates.estimate_request`);
- described: a bundled config.json (``GET /api/model-configs``) on a GPU, no trace, id
  ``described/<config>/<GPU>[/tp<N>][/ep<N>][/<quant>]`` (:mod:`services.api.described_models`:
  the GPU by spec id, alias or custom spec; ``tp`` / ``ep`` default 1; ``quant`` one of
  ``bf16``, ``fp8``, ``fp8-block``, ``fp4``, ``int4``, default the checkpoint's own
  ``quantization_config``; echoed canonical), every step timed at its own shape by the LLM
  kernel model (:func:`cascade.runs.described.estimate_described`; its step-time source built
  once per id in a worker thread, bounded LRU).

Routes:

- ``GET /v1/models``: ``{object: "list", data: [{id, object: "model", created, owned_by,
  max_model_len, cascade_source, cascade}]}``: the finished sims (``owned_by: "cascade"``,
  ``cascade_source: "traced"``), then one described model per bundled config on SM90_H100 at
  the smallest TP whose KV cache holds its context window, at the checkpoint's precision
  (``owned_by: "cascade-described"``, ``created`` 0, ``cascade.described``: config, GPU, TP,
  EP, precision, weights and KV cache per GPU). ``GET /v1/models/{id}``: one card.
- ``POST /v1/completions`` / ``POST /v1/chat/completions``: OpenAI requests (``model``,
  ``prompt`` as a string, a list of strings, a token-id list or a list of those /
  ``messages``; ``max_tokens``; ``stream``; ``n`` = 1; ``temperature`` in [0, 2],
  ``top_p`` in [0, 1], ``presence_penalty`` / ``frequency_penalty`` in [-2, 2], checked
  and otherwise ignored) answered in OpenAI's shape with
  empty text (Cascade predicts time, not tokens) and ``finish_reason: "length"``, plus:

  - ``metrics``: ``ttft_ms`` (the prompt's prefill, in chunks of ``cascade_token_budget``
    tokens, default 8,192), ``tpot_ms``, ``itl_mean_ms``, the inter-token gaps (one decode
    step at batch 1 each, the context growing) summarised (``itl_count``, ``itl_min_ms``,
    ``itl_p50_ms``, ``itl_p90_ms``, ``itl_p99_ms``, ``itl_max_ms``), ``e2e_ms``,
    ``queue_ms`` (0: the request is alone on an idle replica); ``itl_ms``, the list of every
    gap (``max_tokens - 1`` values), only with ``cascade_itl: "full"``;
  - ``cascade``: ``source`` ('traced' or 'described'), ``config`` (the GPU spec id),
    ``sim``, ``run``, ``trace`` (empty for a described model), ``extrapolated``,
    ``extrapolation`` (dimension -> ``{value, low, high, beyond, ratio}``),
    ``calibration_range`` (null for a described model: nothing fitted), ``kernels`` (how the
    kernel times were predicted: model, spec, calibration, expected kernel MAPE and its
    basis, extrapolated kernels), ``basis`` (:class:`cascade.serving.description.ServingBasis`:
    the workload, the GPU, the step-time source and, for a described model, the LLM
    calibration's id and digest and the kernel model's expected error), ``prompt_tokens_approximate``,
    ``method`` ('fit' or 'kernel-model'; a described model's is always 'kernel-model', never
    extrapolated), ``prefill_steps``, ``token_budget``.

  Prompt tokens are exact for token-id prompts. Text is counted with the tokenizer
  named by ``CASCADE_TOKENIZER`` (a ``tokenizer.json`` path, via the ``tokenizers``
  package) when set, else approximated as max(words and punctuation marks,
  characters / 4) and marked approximate. Chat prompts are always approximate (the
  chat template is unknown): message contents plus 4 tokens per message and 3 for
  the reply's priming. ``max_tokens`` defaults to 16 (OpenAI's completions default).

  With ``stream: true`` the answer is server-sent events: one chunk per output token
  carrying ``cascade_token: {index, time_ms, gap_ms}`` (simulated times from arrival),
  the last with ``finish_reason``, ``metrics`` and ``cascade``, then ``data: [DONE]``.
  ``cascade_pace: true`` sends each chunk at its simulated time (real-time pacing).

Limits: prompt tokens + ``max_tokens`` must fit the model's context window (a traced model's
from its workload, :func:`cascade.serving.contexts.context_length`; a described model's
``max_position_embeddings``, or its KV cache where that holds fewer tokens; listed as
``max_model_len`` on the model card); over it is a 400 with code
``context_length_exceeded`` saying the limit. Estimates of long answers (and every described
estimate: new shapes are timed by the kernel model) and their encoding run in a worker thread;
streams are written in batches of chunks.

Errors use OpenAI's shape ``{error: {message, type, param, code}}``; an unknown
model is a 404 ``model_not_found`` whose message lists the known traced ones and the described
grammar; a malformed described id, an unknown config or GPU (with the closest known GPUs, also in
``error.suggestions``) a 404 saying the grammar and what was wrong; a described model that
cannot be served as named a 400 (``model_does_not_fit``: no room for the KV cache at that TP,
with the TP that fits; ``invalid_value``: heads or experts that do not split).
"""

from __future__ import annotations

import asyncio
import os
import time

import msgspec
from aiohttp import web

from cascade.errors import NotFoundError, ValidationError
from cascade.platform.log import get_logger
from cascade.runs.estimates import RequestEstimate
from cascade.serving.prompts import TOKENIZER_ENV, PromptCounter, count_messages, count_prompt_json
from services.api.appkeys import SETTINGS
from services.api.completions import (
    DescribedServed,
    Served,
    TracedServed,
    completion_body,
    fragments,
    metrics_of,
    model_card,
    token_chunk,
    usage_chunk,
)
from services.api.described_models import GRAMMAR, DescribedEntry, described_models, is_described
from services.api.described_models import install as install_described
from services.api.http import doc
from services.api.openai import (
    OpenAIError,
    check_common,
    check_context,
    decode_request,
    max_tokens,
    openai_errors,
)
from services.api.schemas.v1 import (
    SSE_EVENTS,
    CascadeInfo,
    ChatCompletionBody,
    ChatRequest,
    CommonRequest,
    CompletionBody,
    CompletionRequest,
    ModelCard,
    ModelListBody,
)
from services.api.sim_models import ModelEntry, install, sim_models

routes = web.RouteTableDef()
log = get_logger("cascade.api.v1")

MAX_PACE_S = 600.0
#: Output tokens x prompts above which estimating and encoding run in a worker thread.
OFFLOAD_TOKENS = 512
#: Stream chunks encoded and written per ``write`` (and per turn of the event loop).
STREAM_BATCH = 64

_ENCODER = msgspec.json.Encoder()
_JSON_HEADERS = {"Content-Type": "application/json"}

PROMPT_COUNTER = web.AppKey("v1_prompt_counter", PromptCounter)


Model = ModelEntry | DescribedEntry


async def resolve_model(request: web.Request, model: str) -> Model:
    """The entry of a /v1 model id: a finished sim's or a described model's; any unknown or
    malformed id is a 404 ``model_not_found`` (a described model that cannot be served, a 400)."""
    if is_described(model):
        return await described_models(request.app).resolve(model)
    models = sim_models(request.app)
    entry = models.find(model)
    if entry is not None:
        return entry
    try:
        return await models.by_model(model)
    except (ValidationError, NotFoundError) as exc:
        raise OpenAIError(404, f"{exc}; or a described model: {GRAMMAR}", param="model",
                          code="model_not_found") from None


async def _served(request: web.Request, entry: Model) -> Served:
    if isinstance(entry, DescribedEntry):
        return DescribedServed(entry, await described_models(request.app).step_model(entry))
    return TracedServed(entry, await sim_models(request.app).step_model(entry))


async def _estimates(req: CommonRequest, served: Served, prompt_counts: list[int],
                     output: int) -> list[RequestEstimate]:
    def run() -> list[RequestEstimate]:
        return [served.estimate(p, output, token_budget=req.cascade_token_budget) for p in prompt_counts]

    # a described model times the shapes it has not met yet with the kernel model: off the loop
    heavy = isinstance(served, DescribedServed) or output * len(prompt_counts) > OFFLOAD_TOKENS
    return await asyncio.to_thread(run) if heavy else run()


def _ids(prefix: str) -> str:
    return f"{prefix}-{os.urandom(12).hex()}"


async def _answer(request: web.Request, req: CommonRequest, entry: Model, prompt_counts: list[int],
                  approximate: bool, chat: bool) -> web.StreamResponse:
    check_common(req)
    output = max_tokens(req)
    check_context(entry.context_length, prompt_counts, output,
                  param_prompt="messages" if chat else "prompt",
                  param_output="max_tokens" if req.max_tokens is not None or
                  req.max_completion_tokens is None else "max_completion_tokens")
    if req.stream and len(prompt_counts) != 1:
        raise OpenAIError(400, "stream: true takes a single prompt", param="prompt")
    served = await _served(request, entry)
    ests = await _estimates(req, served, prompt_counts, output)
    created = int(time.time())
    rid = _ids("chatcmpl" if chat else "cmpl")
    if req.stream:
        extra = served.cascade(ests[0], approximate, req.cascade_token_budget)
        return await _stream(request, req, rid, created, served.id, ests[0], extra, chat)
    full = req.cascade_itl == "full"
    heavy = output * len(ests) > OFFLOAD_TOKENS

    def encode() -> bytes:
        frags = [fragments(served, e, approximate, req.cascade_token_budget, full) for e in ests]
        return _ENCODER.encode(completion_body(frags, rid, created, served.id, chat, prompt_counts, output))

    body = await asyncio.to_thread(encode) if heavy else encode()
    return web.Response(body=body, headers=_JSON_HEADERS)


async def _stream(request: web.Request, req: CommonRequest, rid: str, created: int, model: str,
                  est: RequestEstimate, extra: CascadeInfo, chat: bool) -> web.StreamResponse:
    if req.cascade_pace and est.e2e_ms / 1000 > MAX_PACE_S:
        raise OpenAIError(400, f"the estimate lasts {est.e2e_ms / 1000:.1f} s, longer than the "
                               f"{MAX_PACE_S:g} s a paced stream may take", param="cascade_pace")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    times = est.token_times_ms
    started = time.perf_counter()
    pending: list[bytes] = []
    for i, t_ms in enumerate(times):
        if req.cascade_pace:
            delay = t_ms / 1000 - (time.perf_counter() - started)
            if delay > 0:
                if pending:
                    await resp.write(b"".join(pending))
                    pending.clear()
                await asyncio.sleep(delay)
        chunk = token_chunk(rid, created, model, chat, times, i)
        if i == len(times) - 1:
            chunk.metrics = metrics_of(est, full=req.cascade_itl == "full")
            chunk.cascade = extra
        pending.append(b"data: " + _ENCODER.encode(chunk) + b"\n\n")
        if len(pending) >= STREAM_BATCH:
            await resp.write(b"".join(pending))  # yields to the loop between batches
            pending.clear()
    if pending:
        await resp.write(b"".join(pending))
    if req.stream_options and req.stream_options.include_usage:
        await resp.write(b"data: " + _ENCODER.encode(usage_chunk(rid, created, model, chat, est)) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


# ---- routes ---------------------------------------------------------------------------------

@routes.get("/v1/models")
@doc(tags=("v1",), response=ModelListBody)
@openai_errors
async def list_models(request: web.Request) -> web.Response:
    """Finished sims usable as models, then one described model per bundled config (OpenAI list shape)."""
    data = [model_card(e) for e in await sim_models(request.app).servable()]
    data += [model_card(e) for e in described_models(request.app).listing()]
    return web.Response(body=_ENCODER.encode(ModelListBody(object="list", data=data)),
                        content_type="application/json")


@routes.get(r"/v1/models/{model:.+}")
@doc(tags=("v1",), response=ModelCard, responses={404: "unknown model"})
@openai_errors
async def get_model(request: web.Request) -> web.Response:
    """One model by its id: ``cascade/<trace>/<config>`` (``cascade/`` may be left out) or ``described/...``."""
    model = request.match_info["model"]
    if not model.startswith("cascade/") and not is_described(model):
        model = f"cascade/{model}"
    e = await resolve_model(request, model)
    return web.Response(body=_ENCODER.encode(model_card(e)), content_type="application/json")


@routes.post("/v1/completions")
@doc(tags=("v1",), request=CompletionRequest, response=CompletionBody, sse=SSE_EVENTS,
     responses={400: "invalid request (over the context, out of range)", 404: "unknown model"})
@openai_errors
async def completions(request: web.Request) -> web.StreamResponse:
    """Estimate one completion request alone on an idle replica (OpenAI response shape)."""
    req = await decode_request(request, CompletionRequest)
    entry = await resolve_model(request, req.model)
    counts, approximate = count_prompt_json(req.prompt, request.app[PROMPT_COUNTER])
    return await _answer(request, req, entry, counts, approximate, chat=False)


@routes.post("/v1/chat/completions")
@doc(tags=("v1",), request=ChatRequest, response=ChatCompletionBody, sse=SSE_EVENTS,
     responses={400: "invalid request (over the context, out of range)", 404: "unknown model"})
@openai_errors
async def chat_completions(request: web.Request) -> web.StreamResponse:
    """Estimate one chat request alone on an idle replica (OpenAI response shape)."""
    req = await decode_request(request, ChatRequest)
    entry = await resolve_model(request, req.model)
    count = count_messages(req.messages, request.app[PROMPT_COUNTER])
    return await _answer(request, req, entry, [count], True, chat=True)


def setup(app: web.Application) -> None:
    """Install the model index, the described models and the prompt counter (tokenizer from
    settings or CASCADE_TOKENIZER)."""
    install(app)
    install_described(app)
    path = (app[SETTINGS].tokenizer or os.environ.get(TOKENIZER_ENV, "")).strip()
    app[PROMPT_COUNTER] = PromptCounter(path)
