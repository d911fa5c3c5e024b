"""Session fixture: a real ``nats-server -js`` on a random port in a temporary directory.

Loaded by ``tests/conftest.py`` (``pytest_plugins``).

Fixtures:

- ``nats_server`` (session): a running :class:`programs.embedded.nats.NatsServer`.
- ``nats_url`` (session): its client URL.
- ``bus_settings`` (function): real Settings pointing at it (short drain/ack waits).
- ``bus`` (function): a connected :class:`cascade.platform.bus.Bus` with streams ensured.

Tests that share the server use unique ids (``unique()``) for subjects and
durables, so they never see each other's messages.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from cascade.platform.bus import Bus, connect
from cascade.platform.settings import Settings, load_settings
from programs.embedded.nats import NatsServer


def unique(prefix: str = "t") -> str:
    """A fresh id usable as a subject token / durable name."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def nats_settings(url: str, **overrides: Any) -> Settings:
    """Real Settings for a test server (environment ignored)."""
    values: dict[str, Any] = {
        "nats_url": url,
        "nats_connect_timeout_s": 2.0,
        "drain_timeout_s": 2.0,
        "log_format": "console",
    }
    values.update(overrides)
    return load_settings({}, **values)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
def bus_settings(nats_url: str) -> Settings:
    return nats_settings(nats_url)


@pytest.fixture
async def bus(bus_settings: Settings) -> AsyncIterator[Bus]:
    b = await connect(bus_settings, name="test")
    await b.ensure_streams()
    try:
        yield b
    finally:
        await b.close()
