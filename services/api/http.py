"""HTTP helpers shared by every api route module: JSON in/out, errors, auth, docs.

- :func:`json_response` encodes Structs/dicts with msgspec.
- :func:`read_json` decodes a request body into a Struct; bad input -> 400 naming the field.
- :func:`error_middleware` turns :class:`CascadeError` into ``{error, message, ...}`` JSON
  with its ``http_status``; unexpected errors become a 500 without any repr.
- :func:`auth_middleware` requires ``Authorization: Bearer <token>`` (one of
  ``settings.api_tokens``) on every write (non GET/HEAD/OPTIONS) unless the handler
  is marked :func:`public`; :func:`require_token` does the same check on demand.
- :func:`doc` attaches OpenAPI details (summary, request/response types, tags).
"""

from __future__ import annotations

import hmac
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from cascade.errors import CascadeError, RateLimitedError, UnauthorizedError, ValidationError
from cascade.platform.log import get_logger
from services.api.appkeys import SETTINGS

T = TypeVar("T")
HandlerT = TypeVar("HandlerT", bound=Callable[..., Awaitable[web.StreamResponse]])

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Largest request body the api reads (JSON only: uploads go to S3 directly); over it is a 413.
MAX_BODY_BYTES = 8 * 1024 * 1024
_ENCODER = msgspec.json.Encoder()
log = get_logger("cascade.api")


