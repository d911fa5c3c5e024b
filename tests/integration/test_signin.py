"""POST /api/signin on real NATS: a code works once; wrong codes from one client are limited
(429 ``too_many_attempts`` with ``Retry-After``, as /openapi.json documents) until the oldest
of them leaves the window, and the limited attempts look no code up."""

from __future__ import annotations

from aiohttp.test_utils import TestClient

from cascade.platform.bus import Bus
from cascade.platform.signin import issue_code
from services.api.routes.signin import MAX_FAILURES, SIGNIN_FAILURES, WINDOW_S


async def _signin(client: TestClient, code: str) -> tuple[int, dict[str, object], str | None]:
    resp = await client.post("/api/signin", json={"code": code})
    return resp.status, await resp.json(), resp.headers.get("Retry-After")


async def test_a_code_works_once(client: TestClient, bus: Bus) -> None:
    code = await issue_code(bus, "tok-once")
    assert (await _signin(client, code))[:2] == (200, {"token": "tok-once"})
    status, body, retry = await _signin(client, code)
    assert status == 401 and "already used" in str(body["message"]) and retry is None


async def test_wrong_codes_are_limited_per_client_with_retry_after(client: TestClient,
                                                                   bus: Bus) -> None:
    failures = client.app[SIGNIN_FAILURES]
    now = [1000.0]
    failures.clock = lambda: now[0]
    good = await issue_code(bus, "tok-limited")
    for i in range(MAX_FAILURES):  # one a second
        status, body, retry = await _signin(client, f"wrong-{i}")
        assert status == 401 and retry is None, body
        now[0] += 1.0
    # the next attempt, even with the right code, waits for the oldest failure to leave the window
    status, body, retry = await _signin(client, good)
    wait = int(WINDOW_S) - MAX_FAILURES
    assert status == 429 and retry == str(wait), (status, body, retry)
    assert body["error"] == "too_many_attempts" and body["retry_after_s"] == wait
    assert body["limit"] == MAX_FAILURES and f"try again in {wait} s" in str(body["message"])
    # a malformed body is still refused as such (read before the limit)
    resp = await client.post("/api/signin", data=b"{nope", headers={"Content-Type": "application/json"})
    assert resp.status == 400
    now[0] += wait - 0.5  # half a second before: still limited, rounded up to 1 s
    assert (await _signin(client, good))[2] == "1"
    now[0] += 0.5  # the first failure left the window: the code was never looked up, it works
    assert (await _signin(client, good))[:2] == (200, {"token": "tok-limited"})
    # four failures remain in the window: one more is counted, then the client waits again
    assert (await _signin(client, "wrong-again"))[0] == 401
    status, _, retry = await _signin(client, "wrong-once-more")
    assert status == 429 and retry == "1"


async def test_openapi_documents_the_429_and_its_retry_after(client: TestClient) -> None:
    doc = await (await client.get("/openapi.json")).json()
    answer = doc["paths"]["/api/signin"]["post"]["responses"]["429"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    header = answer["headers"]["Retry-After"]
    assert header["required"] is True and header["schema"] == {"type": "integer", "minimum": 1}
