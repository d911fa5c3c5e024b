"""api app factory: health, readiness (real NATS + S3), metrics, OpenAPI, status, errors, auth."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from cascade.errors import ConflictError, NotFoundError
from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from services import ingest
from services.api.app import create_app
from services.api.http import doc, public, read_json
from tests.support.wait import wait_until

TOKEN = "test-token-123"


class Thing(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    size: int


extra = web.RouteTableDef()


@extra.get("/test/conflict")
async def conflict(request: web.Request) -> web.Response:
    raise ConflictError("run r1 is already completed", state="completed")


@extra.get("/test/missing")
async def missing(request: web.Request) -> web.Response:
    raise NotFoundError("trace t9 does not exist")


@extra.get("/test/crash")
async def crash(request: web.Request) -> web.Response:
    raise RuntimeError("secret internal detail <object at 0xdeadbeef>")


@extra.post("/test/things")
@doc(request=Thing, response=Thing)
async def create_thing(request: web.Request) -> web.Response:
    thing = await read_json(request, Thing)
    return web.json_response({"name": thing.name, "size": thing.size}, status=201)


@extra.post("/test/callback")
@public
async def callback(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _client(app: web.Application) -> TestClient:
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def client(bus: Bus, bus_settings: Settings, storage: Storage) -> AsyncIterator[TestClient]:
    settings = bus_settings.replace(api_tokens=[TOKEN, "second"])
    app = create_app(settings, bus=bus, storage=storage)
    app.add_routes(extra)
    c = await _client(app)
    try:
        yield c
    finally:
        await c.close()


async def test_healthz(client: TestClient) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert (await resp.json())["status"] == "ok"


async def test_readyz_checks_nats_and_s3(client: TestClient) -> None:
    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 200, body
    assert body["ready"] is True
    assert body["checks"]["nats"]["ok"] and body["checks"]["s3"]["ok"]


async def test_readyz_fails_when_s3_is_unreachable(bus: Bus, bus_settings: Settings) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = Storage(endpoint=f"http://127.0.0.1:{port}", access_key="a", secret_key="b",
                   bucket="cascade", connect_timeout=0.5, max_attempts=1)
    async with dead:
        client = await _client(create_app(bus_settings, bus=bus, storage=dead))
        try:
            resp = await client.get("/readyz")
            body = await resp.json()
        finally:
            await client.close()
    assert resp.status == 503
    assert body["ready"] is False
    assert body["checks"]["nats"]["ok"] is True
    assert body["checks"]["s3"]["ok"] is False
    assert f"127.0.0.1:{port}" in body["checks"]["s3"]["error"]


async def test_metrics_exposes_prometheus_text(client: TestClient) -> None:
    await client.get("/healthz")
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    assert 'cascade_http_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert "cascade_bus_connected 1.0" in text


async def test_openapi_is_generated_from_routes(client: TestClient) -> None:
    resp = await client.get("/openapi.json")
    spec = await resp.json()
    assert spec["openapi"].startswith("3.")
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/api/status"):
        assert path in spec["paths"], path
    status_op = spec["paths"]["/api/status"]["get"]
    assert status_op["summary"].startswith("Which Cascade services are up")
    ref = status_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.rsplit("/", 1)[-1] in spec["components"]["schemas"]
    assert "bearerAuth" in spec["components"]["securitySchemes"]


async def test_domain_errors_become_json(client: TestClient) -> None:
    resp = await client.get("/test/conflict")
    assert resp.status == 409
    assert await resp.json() == {
        "error": "conflict", "message": "run r1 is already completed", "state": "completed"
    }
    resp = await client.get("/test/missing")
    assert resp.status == 404 and (await resp.json())["error"] == "not_found"
    resp = await client.get("/no/such/route")
    assert resp.status == 404
    assert (await resp.json())["message"] == "no such resource: GET /no/such/route"


async def test_unexpected_errors_are_500_without_repr(client: TestClient) -> None:
    resp = await client.get("/test/crash")
    assert resp.status == 500
    body = await resp.json()
    assert body["error"] == "internal" and body["message"] == "internal server error"
    assert "deadbeef" not in await resp.text() and "RuntimeError" not in await resp.text()
    assert len(body["request_id"]) == 12


async def test_writes_need_a_bearer_token(client: TestClient) -> None:
    thing = {"name": "x", "size": 3}
    resp = await client.post("/test/things", json=thing)
    assert resp.status == 401
    assert (await resp.json())["error"] == "unauthorized"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await client.post("/test/things", json=thing, headers={"Authorization": "Bearer wrong"})
    assert resp.status == 401
    resp = await client.post("/test/things", json=thing, headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status == 201 and await resp.json() == thing
    resp = await client.post("/test/things", json=thing, headers={"Authorization": "Bearer second"})
    assert resp.status == 201
    resp = await client.post("/test/callback")
    assert resp.status == 200


async def test_bad_body_is_400_naming_the_field(client: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    resp = await client.post("/test/things", json={"name": "x", "size": "big"}, headers=auth)
    body = await resp.json()
    assert resp.status == 400
    assert body["error"] == "invalid_request" and body["field"] == "size"
    resp = await client.post("/test/things", data=b"{not json", headers=auth)
    assert resp.status == 400 and "malformed JSON" in (await resp.json())["message"]


async def test_api_status_lists_services_and_queues(
    client: TestClient, bus: Bus, bus_settings: Settings
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(bus_settings, bus=bus, stop=stop))
    try:
        statuses: list[int] = []

        async def ingest_up() -> dict[str, Any] | None:
            resp = await client.get("/api/status")
            statuses.append(resp.status)
            body: dict[str, Any] = await resp.json()
            return body if body["services"]["ingest"]["up"] else None

        body = await wait_until(ingest_up, 10, what="/api/status to show ingest up")
        assert statuses[-1] == 200
        assert body["bus_connected"] is True
        assert set(subjects.SERVICES) <= set(body["services"])
        ingest_status = body["services"]["ingest"]
        assert ingest_status["up"] is True
        assert ingest_status["versions"] == [body["version"]]
        assert body["services"]["simulator"] == {"up": False, "versions": [], "instances": []}
        assert subjects.EVENTS_STREAM in body["streams"]
        assert isinstance(body["queues"], dict)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
