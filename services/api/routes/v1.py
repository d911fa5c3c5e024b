"""OpenAI-style ``/v1`` estimates from finished simulations.

- ``GET /v1/models``: finished sims usable as models, ``{object: "list", data: [{id:
  "cascade/<trace>/<config>", object: "model", created, owned_by: "cascade"}]}``.
- ``POST /v1/completions`` / ``POST /v1/chat/completions``: OpenAI requests (``model``,
  ``prompt`` as a string, a list of strings, a token-id list or a list of those /
  ``messages``; ``max_tokens``; ``stream``; ``n`` = 1; ``temperature`` in [0, 2],
  ``top_p`` in [0, 1], ``presence_penalty`` / ``frequency_penalty`` in [-2, 2], checked
  and otherwise ignored) answered in OpenAI's shape with
  empty text (Cascade predicts time, not tokens) and ``finish_reason: "length"``, plus:

  - ``metrics``: ``ttft_ms``, ``tpot_ms``, ``itl_mean_ms``, the inter-token gaps
    summarised (``itl_count``, ``itl_min_ms``, ``itl_p50_ms``, ``itl_p90_ms``,
    ``itl_p99_ms``, ``itl_max_ms``), ``e2e_ms``, ``queue_ms`` (0: the request is alone on
    an idle replica); ``itl_ms``, the list of every gap (``max_tokens - 1`` values), only
    with ``cascade_itl: "full"``;
  - ``cascade``: ``config``, ``sim``, ``run``, ``trace``, ``extrapolated``,
    ``extrapolation`` (dimension -> ``{value, low, high, beyond, ratio}``),
    ``calibration_range``, ``kernels`` (how the sim's kernel times were predicted: model,
    spec, calibration, expected kernel MAPE and its basis, extrapolated kernels),
    ``prompt_tokens_approximate``, ``method`` ('fit' or 'kernel-model'), ``token_budget``.

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

Limits: prompt tokens + ``max_tokens`` must fit the model's context window (from the
trace's workload, :func:`cascade.serving.contexts.context_length`; listed as
``max_model_len`` on the model card); over it is a 400 with code
``context_length_exceeded`` saying the limit. Estimates of long answers and their
encoding run in a worker thread; streams are written in batches of chunks.

Errors use OpenAI's shape ``{error: {message, type, param, code}}``; an unknown
model is a 404 whose message lists the known ones (also in ``error.known``).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from aiohttp import web

from cascade.calibration.accuracy import AccuracyEstimate
from cascade.errors import CascadeError, NotFoundError, ValidationError
from cascade.platform.log import get_logger
from cascade.runs.estimates import DEFAULT_TOKEN_BUDGET, RequestEstimate, SimStepModel
from cascade.serving.stepmodel import CalibrationRange, OutOfRange
from services.api.http import decode_json, doc
from services.api.keys import SETTINGS
from services.api.sim_models import ModelEntry, install, sim_models

routes = web.RouteTableDef()
log = get_logger("cascade.api.v1")

DEFAULT_MAX_TOKENS = 16
MAX_PACE_S = 600.0
#: Output tokens x prompts above which estimating and encoding run in a worker thread.
OFFLOAD_TOKENS = 512
#: Stream chunks encoded and written per ``write`` (and per turn of the event loop).
STREAM_BATCH = 64
#: Sampling parameters: (low, high) accepted; checked, then ignored (timing is the same).
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0), "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0), "frequency_penalty": (-2.0, 2.0),
}
TOKENIZER_ENV = "CASCADE_TOKENIZER"

_ENCODER = msgspec.json.Encoder()
_JSON_HEADERS = {"Content-Type": "application/json"}
_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


# ---- tokens ---------------------------------------------------------------------------------

class PromptCounter:
    """Counts prompt tokens: a ``tokenizers`` tokenizer.json when configured, else approximate."""

    def __init__(self, tokenizer_path: str = "") -> None:
        self.path = tokenizer_path
        self._tok: Any = None
        if tokenizer_path:
            from tokenizers import Tokenizer

            try:
                self._tok = Tokenizer.from_file(tokenizer_path)
            except Exception as exc:  # noqa: BLE001 - any load failure is a config error
                from cascade.errors import ConfigError

                raise ConfigError(TOKENIZER_ENV, tokenizer_path,
                                  f"the path of a readable tokenizer.json ({exc})") from None

    @property
    def exact(self) -> bool:
        return self._tok is not None

    def count(self, text: str) -> int:
        """Tokens in ``text`` (exact with a tokenizer, else the approximation)."""
        if self._tok is not None:
            return len(self._tok.encode(text).ids)
        return approximate_tokens(text)


def approximate_tokens(text: str) -> int:
    """max(words and punctuation marks, characters / 4), at least 1."""
    return max(1, len(_WORDS.findall(text)), math.ceil(len(text) / 4))


PROMPT_COUNTER = web.AppKey("v1_prompt_counter", PromptCounter)


def _count_prompts(value: Any, counter: PromptCounter) -> tuple[list[int], bool]:
    """(token count per prompt, approximate?) of an OpenAI ``prompt`` value."""
    if value is None:
        raise ValidationError("is required", field="prompt")
    if isinstance(value, str):
        return [counter.count(value)], not counter.exact
    if isinstance(value, list):
        if not value:
            raise ValidationError("must not be empty", field="prompt")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [len(value)], False
        if all(isinstance(v, str) for v in value):
            return [counter.count(v) for v in value], not counter.exact
        if all(isinstance(v, list) for v in value):
            counts = []
            for i, ids in enumerate(value):
                if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                    raise ValidationError("expected a non-empty list of token ids", field=f"prompt[{i}]")
                counts.append(len(ids))
            return counts, False
    raise ValidationError("expected a string, a list of strings, a list of token ids or a list "
                          "of token-id lists", field="prompt")


_IDS = msgspec.json.Decoder(list[int])
_TEXTS = msgspec.json.Decoder(list[str])
_ID_LISTS = msgspec.json.Decoder(list[list[int]])
_TEXT = msgspec.json.Decoder(str)


def count_prompt_json(raw: bytes | msgspec.Raw, counter: PromptCounter) -> tuple[list[int], bool]:
    """:func:`_count_prompts` of a prompt's raw JSON, validated by msgspec at C speed.

    Token-id lists (the common case, possibly thousands of ids) are checked without a
    Python loop; anything the typed decoders reject goes through the generic checks,
    which name what is wrong.
    """
    raw = bytes(raw)
    head = raw.lstrip()[:1]
    try:
        if head == b'"':
            return [counter.count(_TEXT.decode(raw))], not counter.exact
        if head == b"[":
            try:
                ids = _IDS.decode(raw)
                if ids:
                    return [len(ids)], False
            except msgspec.ValidationError:
                try:
                    texts = _TEXTS.decode(raw)
                    return [counter.count(t) for t in texts], not counter.exact
                except msgspec.ValidationError:
                    lists = _ID_LISTS.decode(raw)
                    if all(lists):
                        return [len(ids) for ids in lists], False
    except msgspec.ValidationError:
        pass
    return _count_prompts(msgspec.json.decode(raw) if raw else None, counter)


def _count_messages(messages: Any, counter: PromptCounter) -> int:
    if not isinstance(messages, list) or not messages:
        raise ValidationError("expected a non-empty list of messages", field="messages")
    total = 3
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ValidationError("expected an object with 'role' and 'content'", field=f"messages[{i}]")
        content = msg.get("content")
        text = ""
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict):
                    raise ValidationError("expected a content part object", field=f"messages[{i}].content[{j}]")
                if part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
            text = "\n".join(parts)
        elif content is not None:
            raise ValidationError("expected a string or a list of content parts", field=f"messages[{i}].content")
        total += 4 + (counter.count(text) if text else 0)
    return total


# ---- requests -------------------------------------------------------------------------------

class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool = False


class _Common(msgspec.Struct, kw_only=True):
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


class CompletionRequest(_Common, kw_only=True):
    """OpenAI completions request (other OpenAI fields are accepted and ignored)."""

    prompt: Annotated[msgspec.Raw, msgspec.Meta(extra_json_schema=PROMPT_SCHEMA)]
    """The prompt's JSON, counted by :func:`count_prompt_json`."""


MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role"], "properties": {
            "role": {"type": "string"},
            "content": {"anyOf": [
                {"type": "string"}, {"type": "null"},
                {"type": "array", "items": {"type": "object", "properties": {
                    "type": {"type": "string"}, "text": {"type": "string"}}}}]}}}}


class ChatRequest(_Common, kw_only=True):
    """OpenAI chat completions request (other OpenAI fields are accepted and ignored)."""

    messages: Annotated[Any, msgspec.Meta(extra_json_schema=MESSAGES_SCHEMA)]


class OpenAIError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.extra = extra

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code, **self.extra}}
        return web.Response(body=_ENCODER.encode(body), status=self.status,
                            content_type="application/json")


def _openai_error(exc: CascadeError) -> OpenAIError:
    status = exc.http_status
    param = getattr(exc, "field", None)
    extra: dict[str, Any] = {}
    known = getattr(exc, "known", None)
    if isinstance(exc, NotFoundError):
        return OpenAIError(404, str(exc), param=param or "model", code="model_not_found")
    if known is not None:
        extra["known"] = known
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            409: "invalid_request_error", 413: "invalid_request_error"}.get(status, "server_error")
    return OpenAIError(status, str(exc), type_=kind, param=param, code=exc.code, **extra)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def openai_errors(handler: Handler) -> Handler:
    """Answer Cascade errors and malformed bodies in OpenAI's error shape."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except OpenAIError as exc:
            return exc.response()
        except CascadeError as exc:
            return _openai_error(exc).response()

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    for attr in ("__cascade_doc__", "__cascade_public__"):
        if hasattr(handler, attr):
            setattr(wrapped, attr, getattr(handler, attr))
    return wrapped


async def _decode(request: web.Request, type_: type[Any]) -> Any:
    body = await request.read()
    if not body:
        raise OpenAIError(400, "request body is empty: expected a JSON object", param="body")
    try:
        return decode_json(body, type_)
    except ValidationError as exc:
        raise OpenAIError(400, str(exc), param=exc.field) from None


def _max_tokens(req: _Common) -> int:
    value = req.max_tokens if req.max_tokens is not None else req.max_completion_tokens
    if value is None:
        return DEFAULT_MAX_TOKENS
    param = "max_tokens" if req.max_tokens is not None else "max_completion_tokens"
    if value < 1:
        raise OpenAIError(400, f"{param} must be >= 1, got {value}", param=param)
    return value


def check_context(entry: ModelEntry, prompt_counts: list[int], output: int, *,
                  param_prompt: str = "prompt", param_output: str = "max_tokens") -> None:
    """400 ``context_length_exceeded`` unless every prompt + ``output`` fits the model."""
    limit = entry.context_length
    if output >= limit:
        raise OpenAIError(400, f"{param_output} is {output}, but this model's maximum context "
                               f"length is {limit} tokens (prompt included): {param_output} "
                               f"must be at most {limit - 1}",
                          param=param_output, code="context_length_exceeded")
    for count in prompt_counts:
        if count + output > limit:
            raise OpenAIError(400, f"This model's maximum context length is {limit} tokens. "
                                   f"However, you requested {count + output} tokens ({count} in "
                                   f"the prompt, {output} in the completion). Please reduce the "
                                   "prompt or the completion length.",
                              param=param_prompt, code="context_length_exceeded")


def _check_common(req: _Common) -> None:
    for name, (low, high) in SAMPLING_RANGES.items():
        value = getattr(req, name)
        if value is not None and not (low <= value <= high):
            raise OpenAIError(400, f"{name} must be between {low:g} and {high:g}, got {value:g}",
                              param=name, code="invalid_value")
    if req.n != 1:
        raise OpenAIError(400, "only n=1 is supported (every choice would be the same estimate)",
                          param="n")
    if req.cascade_token_budget < 1:
        raise OpenAIError(400, "cascade_token_budget must be >= 1", param="cascade_token_budget")


# ---- answers --------------------------------------------------------------------------------

def metrics_of(est: RequestEstimate, *, full: bool = False) -> dict[str, Any]:
    """The ``metrics`` object of one estimate (``itl_ms`` itself only when ``full``)."""
    itl = est.itl_ms
    out: dict[str, Any] = {"ttft_ms": est.ttft_ms, "tpot_ms": est.tpot_ms,
                           "itl_mean_ms": (sum(itl) / len(itl)) if itl else 0.0,
                           **itl_summary(itl), "e2e_ms": est.e2e_ms, "queue_ms": est.queue_ms}
    if full:
        out["itl_ms"] = itl
    return out


def itl_summary(itl: list[float]) -> dict[str, Any]:
    """Count, min, p50, p90, p99 and max of the inter-token gaps (0 when there are none)."""
    if not itl:
        return {"itl_count": 0, "itl_min_ms": 0.0, "itl_p50_ms": 0.0, "itl_p90_ms": 0.0,
                "itl_p99_ms": 0.0, "itl_max_ms": 0.0}
    arr = np.asarray(itl, dtype=float)
    p50, p90, p99 = (float(v) for v in np.percentile(arr, [50, 90, 99]))
    return {"itl_count": len(itl), "itl_min_ms": float(arr.min()), "itl_p50_ms": p50,
            "itl_p90_ms": p90, "itl_p99_ms": p99, "itl_max_ms": float(arr.max())}


def cascade_of(entry: ModelEntry, est: RequestEstimate, sm: SimStepModel, approximate: bool,
               token_budget: int) -> dict[str, Any]:
    """The ``cascade`` object of one estimate."""
    return {"config": entry.config, "sim": entry.sim.id, "run": entry.run.id,
            "trace": entry.trace_id, "extrapolated": est.extrapolated,
            "extrapolation": msgspec.to_builtins(est.extrapolation),
            "calibration_range": msgspec.to_builtins(sm.calibration),
            "kernels": sm.kernels,
            "prompt_tokens_approximate": approximate, "method": est.method,
            "prefill_steps": est.prefill_steps, "token_budget": token_budget,
            "idle_replica": True}


async def resolve_model(request: web.Request, model: str) -> ModelEntry:
    """The entry of a /v1 model id; any unknown or malformed id is a 404 ``model_not_found``."""
    models = sim_models(request.app)
    entry = models.find(model)
    if entry is not None:
        return entry
    try:
        return await models.by_model(model)
    except ValidationError as exc:
        raise OpenAIError(404, str(exc), param="model", code="model_not_found") from None


async def _estimates(request: web.Request, req: _Common, prompt_counts: list[int],
                     output: int) -> tuple[ModelEntry, SimStepModel, list[RequestEstimate]]:
    models = sim_models(request.app)
    entry = await resolve_model(request, req.model)
    check_context(entry, prompt_counts, output,
                  param_prompt="messages" if isinstance(req, ChatRequest) else "prompt",
                  param_output="max_tokens" if req.max_tokens is not None or
                  req.max_completion_tokens is None else "max_completion_tokens")
    sm = await models.step_model(entry)

    def run() -> list[RequestEstimate]:
        return [sm.estimate(p, output, token_budget=req.cascade_token_budget)
                for p in prompt_counts]

    heavy = output * len(prompt_counts) > OFFLOAD_TOKENS
    ests = await asyncio.to_thread(run) if heavy else run()
    return entry, sm, ests


def _ids(prefix: str) -> str:
    return f"{prefix}-{os.urandom(12).hex()}"


#: Answers whose encoded ``metrics`` / ``cascade`` fragments one step model keeps.
FRAGMENT_MEMO = 4096


def _fragments(entry: ModelEntry, sm: SimStepModel, est: RequestEstimate, approximate: bool,
               token_budget: int, full: bool = False) -> tuple[msgspec.Raw, msgspec.Raw]:
    """The JSON of ``metrics_of(est)`` and ``cascade_of(...)``, encoded once per request shape.

    Estimates are pure functions of the shape and the sim, so the fragments are memoised on
    the sim's step model (which is replaced when the sim's result changes).
    """
    memo = sm.answers
    key = (est.prompt_tokens, est.output_tokens, token_budget, approximate, full)
    hit = memo.get(key)
    if hit is not None and hit[0] is est:
        return hit[1], hit[2]
    metrics = msgspec.Raw(_ENCODER.encode(metrics_of(est, full=full)))
    extra = msgspec.Raw(_ENCODER.encode(cascade_of(entry, est, sm, approximate,
                                                   token_budget)))
    if len(memo) >= FRAGMENT_MEMO:
        memo.pop(next(iter(memo)))
    memo[key] = (est, metrics, extra)
    return metrics, extra


def _usage(prompt_total: int, completion_total: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_total, "completion_tokens": completion_total,
            "total_tokens": prompt_total + completion_total}


async def _answer(request: web.Request, req: _Common, prompt_counts: list[int], approximate: bool,
                  chat: bool) -> web.StreamResponse:
    _check_common(req)
    output = _max_tokens(req)
    entry, sm, ests = await _estimates(request, req, prompt_counts, output)
    created = int(time.time())
    rid = _ids("chatcmpl" if chat else "cmpl")
    if req.stream:
        if len(ests) != 1:
            raise OpenAIError(400, "stream: true takes a single prompt", param="prompt")
        extra = cascade_of(entry, ests[0], sm, approximate, req.cascade_token_budget)
        return await _stream(request, req, rid, created, entry.id, ests[0], extra, chat,
                             approximate)
    full = req.cascade_itl == "full"
    heavy = output * len(ests) > OFFLOAD_TOKENS

    def encode() -> bytes:
        frags = [_fragments(entry, sm, e, approximate, req.cascade_token_budget, full)
                 for e in ests]
        return _ENCODER.encode(_completion_body(frags, rid, created, entry.id, chat,
                                                prompt_counts, output))

    body = await asyncio.to_thread(encode) if heavy else encode()
    return web.Response(body=body, headers=_JSON_HEADERS)


def _completion_body(frags: list[tuple[msgspec.Raw, msgspec.Raw]], rid: str, created: int,
                     model: str, chat: bool, prompt_counts: list[int],
                     output: int) -> dict[str, Any]:
    choices: list[dict[str, Any]] = []
    for i, (metrics, extra) in enumerate(frags):
        choice: dict[str, Any] = {"index": i, "logprobs": None, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": ""}
        else:
            choice["text"] = ""
        if len(frags) > 1:
            choice["metrics"] = metrics
            choice["cascade"] = extra
        choices.append(choice)
    return {
        "id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
        "model": model, "choices": choices,
        "usage": _usage(sum(prompt_counts), output * len(prompt_counts)),
        "metrics": frags[0][0], "cascade": frags[0][1],
    }


async def _stream(request: web.Request, req: _Common, rid: str, created: int, model: str,
                  est: RequestEstimate, extra: dict[str, Any], chat: bool,
                  approximate: bool) -> web.StreamResponse:
    if req.cascade_pace and est.e2e_ms / 1000 > MAX_PACE_S:
        raise OpenAIError(400, f"the estimate lasts {est.e2e_ms / 1000:.1f} s, longer than the "
                               f"{MAX_PACE_S:g} s a paced stream may take", param="cascade_pace")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    obj = "chat.completion.chunk" if chat else "text_completion"
    times = est.token_times_ms
    started = time.perf_counter()
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    pending: list[bytes] = []
    for i, t_ms in enumerate(times):
        last = i == len(times) - 1
        if req.cascade_pace:
            delay = t_ms / 1000 - (time.perf_counter() - started)
            if delay > 0:
                if pending:
                    await resp.write(b"".join(pending))
                    pending.clear()
                await asyncio.sleep(delay)
        choice: dict[str, Any] = {"index": 0, "logprobs": None,
                                  "finish_reason": "length" if last else None}
        if chat:
            choice["delta"] = {"role": "assistant", "content": ""} if i == 0 else {"content": ""}
        else:
            choice["text"] = ""
        chunk: dict[str, Any] = {
            "id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
            "cascade_token": {"index": i, "time_ms": t_ms,
                              "gap_ms": t_ms if i == 0 else t_ms - times[i - 1]},
        }
        if last:
            chunk["metrics"] = metrics_of(est, full=req.cascade_itl == "full")
            chunk["cascade"] = extra
        pending.append(b"data: " + _ENCODER.encode(chunk) + b"\n\n")
        if len(pending) >= STREAM_BATCH:
            await resp.write(b"".join(pending))  # yields to the loop between batches
            pending.clear()
    if pending:
        await resp.write(b"".join(pending))
    if include_usage:
        usage_chunk = {"id": rid, "object": obj, "created": created, "model": model, "choices": [],
                       "usage": _usage(est.prompt_tokens, est.output_tokens)}
        await resp.write(b"data: " + _ENCODER.encode(usage_chunk) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


# ---- answer shapes (documentation: the handlers build these as JSON directly) ----------------

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
    """Where an estimate came from: the sim, its step model's calibration, extrapolation."""

    config: str
    sim: str
    run: str
    trace: str
    extrapolated: bool
    extrapolation: dict[str, OutOfRange]
    calibration_range: CalibrationRange
    kernels: KernelProvenance
    prompt_tokens_approximate: bool
    method: str
    prefill_steps: int
    token_budget: int
    idle_replica: bool


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


