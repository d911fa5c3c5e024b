"""An api on real NATS + S3 with one finished simulation (``client``, ``finished``), shared by
the /v1, limits and contract tests; a module sets ``api_tokens`` to require a token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient

from cascade.platform.bus import Bus
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage
from tests.test_v1 import FinishedSim, make_finished_sim, start_client


@pytest.fixture
def api_tokens() -> list[str]:
    """Tokens the api accepts for writes (none: writes are open)."""
    return []


@pytest.fixture
async def finished(bus: Bus, storage: Storage) -> FinishedSim:
    return await make_finished_sim(bus, storage)


@pytest.fixture
async def client(bus: Bus, bus_settings: Settings, storage: Storage, finished: FinishedSim,
                 api_tokens: list[str]) -> AsyncIterator[TestClient]:
    settings = bus_settings.replace(samples=False, api_tokens=api_tokens)
    c = await start_client(settings, bus, storage)
    try:
        yield c
    finally:
        await c.close()
