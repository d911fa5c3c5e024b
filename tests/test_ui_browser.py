"""The web UI in headless chromium: the page loads, the sample run shows its "Sample" badge,
and opening it shows the recorded reference table.

Needs the ``playwright`` Python package and a system chromium at /usr/bin/chromium
(``apt-get install -y chromium``; no browser is downloaded). Skipped without them.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cascade.bus import Bus, connect
from cascade.natsserver import NatsServer
from cascade.samples import RECORDED_RUN_ID
from cascade.settings import Settings
from cascade.storage import Storage

from services.api.app import create_app
from tests.fixtures_nats import nats_settings

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

playwright_api = pytest.importorskip("playwright.async_api")
if shutil.which(CHROMIUM) is None:
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture
async def live_api(tmp_path: Path, storage: Storage) -> AsyncIterator[str]:
    server = NatsServer(tmp_path / "nats")
    server.start()
    settings: Settings = nats_settings(server.url, data_dir=str(tmp_path / "data"))
    bus: Bus = await connect(settings, name="test-ui-browser")
    await bus.ensure_streams()
    client = TestClient(TestServer(create_app(settings, bus=bus, storage=storage)))
    await client.start_server()
    try:
        yield str(client.make_url("/"))
    finally:
        await client.close()
        await bus.close()
        server.stop()


async def test_sample_run_badge_and_reference_table(live_api: str) -> None:
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(live_api)
            assert await page.title() == "Cascade"
            row = page.locator("#runs tbody tr", has_text=RECORDED_RUN_ID)
            await row.wait_for(timeout=15_000)
            badge = row.locator(".badge")
            assert (await badge.inner_text()).strip() == "Sample"
            synthetic = page.locator("#traces tbody tr", has_text="synthetic")
            await synthetic.first.wait_for(timeout=15_000)
            await row.locator("button[data-run]").click()
            await page.locator("#run-detail").wait_for(state="visible", timeout=10_000)
            assert (await page.locator("#rd-badge .badge").inner_text()).strip() == "Sample"
            reference = page.locator("#rd-results h4", has_text="Recorded reference")
            await reference.wait_for(timeout=10_000)
            text = await page.locator("#rd-results").inner_text()
            for figure in ("SM90_H100", "254.45 ms", "262.14 ms", "+3.02%", "SM80_A100", "+3.38%",
                           "counterfactual"):
                assert figure in text, figure
            assert errors == []
        finally:
            await browser.close()