class CascadeModelInfo(msgspec.Struct, kw_only=True):
    trace: str
    config: str
    sim: str
    run: str


class ModelCard(msgspec.Struct, kw_only=True):
    """An OpenAI model object (plus ``max_model_len``, the context window, and ``cascade``)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int
    cascade: CascadeModelInfo


class ModelListBody(msgspec.Struct, kw_only=True):
    object: Literal["list"]
    data: list[ModelCard]


class UsageBody(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class MetricsBody(msgspec.Struct, kw_only=True):
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


class CompletionChoiceBody(msgspec.Struct, kw_only=True):
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


class ChatChoiceBody(msgspec.Struct, kw_only=True):
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


# ---- routes ---------------------------------------------------------------------------------

@routes.get("/v1/models")
@doc(tags=("v1",), response=ModelListBody)
@openai_errors
async def list_models(request: web.Request) -> web.Response:
    """Finished sims usable as models (OpenAI list shape)."""
    data = [model_card(e) for e in await sim_models(request.app).servable()]
    return web.Response(body=_ENCODER.encode({"object": "list", "data": data}),
                        content_type="application/json")


def model_card(e: ModelEntry) -> dict[str, Any]:
    """The OpenAI model object of one entry (plus ``max_model_len`` and ``cascade``)."""
    return {"id": e.id, "object": "model", "created": e.created, "owned_by": "cascade",
            "max_model_len": e.context_length,
            "cascade": {"trace": e.trace_id, "config": e.config, "sim": e.sim.id, "run": e.run.id}}


@routes.get(r"/v1/models/{model:.+}")
@doc(tags=("v1",), response=ModelCard, responses={404: "unknown model"})
@openai_errors
async def get_model(request: web.Request) -> web.Response:
    """One model by its id ``cascade/<trace>/<config>`` (``cascade/`` may be left out)."""
    model = request.match_info["model"]
    if not model.startswith("cascade/"):
        model = f"cascade/{model}"
    e = await resolve_model(request, model)
    return web.Response(body=_ENCODER.encode(model_card(e)), content_type="application/json")


@routes.post("/v1/completions")
@doc(tags=("v1",), request=CompletionRequest, response=CompletionBody, sse=SSE_EVENTS,
     responses={400: "invalid request (over the context, out of range)", 404: "unknown model"})
@openai_errors
async def completions(request: web.Request) -> web.StreamResponse:
    """Estimate one completion request alone on an idle replica (OpenAI response shape)."""
    req: CompletionRequest = await _decode(request, CompletionRequest)
    await resolve_model(request, req.model)
    counts, approximate = count_prompt_json(req.prompt, request.app[PROMPT_COUNTER])
    return await _answer(request, req, counts, approximate, chat=False)


@routes.post("/v1/chat/completions")
@doc(tags=("v1",), request=ChatRequest, response=ChatCompletionBody, sse=SSE_EVENTS,
     responses={400: "invalid request (over the context, out of range)", 404: "unknown model"})
@openai_errors
async def chat_completions(request: web.Request) -> web.StreamResponse:
    """Estimate one chat request alone on an idle replica (OpenAI response shape)."""
    req: ChatRequest = await _decode(request, ChatRequest)
    await resolve_model(request, req.model)
    count = _count_messages(req.messages, request.app[PROMPT_COUNTER])
    return await _answer(request, req, [count], True, chat=True)


def setup(app: web.Application) -> None:
    """Install the model index and the prompt counter (tokenizer from settings or CASCADE_TOKENIZER)."""
    install(app)
    path = (app[SETTINGS].tokenizer or os.environ.get(TOKENIZER_ENV, "")).strip()
    app[PROMPT_COUNTER] = PromptCounter(path)
