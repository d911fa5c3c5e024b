"""The app client rides through an outage once it has reached the app, and fails fast before."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from programs.client import AppUnreachableError, CascadeClient
from programs.embedded.ports import free_port


class _App:
    """A tiny api on a fixed port that can be stopped and started again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.calls: list[str] = []
        self.unavailable = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def traces(request: web.Request) -> web.Response:
            self.calls.append(request.method)
            if self.unavailable > 0:
                self.unavailable -= 1
                return web.json_response({"error": "unavailable", "message": "restarting"}, status=503)
            return web.json_response({"traces": [], "calls": len(self.calls)})

        app = web.Application()
        app.router.add_get("/api/traces", traces)
        app.router.add_post("/api/traces", traces)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def test_first_contact_fails_fast_with_one_clear_error() -> None:
    port = free_port()
    t0 = time.monotonic()
    async with CascadeClient(f"http://127.0.0.1:{port}", "t", ride_through_s=30) as api:
        with pytest.raises(AppUnreachableError, match="connection refused"):
            await api.list_traces()
    assert time.monotonic() - t0 < 5


@pytest.mark.slow  # rides through a 1.5 s outage (~2.5 s): `make test` runs it, `make test-unit` leaves it out
async def test_an_outage_after_first_contact_is_ridden_through() -> None:
    app = _App(free_port())
    await app.start()
    async with CascadeClient(f"http://127.0.0.1:{app.port}", "t", ride_through_s=20) as api:
        assert await api.list_traces() == []
        await app.stop()

        async def come_back() -> None:
            await asyncio.sleep(1.5)
            await app.start()

        back = asyncio.create_task(come_back())
        assert await api.list_traces() == []  # refused for 1.5 s, then answered
        await back
        assert api.retries >= 1
        app.unavailable = 2
        assert await api.list_traces() == []  # two 503s, then the answer
        assert app.calls[-3:] == ["GET", "GET", "GET"]
    await app.stop()


async def test_without_ride_through_an_outage_is_an_error_and_a_trace_is_never_created_twice() -> None:
    app = _App(free_port())
    await app.start()
    async with CascadeClient(f"http://127.0.0.1:{app.port}", "t", ride_through_s=0) as api:
        await api.list_traces()
        await app.stop()
        with pytest.raises(AppUnreachableError):
            await api.list_traces()
    await app.start()
    async with CascadeClient(f"http://127.0.0.1:{app.port}", "t", ride_through_s=5) as api:
        await api.list_traces()
        app.unavailable = 1
        before = len(app.calls)
        body = await api.request("POST", "/api/traces", json={})  # a 503 made nothing: retried
        assert body["calls"] == before + 2 and app.calls[-2:] == ["POST", "POST"]
    await app.stop()
