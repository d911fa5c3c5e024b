"""The run page and the GPU page in a browser, with the accel-sim model configured through an
Accel-Sim checkout's config layout: the run page lists Accel-Sim's per-kernel statistics
beside the built-in model's prediction; the GPU page names the config serving each GPU.

The stack: real nats-server and S3 server, api, ingest, prepare, orchestrator (local backend)
and simulator processes running the stand-in accel-sim.out on the real matrixmul trace.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from cascade.platform import subjects
from cascade.platform.runstore import read_result
from cascade.platform.state import RunRecord
from programs.cli.importer import run_import
from tests.support.accelsim_helpers import copy_checkout, make_binary
from tests.support.accelsim_standin import cycles_of, stats_of
from tests.support.paths import SHARED_DATA
from tests.support.traces_stack import TOKEN, TracesStack, running_stack
from tests.support.wait import wait_for_kv

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
MATRIXMUL = SHARED_DATA / "traces" / "matrixmul-32x32-sm61"

playwright_api = pytest.importorskip("playwright.async_api")
if shutil.which(CHROMIUM) is None:
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
async def accel_run(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    from services.orchestrator import run as run_orchestrator

    base = tmp_path_factory.mktemp("accelsim-page")
    binary = make_binary(base / "bin")
    configs = copy_checkout(base / "accel-sim-framework", SM6_TITANX={"pace_s": 0.05})
    async with running_stack(s3_server, base, accelsim_bin=str(binary), accelsim_configs=str(configs),
                             sim_timeout_s=60.0) as stack:
        await stack.start("orchestrator", run_orchestrator, orchestrator_backend="local", max_local_sims=1)
        summary = await run_import(argparse.Namespace(
            path=MATRIXMUL, app=stack.base_url, token=TOKEN, name=None, source_gpu="SM61_GTX1080TI",
            kind=None, workload="matrixmul 32x32", trace_id=None, state_file=base / "import.json",
            no_seal=False, wait=90.0, quiet=True))
        assert summary["state"] == "ready", summary
        async with aiohttp.ClientSession() as s, s.post(
                stack.base_url + "/api/runs", headers={"Authorization": f"Bearer {TOKEN}"},
                json={"trace_id": summary["trace_id"], "configs": ["SM61_GTX1080TI"], "model": "accel-sim"}) as r:
            assert r.status == 202, await r.text()
            body = await r.json()
        await wait_for_kv(stack.bus, subjects.KV_RUNS, body["id"], lambda x: x.state == "completed",
                          type_=RunRecord, timeout=90)
        yield {"stack": stack, "run": body}


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


async def test_run_page_shows_accelsim_statistics_beside_the_builtin_model(
        accel_run: dict[str, Any], browser: Any) -> None:
    stack: TracesStack = accel_run["stack"]
    run = accel_run["run"]
    result = await read_result(stack.storage, run["id"], run["run"]["sim_ids"][0])
    [k] = result.accelsim_kernels
    page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{stack.base_url}/#/runs/{run['id']}")
    table = page.locator('table.accelsim[data-config="SM61_GTX1080TI"]')
    await table.wait_for(timeout=20_000)
    heads = [h.strip() for h in await table.locator("th").all_inner_texts()]
    assert heads == ["Kernel", "Cycles", "Instructions", "IPC", "Occupancy", "L1D hit", "L2 hit",
                     "DRAM BW util", "Accel-Sim", "Built-in", "Built-in vs Accel-Sim"]
    cells = [c.strip() for c in await table.locator('tr[data-kernel="1"] td').all_inner_texts()]
    want = stats_of(1)
    assert cells[1] == str(cycles_of(1)) and cells[2] == str(10516)
    assert cells[4] == f"{want['occupancy_pct']:.1f}%"
    assert cells[5] == f"{100 * (1 - want['l1d_misses'] / want['l1d_accesses']):.1f}%"
    assert cells[6] == f"{100 * (1 - want['l2_misses'] / want['l2_accesses']):.1f}%"
    assert cells[8] == f"{cycles_of(1) / 1417.0:.2f} µs"
    assert k.builtin_ns is not None and k.builtin_model in cells[9]
    assert k.difference_pct is not None and cells[10] == f"{'+' if k.difference_pct >= 0 else ''}{k.difference_pct:.2f}%"
    note = await page.locator("#rd-accelsim .note").inner_text()
    assert "SM6_TITANX (same chip) at 1417 MHz" in note and "GP102" in note
    await page.goto(f"{stack.base_url}/#/gpus")
    await page.locator("#gp-table").wait_for(timeout=15_000)
    row = await page.locator("#gp-table tr", has_text="SM61_GTX1080TI").first.inner_text()
    assert "SM6_TITANX (same chip)" in row
    none = await page.locator("#gp-table tr", has_text="SM100_B200").first.inner_text()
    assert "none" in none
    assert errors == []
