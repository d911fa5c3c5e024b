"""OpenAI's conventions for ``/v1``: errors in OpenAI's shape (:class:`OpenAIError`,
:func:`openai_errors`), request bodies decoded with OpenAI's 400s, and the checks of a request
against its model (output length, context window, sampling ranges)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from cascade.errors import CascadeError, NotFoundError, ValidationError
from services.api.http import decode_json
from services.api.schemas.v1 import CommonRequest

DEFAULT_MAX_TOKENS = 16
#: Sampling parameters: (low, high) accepted; checked, then ignored (timing is the same).
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0), "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0), "frequency_penalty": (-2.0, 2.0),
}

_ENCODER = msgspec.json.Encoder()
T = TypeVar("T")


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


def openai_error(exc: CascadeError) -> OpenAIError:
    """A Cascade error as OpenAI's (an unknown model: 404 ``model_not_found``)."""
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
            return openai_error(exc).response()

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    for attr in ("__cascade_doc__", "__cascade_public__"):
        if hasattr(handler, attr):
            setattr(wrapped, attr, getattr(handler, attr))
    return wrapped


async def decode_request(request: web.Request, type_: type[T]) -> T:
    """The request body as ``type_`` (OpenAI's 400 naming the field otherwise)."""
    body = await request.read()
    if not body:
        raise OpenAIError(400, "request body is empty: expected a JSON object", param="body")
    try:
        return decode_json(body, type_)
    except ValidationError as exc:
        raise OpenAIError(400, str(exc), param=exc.field) from None


def max_tokens(req: CommonRequest) -> int:
    """Output tokens asked for (``max_tokens``, else ``max_completion_tokens``, else 16)."""
    value = req.max_tokens if req.max_tokens is not None else req.max_completion_tokens
    if value is None:
        return DEFAULT_MAX_TOKENS
    param = "max_tokens" if req.max_tokens is not None else "max_completion_tokens"
    if value < 1:
        raise OpenAIError(400, f"{param} must be >= 1, got {value}", param=param)
    return value


def check_context(limit: int, prompt_counts: list[int], output: int, *,
                  param_prompt: str = "prompt", param_output: str = "max_tokens") -> None:
    """400 ``context_length_exceeded`` unless every prompt + ``output`` fits the model's
    ``limit`` (its context length)."""
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


def check_common(req: CommonRequest) -> None:
    """400 for sampling parameters out of range, ``n`` other than 1 or no token budget."""
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