def json_response(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response from a Struct, dict, list or scalar (msgspec-encoded)."""
    return web.Response(
        body=_ENCODER.encode(data), status=status, content_type="application/json", headers=headers
    )


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON error shape: ``{"error": code, "message": message, ...}``."""
    return {"error": code, "message": message, **extra}


async def read_json(request: web.Request, type_: type[T], *, max_bytes: int = MAX_BODY_BYTES) -> T:
    """Decode the request body as ``type_``; :class:`ValidationError` names what is wrong."""
    if request.content_length is not None and request.content_length > max_bytes:
        from cascade.errors import TooLargeError

        raise TooLargeError("request body", request.content_length, max_bytes)
    body = await request.read()
    if not body:
        raise ValidationError("request body is empty: expected a JSON object", field="body")
    return decode_json(body, type_)


def decode_json(body: bytes, type_: type[T]) -> T:
    """Decode ``body`` as ``type_`` (integral floats accepted for integers, as JSON Schema does)."""
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        first = exc
    except msgspec.DecodeError as exc:
        raise ValidationError(f"malformed JSON: {exc}", field="body") from None
    if b"." in body or b"e" in body or b"E" in body:
        try:
            again = _ENCODER.encode(integral_floats(msgspec.json.decode(body)))
            return msgspec.json.decode(again, type=type_)
        except msgspec.ValidationError:
            pass
    raise ValidationError(str(first), field=_path_of(str(first))) from None


def _path_of(message: str) -> str:
    """The field a msgspec error names: ``a.b``, or ``a.b.c`` for a missing/unknown ``c`` in ``a.b``."""
    marker = "at `$."
    if marker not in message:
        return "body"
    path = message.split(marker, 1)[1].split("`", 1)[0]
    for lead in ("Object missing required field `", "Object contains unknown field `"):
        if message.startswith(lead):
            return f"{path}.{message[len(lead):].split('`', 1)[0]}"
    return path


def public(handler: HandlerT) -> HandlerT:
    """Mark a write handler as not needing a bearer token (e.g. presigned callbacks)."""
    handler.__cascade_public__ = True  # type: ignore[attr-defined]
    return handler


def doc(
    summary: str | None = None,
    *,
    request: Any = None,
    response: Any = None,
    tags: tuple[str, ...] = (),
    description: str | None = None,
    responses: dict[int, str] | None = None,
    query: dict[str, str | tuple[str, dict[str, Any]]] | None = None,
    status: int = 200,
    request_required: bool = True,
    content: dict[str, Any] | None = None,
    same_body: tuple[int, ...] = (),
    bodies: dict[int, Any] | None = None,
    sse: dict[str | None, Any] | None = None,
    headers: dict[int, dict[str, tuple[str, dict[str, Any]]]] | None = None,
) -> Callable[[HandlerT], HandlerT]:
    """Attach OpenAPI details to a handler (summary defaults to its docstring's first line).

    ``response`` is the JSON body of the success answer, sent with ``status``;
    ``content`` adds or replaces media types of that answer (``{"text/event-stream":
    {"schema": {"type": "string"}}}``). ``responses`` describes other statuses: error
    statuses get the error schema, other success statuses the success body. ``query``
    maps a parameter to its description or ``(description, JSON schema)``.
    ``request_required=False`` documents an optional request body; ``same_body`` lists
    error statuses answered with the success body (``/readyz``'s 503); ``bodies`` gives
    other success statuses a JSON body type of their own (a 202 job answer). ``sse``
    documents a ``text/event-stream`` answer: per event name (None: unnamed, ``message``),
    the type of its JSON ``data``; an unnamed stream may end with ``data: [DONE]``.
    ``headers`` documents the headers an answer always carries: per status, header name ->
    ``(description, JSON schema)`` (a 429's ``Retry-After``).
    """

    def wrap(handler: HandlerT) -> HandlerT:
        handler.__cascade_doc__ = {  # type: ignore[attr-defined]
            "summary": summary,
            "request": request,
            "response": response,
            "tags": tags,
            "description": description,
            "responses": responses or {},
            "query": query or {},
            "status": status,
            "request_required": request_required,
            "content": content or {},
            "same_body": same_body,
            "bodies": bodies or {},
            "sse": sse or {},
            "headers": headers or {},
        }
        return handler

    return wrap


def query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter in [low, high]; absent means ``default`` (empty is a 400)."""
    if name not in request.query:
        return default
    raw = request.query[name].strip()
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"expected an integer from {low} to {high}, got {raw[:40]!r}",
                              field=name) from None
    if not low <= value <= high:
        raise ValidationError(f"expected an integer from {low} to {high}, got {value}", field=name)
    return value


def query_choice(request: web.Request, name: str, choices: tuple[str, ...]) -> str:
    """A query parameter among ``choices``; absent means the first (empty is a 400)."""
    raw = request.query.get(name, choices[0]).strip()
    if raw not in choices:
        raise ValidationError(f"expected one of {', '.join(choices)}, got {raw[:40]!r}", field=name)
    return raw


def integral_floats(value: Any) -> Any:
    """``value`` with integral floats (``2558.0``) as ints: JSON Schema's integers include them."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= 2**53 else value
    if isinstance(value, list):
        return [integral_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: integral_floats(v) for k, v in value.items()}
    return value


def _token_ok(request: web.Request) -> bool:
    tokens: list[str] = request.app[SETTINGS].api_tokens
    if not tokens:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return False
    presented_b = presented.strip().encode()
    return any(hmac.compare_digest(presented_b, t.encode()) for t in tokens)


def require_token(request: web.Request) -> None:
    """Raise :class:`UnauthorizedError` unless the request carries a valid bearer token."""
    if not _token_ok(request):
        raise UnauthorizedError("a valid bearer token is required (Authorization: Bearer <token>)")


def _handler_of(request: web.Request) -> Any:
    match_info = request.match_info
    return getattr(match_info, "handler", None)


@web.middleware
async def auth_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Writes need a bearer token unless the handler is :func:`public`."""
    if request.method not in SAFE_METHODS:
        target = _handler_of(request)
        if not getattr(target, "__cascade_public__", False):
            require_token(request)
    return await handler(request)


_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
               422: "unprocessable", 429: "too_many_requests", 503: "unavailable"}


_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
                 413: "invalid_request_error", 415: "invalid_request_error",
                 429: "rate_limit_error"}


def is_openai_path(path: str) -> bool:
    """True for the OpenAI-style routes (``/v1`` and below), which answer errors in OpenAI's shape."""
    return path == "/v1" or path.startswith("/v1/")


def openai_error_body(status: int, message: str, *, param: str | None = None,
                      code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Domain errors -> JSON with their status; anything unexpected -> JSON 500 (logged).

    Under ``/v1`` every error (401, unrouted 404, 405, 413, 500) is in OpenAI's shape.
    """
    openai = is_openai_path(request.path)
    try:
        return await handler(request)
    except CascadeError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="cascade"'} if exc.http_status == 401 else None
        if isinstance(exc, RateLimitedError):
            headers = {"Retry-After": str(exc.retry_after_s)}
        if openai:
            return json_response(openai_error_body(exc.http_status, str(exc),
                                                   param=getattr(exc, "field", None), code=exc.code),
                                 status=exc.http_status, headers=headers)
        return json_response(exc.to_dict(), status=exc.http_status, headers=headers)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        if exc.status == 404:
            message = f"no such resource: {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        else:
            message = exc.reason
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        if exc.status == 413:
            message = exc.text or "request body too large"
        if openai:
            return json_response(openai_error_body(exc.status, message, code=code),
                                 status=exc.status, headers=headers or None)
        return json_response(error_body(code, message), status=exc.status, headers=headers or None)
    except Exception:
        request_id = uuid.uuid4().hex[:12]
        log.exception("unhandled error", method=request.method, path=request.path, request_id=request_id)
        if openai:
            return json_response(openai_error_body(500, f"internal server error (request {request_id})",
                                                   code="internal"), status=500)
        return json_response(
            error_body("internal", "internal server error", request_id=request_id), status=500
        )


def metrics_middleware(registry: CollectorRegistry) -> Any:
    """Count requests and time them per route template, method and status."""
    requests = Counter(
        "cascade_http_requests", "HTTP requests handled", ["method", "route", "status"], registry=registry
    )
    seconds = Histogram(
        "cascade_http_request_seconds", "HTTP request latency", ["method", "route"], registry=registry
    )

    # Labelled children, looked up once per label set (``labels()`` costs several us a call).
    counters: dict[tuple[str, str, int], Any] = {}
    timers: dict[tuple[str, str], Any] = {}

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.perf_counter()
        route = request.match_info.route.resource
        template = route.canonical if route is not None else "unmatched"
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            method = request.method
            key = (method, template, status)
            counter = counters.get(key)
            if counter is None:
                counter = counters[key] = requests.labels(method, template, str(status))
            counter.inc()
            timer = timers.get(key[:2])
            if timer is None:
                timer = timers[key[:2]] = seconds.labels(method, template)
            timer.observe(time.perf_counter() - started)

    return middleware
