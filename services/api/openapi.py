"""OpenAPI 3.1 document generated from the registered routes (never written per route).

Each route contributes its method, path (with ``{params}``), summary (from
:func:`services.api.http.doc` or the handler docstring's first line), request
and response schemas (msgspec Struct types -> JSON Schema), and bearer security
for writes.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterable
from typing import Any

import msgspec
from aiohttp import web

from cascade import __version__
from services.api.http import SAFE_METHODS

_PARAM = re.compile(r"\{([^}:]+)(:[^}]*)?\}")
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"},
                   "field": {"type": "string"}},
    "additionalProperties": True,
}
OPENAI_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]},
                       "code": {"type": ["string", "null"]}},
        "additionalProperties": True,
    }},
    "additionalProperties": False,
}


#: JSON Schema keywords added to a component, by component (Struct) name: rules across fields
#: that a Struct's field types cannot say (``oneOf`` of field sets).
SCHEMA_EXTRAS: dict[str, dict[str, Any]] = {}


def extend_schema(name: str, extra: dict[str, Any]) -> None:
    """Add ``extra`` keywords to the component schema ``name`` (a duplicate is an error)."""
    if name in SCHEMA_EXTRAS and SCHEMA_EXTRAS[name] != extra:
        raise ValueError(f"schema extras for {name} are already registered")
    SCHEMA_EXTRAS[name] = extra


def sse_schema(events: dict[str | None, dict[str, Any]]) -> dict[str, Any]:
    """One server-sent event, as clients parse it (``event``, ``data``, ``id``, ``retry``):
    per event name (None: unnamed, which clients call ``message``) its JSON ``data``
    (``contentMediaType`` + ``contentSchema``); unnamed streams may end with ``[DONE]``."""
    variants = []
    for name, data in events.items():
        json_data = {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
        variants.append({
            "type": "object", "required": ["event", "data"],
            "properties": {
                "event": {"const": name or "message"},
                "data": json_data if name else {"anyOf": [{"const": "[DONE]"}, json_data]},
                "id": {"type": "string", "pattern": "^[0-9]+$"},
                "retry": {"type": "integer", "minimum": 0},
            },
            "additionalProperties": False,
        })
    return variants[0] if len(variants) == 1 else {"oneOf": variants}


def _error_ref(path: str) -> dict[str, Any]:
    name = "OpenAIError" if path == "/v1" or path.startswith("/v1/") else "Error"
    return {"$ref": f"#/components/schemas/{name}"}


def _schema_components(types: tuple[Any, ...]) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """``msgspec.json.schema_components`` of ``types``, made once per process for a given
    tuple (every app the factory builds documents the same route types; msgspec resolves
    every annotation again each time, ~15 ms)."""
    try:
        return _cached_components(types)
    except TypeError:  # an unhashable type annotation: not cached
        return _components(types)


def _components(types: tuple[Any, ...]) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    return tuple(schemas), components


_cached_components = functools.lru_cache(maxsize=8)(_components)


def _summary(handler: Any, meta: dict[str, Any]) -> tuple[str, str]:
    docstring = inspect.getdoc(handler) or ""
    first, _, rest = docstring.partition("\n")
    return meta.get("summary") or first.strip() or handler.__name__, meta.get("description") or rest.strip()


def build_openapi(
    route_defs: Iterable[tuple[str, str, Any, str]],
    *,
    auth_enabled: bool = True,
) -> dict[str, Any]:
    """The OpenAPI document for ``(method, path, handler, module)`` route definitions."""
    types: list[Any] = []
    operations: list[tuple[str, str, dict[str, Any], Any, Any, dict[str, Any]]] = []
    for method, path, handler, module in route_defs:
        if method in ("HEAD", "*"):
            continue
        meta: dict[str, Any] = getattr(handler, "__cascade_doc__", {})
        summary, description = _summary(handler, meta)
        clean_path = _PARAM.sub(lambda m: "{" + m.group(1) + "}", path)
        op: dict[str, Any] = {
            "operationId": f"{module}.{handler.__name__}",
            "summary": summary,
            "tags": list(meta.get("tags") or (module,)),
        }
        if description:
            op["description"] = description
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name, _ in _PARAM.findall(path)
        ]
        for name, spec in (meta.get("query") or {}).items():
            text, schema = spec if isinstance(spec, tuple) else (spec, {"type": "string"})
            params.append({"name": name, "in": "query", "required": False, "schema": schema,
                           "description": text})
        if params:
            op["parameters"] = params
        if method not in SAFE_METHODS and not getattr(handler, "__cascade_public__", False) and auth_enabled:
            op["security"] = [{"bearerAuth": []}]
        request_t, response_t = meta.get("request"), meta.get("response")
        types.extend(t for t in (request_t, response_t) if t is not None)
        types.extend((meta.get("bodies") or {}).values())
        for data_t in (meta.get("sse") or {}).values():
            types.extend(data_t if isinstance(data_t, tuple) else (data_t,))
        operations.append((clean_path, method.lower(), op, request_t, response_t, meta))

    schemas, shared = _schema_components(tuple(types))
    components = dict(shared)  # the cached schemas themselves are never changed
    schema_of = dict(zip(map(id, types), schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for path, method, op, request_t, response_t, meta in operations:
        error = {"content": {"application/json": {"schema": _error_ref(path)}}}
        if request_t is not None:
            op["requestBody"] = {
                "required": bool(meta.get("request_required", True)),
                "content": {"application/json": {"schema": schema_of[id(request_t)]}},
            }
        ok: dict[str, Any] = {"description": "OK"}
        content: dict[str, Any] = {}
        if response_t is not None:
            content["application/json"] = {"schema": schema_of[id(response_t)]}
        if meta.get("sse"):
            events = {name: {"anyOf": [schema_of[id(x)] for x in t]} if isinstance(t, tuple)
                      else schema_of[id(t)] for name, t in meta["sse"].items()}
            content["text/event-stream"] = {"schema": sse_schema(events)}
        content.update(meta.get("content") or {})
        if content:
            ok["content"] = content
        responses = op.setdefault("responses", {})
        success = int(meta.get("status", 200))
        same_body = set(meta.get("same_body") or ())
        bodies = meta.get("bodies") or {}
        for status, text in (meta.get("responses") or {}).items():
            if int(status) in bodies:
                schema = schema_of[id(bodies[status])]
                responses[str(status)] = {"description": text,
                                          "content": {"application/json": {"schema": schema}}}
            elif int(status) < 400 or int(status) in same_body:
                responses[str(status)] = {**ok, "description": text}
            else:
                responses[str(status)] = {"description": text, **error}
        responses.setdefault(str(success), ok)
        responses.setdefault("default", {"description": "Error", **error})
        for status, named in (meta.get("headers") or {}).items():
            responses[str(status)] = {**responses[str(status)], "headers": {
                name: {"description": text, "required": True, "schema": schema}
                for name, (text, schema) in named.items()}}
        paths.setdefault(path, {})[method] = op
    for name, keywords in SCHEMA_EXTRAS.items():
        if name in components:
            components[name] = {**components[name], **keywords}
    components["Error"] = ERROR_SCHEMA
    components["OpenAIError"] = OPENAI_ERROR_SCHEMA
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Cascade API",
            "version": __version__,
            "description": "Simulate a GPU workload traced once on GPUs you do not have.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }


def route_defs_of(module_name: str, table: web.RouteTableDef) -> list[tuple[str, str, Any, str]]:
    """``(method, path, handler, module)`` for every plain route in a route table."""
    out = []
    for d in table:
        if isinstance(d, web.RouteDef):
            out.append((d.method.upper(), d.path, d.handler, module_name))
    return out
