"""Operational endpoints: health, readiness, metrics, OpenAPI and the stack's status."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cascade import __version__
from cascade.errors import CascadeError
from cascade.platform import subjects
from services.api.appkeys import BUS, OPENAPI, REGISTRY, SERVICE_STATUS, STORAGE
from services.api.domain_metrics import DOMAIN_METRICS
from services.api.domain_metrics import install as install_domain_metrics
from services.api.http import doc, json_response

routes = web.RouteTableDef()


class Health(msgspec.Struct, frozen=True, kw_only=True):
    """Liveness answer."""

    status: str
    version: str


class Check(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Outcome of one readiness check."""

    ok: bool
    latency_ms: float | None = None
    error: str | None = None


class Readiness(msgspec.Struct, frozen=True, kw_only=True):
    """Readiness answer: every dependency's check."""

    ready: bool
    checks: dict[str, Check]


class ServiceInstance(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One running instance of a Cascade service (from NATS micro discovery)."""

    id: str
    version: str
    instance: str = ""
    started: str = ""
    healthy: bool = True
    uptime_s: float | None = None
    stats: dict[str, str | int | float | bool | None] = msgspec.field(default_factory=dict)
    """The service's own figures (counters, its role, backend), scalars only."""


class ServiceStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One Cascade service: up when at least one instance answered."""

    up: bool
    versions: list[str]
    instances: list[ServiceInstance]


class StackStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Which services are up, their versions, queue depths and stream sizes."""

    version: str
    bus_connected: bool
    services: dict[str, ServiceStatus]
    queues: dict[str, dict[str, int]]
    streams: dict[str, dict[str, int]]


async def _timed(check: Any) -> Check:
    started = time.perf_counter()
    try:
        await check
    except CascadeError as exc:
        return Check(ok=False, error=str(exc))
    except (TimeoutError, OSError) as exc:
        return Check(ok=False, error=f"{type(exc).__name__}: {exc}")
    return Check(ok=True, latency_ms=round((time.perf_counter() - started) * 1000, 2))


@routes.get("/healthz")
@doc(response=Health, tags=("operations",))
async def healthz(request: web.Request) -> web.Response:
    """Liveness: the api process is serving requests."""
    return json_response(Health(status="ok", version=__version__))


@routes.get("/readyz")
@doc(response=Readiness, tags=("operations",), responses={503: "a dependency is not ready"},
     same_body=(503,))
async def readyz(request: web.Request) -> web.Response:
    """Readiness: NATS JetStream and S3 (the bucket) answer."""
    bus = request.app[BUS]
    storage = request.app[STORAGE]
    nats_check, s3_check = await asyncio.gather(
        _timed(bus.ping(timeout=2.0)), _timed(storage.ping(timeout=2.0))
    )
    checks = {"nats": nats_check, "s3": s3_check}
    ready = all(c.ok for c in checks.values())
    return json_response(Readiness(ready=ready, checks=checks), status=200 if ready else 503)


@routes.get("/metrics")
@doc(tags=("operations",), content={"text/plain": {"schema": {"type": "string"}}})
async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics: this api instance, plus runs/sims by state, sim durations and
    queue depths of the whole stack (:mod:`services.api.domain_metrics`)."""
    domain = request.app.get(DOMAIN_METRICS)
    if domain is not None:
        await domain.refresh()
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


OPENAPI_DOCUMENT = {
    "type": "object", "required": ["openapi", "info", "paths", "components"],
    "properties": {
        "openapi": {"const": "3.1.0"},
        "info": {"type": "object", "required": ["title", "version"],
                 "properties": {"title": {"type": "string"}, "version": {"type": "string"},
                                "description": {"type": "string"}}},
        "paths": {"type": "object", "additionalProperties": {"type": "object"}},
        "components": {"type": "object", "required": ["schemas", "securitySchemes"],
                       "properties": {"schemas": {"type": "object"},
                                      "securitySchemes": {"type": "object"}}},
    },
    "additionalProperties": False,
}
"""An OpenAPI 3.1 document (its full meta-schema is the specification's)."""


@routes.get("/openapi.json")
@doc(tags=("operations",), content={"application/json": {"schema": OPENAPI_DOCUMENT}})
async def openapi_json(request: web.Request) -> web.Response:
    """This OpenAPI document, generated from the registered routes."""
    return json_response(request.app[OPENAPI])


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _instances(replies: list[dict[str, Any]]) -> dict[str, list[ServiceInstance]]:
    by_service: dict[str, list[ServiceInstance]] = {}
    prefix = subjects.micro_name("x")[:-1]
    for reply in replies:
        name = str(reply.get("name", ""))
        if not name.startswith(prefix):
            continue
        service = name[len(prefix):]
        data: dict[str, Any] = {}
        for endpoint in reply.get("endpoints") or []:
            if isinstance(endpoint.get("data"), dict):
                data = endpoint["data"]
                break
        metadata = reply.get("metadata") or {}
        by_service.setdefault(service, []).append(
            ServiceInstance(
                id=str(reply.get("id", "")),
                version=str(reply.get("version", "")),
                instance=str(metadata.get("instance", data.get("instance", ""))),
                started=str(reply.get("started", "")),
                healthy=bool(data.get("healthy", True)),
                uptime_s=_number(data.get("uptime_s")),
                stats={k: v for k, v in data.items()
                       if k not in ("service", "version", "instance", "healthy", "uptime_s")
                       and (v is None or isinstance(v, str | int | float | bool))},
            )
        )
    return by_service


@routes.get("/api/status")
@doc(response=StackStatus, tags=("operations",))
async def api_status(request: web.Request) -> web.Response:
    """Which Cascade services are up (NATS micro discovery), their versions and queue depths."""
    bus = request.app[BUS]
    replies, queues, streams = await asyncio.gather(
        bus.discover_services("STATS", timeout=0.4), bus.queue_depths(), bus.stream_sizes()
    )
    found = _instances(replies)
    own = request.app.get(SERVICE_STATUS)
    if own is not None and "api" not in found:
        data = own()
        found["api"] = [ServiceInstance(id="self", version=data.get("version", __version__),
                                        instance=str(data.get("instance", "")),
                                        healthy=bool(data.get("healthy", True)))]
    services = {
        name: ServiceStatus(
            up=bool(found.get(name)),
            versions=sorted({i.version for i in found.get(name, [])}),
            instances=found.get(name, []),
        )
        for name in (*subjects.SERVICES, *sorted(set(found) - set(subjects.SERVICES)))
    }
    return json_response(
        StackStatus(
            version=__version__,
            bus_connected=bus.is_connected,
            services=services,
            queues=queues,
            streams=streams,
        )
    )


def setup(app: web.Application) -> None:
    """Domain metrics on /metrics (runs, sims, durations, queues)."""
    install_domain_metrics(app)
