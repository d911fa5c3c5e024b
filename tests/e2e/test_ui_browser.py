"""The web UI in headless chromium against the real stack (api + orchestrator + simulator in
process, the testbed's :class:`~programs.embedded.testbed.InProcessStack`; real nats-server and
S3): the sample's figures, a run of the synthetic replica started
from the form and watched to 100 %, the trace picker across refreshes, a request-simulator round
trip, and every page at 1280 and 420 px without console errors or horizontal overflow.

Screenshots of every page are written to ``test-artifacts/ui-screens/`` (or
``$CASCADE_UI_SCREENSHOTS``); the path is printed. Needs the ``playwright`` Python package and
a system chromium at /usr/bin/chromium or ``$CASCADE_CHROMIUM`` (``apt-get install -y chromium``;
no browser is downloaded). Skipped without them, and the terminal summary then says so loudly.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from cascade.platform import subjects
from cascade.platform.samples import RECORDED_RUN_ID, SYNTHETIC_TRACE_ID
from cascade.platform.state import TraceRecord
from programs.embedded.testbed import InProcessStack, stack_ports
from tests.support.paths import REPO
from tests.support.wait import wait_for_kv

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CASCADE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
TOKEN = "ui-test-" + secrets.token_hex(8)
SECOND_TRACE = "ui-second-trace"
SCREENS = Path(os.environ.get("CASCADE_UI_SCREENSHOTS")
               or REPO / "test-artifacts" / "ui-screens")

playwright_api = pytest.importorskip("playwright.async_api")
if shutil.which(CHROMIUM) is None:
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)", allow_module_level=True)


class UIStack(InProcessStack):
    """The testbed's in-process stack (api, orchestrator, pool simulator) with the UI tests'
    handles."""

    @property
    def url(self) -> str:
        """The web UI's address."""
        return self.base + "/"

    async def get_json(self, path: str) -> Any:
        """The api's JSON answer to ``GET path``."""
        async with aiohttp.ClientSession() as session, session.get(self.base + path) as resp:
            return await resp.json()


@pytest.fixture(scope="module")
async def stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[UIStack]:
    tmp = tmp_path_factory.mktemp("ui-browser")
    settings = s3_server.settings(
        bucket=f"ui-{secrets.token_hex(6)}", data_dir=str(tmp / "data"),
        http_port=stack_ports().http, orchestrator_backend="pool", job_ack_wait_s=30.0,
        api_tokens=[TOKEN], nats_connect_timeout_s=2.0, drain_timeout_s=2.0, log_format="console")
    # a NATS of its own, the session's S3; stopped on exit (a service failing to stop is no error)
    async with UIStack.running(settings, "api", "orchestrator", "simulator", nats_dir=tmp / "nats",
                               quiet=True, name="test-ui-browser") as stack:
        # a second ready trace (the synthetic replica's bundle under another id) for the picker
        kv = await stack.bus.kv(subjects.KV_TRACES)
        synthetic = await wait_for_kv(kv, subjects.KV_TRACES, SYNTHETIC_TRACE_ID, lambda _t: True,
                                      type_=TraceRecord, timeout=10)  # the samples the api loads
        await kv.put(SECOND_TRACE, msgspec.structs.replace(
            synthetic, id=SECOND_TRACE, name="second ready trace", created_at=synthetic.created_at + 1,
            provenance=msgspec.structs.replace(synthetic.provenance, badge=None, source="upload",
                                               description="")))
        yield stack


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


class Page:
    """A browser page that records console errors and page exceptions."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def unexpected(self, *allowed_status: int) -> list[str]:
        ok = tuple(f"status of {s}" for s in allowed_status)
        return [e for e in self.errors if not (ok and "Failed to load resource" in e and any(s in e for s in ok))]


async def new_page(browser: Any, width: int = 1280, token: str | None = None) -> Page:
    context = await browser.new_context(viewport={"width": width, "height": 900})
    if token:
        await context.add_init_script(f"sessionStorage.setItem('cascade-token', {token!r})")
    return Page(await context.new_page())


async def shot(p: Page, name: str) -> Path:
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / f"{name}.png"
    await p.page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


async def text_of(p: Page, selector: str) -> str:
    return str(await p.page.locator(selector).inner_text())


async def test_sample_figures_consistent(stack: UIStack, browser: Any) -> None:
    p = await new_page(browser)
    await p.page.goto(stack.url)
    assert await p.page.title() == "Cascade"
    sample = p.page.locator("#ov-sample")
    await sample.locator(".badge", has_text="Sample").wait_for(timeout=15_000)
    await p.page.locator("#ov-runs a", has_text=RECORDED_RUN_ID).click()
    table = p.page.locator("#rd-table")
    await table.wait_for(timeout=15_000)
    assert (await p.page.locator("#rd-badge .badge").inner_text()).strip() == "Sample"
    rows = {cfg: await text_of(p, f'#rd-table tr[data-config="{cfg}"]')
            for cfg in ("SM90_H100", "SM90_H200", "SM80_A100")}
    for figure in ("254.45 ms", "262.14 ms", "+3.02%"):
        assert figure in rows["SM90_H100"], (figure, rows["SM90_H100"])
    for figure in ("222.08 ms", "229.58 ms", "+3.38%"):
        assert figure in rows["SM80_A100"], (figure, rows["SM80_A100"])
    assert "counterfactual" not in rows["SM90_H100"] and "counterfactual" not in rows["SM80_A100"]
    assert "counterfactual" in rows["SM90_H200"] and "262.16 ms" in rows["SM90_H200"]
    # the plot shows the same figures: predicted beside real, none for the H200 baseline
    bars = p.page.locator("#ch-e2e rect.mark")
    values = {(await b.get_attribute("data-series"), float(await b.get_attribute("data-value") or "nan"))
              for b in await bars.all()}
    assert values == {("Predicted", 262.14), ("Real baseline", 254.45), ("Predicted", 262.16),
                      ("Predicted", 229.58), ("Real baseline", 222.08)}
    assert "counterfactual" in await text_of(p, "#ch-e2e")
    ref = await text_of(p, "#rd-reftable")
    assert "254.45 ms" in ref and "262.14 ms" in ref
    await shot(p, "run-sample-1280")
    await p.page.set_viewport_size({"width": 420, "height": 900})
    await p.page.wait_for_timeout(400)
    assert await p.page.evaluate("document.documentElement.scrollWidth") <= 421
    await shot(p, "run-sample-420")
    assert p.unexpected() == []


async def test_run_from_form_reaches_100_and_plots(stack: UIStack, browser: Any) -> None:
    p = await new_page(browser)  # no token yet: the first start is refused with a pointer
    await p.page.goto(stack.url + "#/new")
    await p.page.locator(f'#nr-trace option[value="{SYNTHETIC_TRACE_ID}"]').wait_for(state="attached", timeout=15_000)
    await p.page.select_option("#nr-trace", SYNTHETIC_TRACE_ID)
    for cfg in ("SM90_H100", "SM80_A100"):
        await p.page.check(f'input[name=cfg][value="{cfg}"]')
    models = [o.strip() for o in await p.page.locator("#nr-model option").all_inner_texts()]
    assert models[0] == "auto" and "accel-sim" not in models  # accel-sim is not configured here
    await p.page.click("#newrun button[type=submit]")
    banner = p.page.locator("#banner")
    await banner.wait_for(state="visible", timeout=10_000)
    assert "API token" in await banner.inner_text()
    assert "needed" in (await p.page.get_attribute("#token-box", "class") or "")
    await shot(p, "token-needed-1280")
    await p.page.fill("#token", TOKEN)
    await p.page.click("#newrun button[type=submit]")
    await p.page.wait_for_url("**#/runs/run-*", timeout=15_000)
    # progress arrives over the event stream and reaches 100 % on both sims
    rows = p.page.locator("#rd-sims tbody tr")
    await rows.nth(1).wait_for(timeout=15_000)
    seen: set[str] = set()
    shots: set[str] = set()
    for _ in range(600):
        pcts = [t.strip() for t in await p.page.locator("#rd-sims .pct").all_inner_texts()]
        seen.update(pcts)
        if "progress" not in shots and any(t != "100%" for t in pcts):
            shots.add("progress")
            await shot(p, "run-progress-1280")
        if len(pcts) == 2 and all(t == "100%" for t in pcts):
            break
        await p.page.wait_for_timeout(250)
    assert pcts == ["100%", "100%"], pcts
    await p.page.locator("#ch-e2e rect.mark").first.wait_for(timeout=30_000)
    await p.page.locator("#ch-steps path.line").nth(1).wait_for(timeout=30_000)
    await p.page.locator("#ch-busy rect.mark").first.wait_for(timeout=30_000)
    assert await p.page.locator("#ch-e2e rect.mark").count() == 2  # no real baseline bars
    assert (await text_of(p, "#ch-e2e")).count("counterfactual") == 2
    assert await p.page.locator("#rd-top .kname").count() >= 2
    full = await p.page.locator("#rd-top .kname").first.get_attribute("title")
    short = (await p.page.locator("#rd-top .kname").first.inner_text()).strip()
    assert full and len(short) <= len(full) and "(" not in short  # shortened, full name on hover
    assert "host-bound" in (await text_of(p, "#rd-results")).lower()
    table = await text_of(p, "#rd-table")
    assert " ms" in table and "0.00 ms" not in table
    await shot(p, "run-synthetic-1280")
    run_id = p.page.url.rsplit("/", 1)[-1]
    # the compare page puts this run beside the sample; the source GPU's config is 1.00x
    await p.page.goto(stack.url + "#/compare")
    row = p.page.locator(f'tr[data-row="{run_id}/SM90_H100"]')
    await row.wait_for(timeout=15_000)
    assert "1.00×" in await row.inner_text()
    other = await p.page.locator(f'tr[data-row="{run_id}/SM80_A100"]').inner_text()
    assert "×" in other and "SM90_H100" in other
    await p.page.locator("#ch-cmp-speed rect.mark").first.wait_for()
    assert p.unexpected(401) == []


async def test_trace_picker_keeps_value_across_refresh(stack: UIStack, browser: Any) -> None:
    p = await new_page(browser, token=TOKEN)
    await p.page.goto(stack.url + "#/new")
    picker = p.page.locator("#nr-trace")
    await p.page.locator(f'#nr-trace option[value="{SECOND_TRACE}"]').wait_for(state="attached", timeout=15_000)
    options = await p.page.locator("#nr-trace option").evaluate_all("os => os.map(o => o.value)")
    assert SECOND_TRACE in options and SYNTHETIC_TRACE_ID in options
    current = await picker.input_value()
    other = next(v for v in options if v != current)
    await p.page.select_option("#nr-trace", other)
    await p.page.check('input[name=cfg][value="SM90_H200"]')
    await p.page.wait_for_timeout(9_000)  # two automatic refreshes
    assert await picker.input_value() == other
    await p.page.reload()
    await p.page.locator(f'#nr-trace option[value="{other}"]').wait_for(state="attached", timeout=15_000)
    await p.page.wait_for_timeout(500)
    assert await picker.input_value() == other
    assert await p.page.is_checked('input[name=cfg][value="SM90_H200"]')
    assert p.unexpected() == []


async def test_signin_link_signs_in_once(stack: UIStack, browser: Any) -> None:
    """The link `cascade up` prints: opened without a token, it signs the browser session in
    (a write works), leaves the address bar, and works once."""
    from cascade.platform.signin import issue_code, signin_url

    code = await issue_code(stack.bus, TOKEN)
    link = signin_url(stack.url, code) + "#/serve"
    p = await new_page(browser)
    await p.page.goto(link)
    await p.page.locator("#token-box.signed-in").wait_for(timeout=15_000)
    assert "signin" not in p.page.url and p.page.url.endswith("#/serve")
    assert await p.page.evaluate("sessionStorage.getItem('cascade-token')") == TOKEN
    await p.page.locator("#sc-model option").first.wait_for(state="attached", timeout=15_000)
    await p.page.fill("input[name=n]", "40")
    await p.page.click("#serve button[type=submit]")  # POST /api/scenarios: a write
    await p.page.locator("#ch-ttft path.line").wait_for(timeout=60_000)
    assert await p.page.locator("#banner").is_hidden()
    await shot(p, "signed-in-request-simulator")
    again = await new_page(browser)
    await again.page.goto(link)
    banner = again.page.locator("#banner")
    await banner.wait_for(state="visible", timeout=15_000)
    assert "already used" in await banner.inner_text()
    assert await again.page.evaluate("sessionStorage.getItem('cascade-token')") is None
    assert await again.page.locator("#token-box.signed-in").count() == 0
    assert p.unexpected() == [] and again.unexpected(401) == []


async def test_request_simulator_round_trip(stack: UIStack, browser: Any) -> None:
    # the sample's synthetic run, simulated by the api at first start, is already a model
    models = (await stack.get_json("/v1/models"))["data"]
    assert models
    p = await new_page(browser, token=TOKEN)
    await p.page.goto(stack.url + "#/serve")
    await p.page.locator("#sc-model option").first.wait_for(state="attached", timeout=15_000)
    await p.page.fill("input[name=rate]", "-3")
    await p.page.click("#serve button[type=submit]")
    err = p.page.locator("input[name=rate] + .field-error")
    await err.wait_for(timeout=15_000)  # the api's error shown at the field
    await p.page.fill("input[name=rate]", "4")
    await p.page.fill("input[name=n]", "150")
    await p.page.click("#serve button[type=submit]")
    for chart in ("#ch-ttft", "#ch-tpot", "#ch-itl", "#ch-e2el"):
        await p.page.locator(f"{chart} path.line").wait_for(timeout=60_000)
    await p.page.locator("#ch-thr rect.mark").first.wait_for(timeout=10_000)
    assert await p.page.locator("input[name=rate]").get_attribute("aria-invalid") is None
    assert await p.page.locator("#serve .field-error").count() == 0
    cards = await text_of(p, "#sc-cards")
    assert "req/s" in cards and "Goodput" in cards
    await p.page.locator("#ch-sweep path.line").nth(2).wait_for(timeout=120_000)
    await p.page.locator("#sc-capacity", has_text="apacity").wait_for(timeout=120_000)
    capacity = await text_of(p, "#sc-capacity")
    if "Capacity under the SLOs" in capacity:
        assert await p.page.locator("#ch-sweep line.capacity").count() == 1
    assert await p.page.locator("#sc-extrapolated, #sc-calibrated").count() == 1
    await shot(p, "serve-answer-1280")
    # prompts far beyond the six-token prefill the sims saw: the banner says it extrapolates
    await p.page.uncheck("input[name=sweep]")
    await p.page.fill("input[name=prompt-tokens]", "2000")
    await p.page.click("#serve button[type=submit]")
    await p.page.locator("#sc-extrapolated", has_text="prefill").wait_for(timeout=60_000)
    assert "2000" in await text_of(p, "#sc-extrapolated")
    await p.page.set_viewport_size({"width": 420, "height": 900})
    await p.page.wait_for_timeout(400)
    assert await p.page.evaluate("document.documentElement.scrollWidth") <= 421
    await shot(p, "serve-answer-420")
    assert p.unexpected(400) == []


async def _describe(p: Page, config: str, gpu: str, *, experts: str = "", dp: int = 1, ep: int = 1) -> None:
    """The Request simulator's description fields: a bundled config on a GPU, its experts' dtype
    (\"\": the same as the layers'), data- and expert-parallel degrees."""
    await p.page.select_option("#sc-config", config)
    await p.page.select_option("#sc-gpu", gpu)
    await p.page.select_option("select[name=moe_quant]", experts)
    await p.page.fill("input[name=dp]", str(dp))
    await p.page.fill("input[name=ep]", str(ep))


async def test_request_simulator_described_model(stack: UIStack, browser: Any, tmp_path: Path) -> None:
    """A model described by a bundled config.json on a GPU, at a fixed concurrency: the answer
    and its basis (described, the kernel model's expected error); then the same from an
    uploaded config.json file, and a config with a mistyped field named at the file picker."""
    p = await new_page(browser, token=TOKEN)
    await p.page.goto(stack.url + "#/serve")
    await p.page.check("input[name=source][value=described]")
    await p.page.locator('#sc-config option[value="llama-3.1-8b"]').wait_for(state="attached", timeout=15_000)
    await p.page.locator('#sc-gpu option[value="SM90_H100"]').wait_for(state="attached", timeout=15_000)
    await p.page.select_option("#sc-config", "llama-3.1-8b")
    await p.page.select_option("#sc-gpu", "SM90_H100")
    assert "Llama-3.1-8B" in await text_of(p, "#sc-config-note")
    assert await p.page.locator("select[name=clients_start]").is_hidden()  # an open loop has no clients
    await p.page.check("input[name=load][value=concurrency]")
    assert await p.page.locator("input[name=rate]").is_hidden()
    # clients started together, as a serving benchmark starts them, unless told otherwise
    assert await p.page.locator("select[name=clients_start]").input_value() == "together"
    await p.page.fill("input[name=concurrency]", "8")
    await p.page.fill("input[name=n]", "40")
    await p.page.fill("input[name=prompt-tokens]", "512")
    await p.page.fill("input[name=output-tokens]", "64")
    await p.page.click("#serve button[type=submit]")
    basis = p.page.locator("#sc-basis.described")
    await basis.wait_for(timeout=60_000)
    text = await basis.inner_text()
    assert "described" in text and "SM90_H100" in text and "mean error per kernel" in text
    assert "%" in await text_of(p, "#sc-expected-error")
    assert await p.page.locator("#sc-extrapolated, #sc-calibrated").count() == 0
    cards = await text_of(p, "#sc-cards")
    assert "Median TTFT" in cards and "Median TPOT" in cards
    await p.page.locator("#ch-ttft path.line").wait_for(timeout=30_000)
    await shot(p, "serve-described-1280")
    # a MoE model served as vllm serve --data-parallel-size 2 --enable-expert-parallel on H200s
    await _describe(p, "gpt-oss-120b", "SM90_H200", experts="mxfp4", dp=2, ep=2)
    await p.page.click("#serve button[type=submit]")
    await p.page.locator("#sc-basis.described", has_text="DP 2").wait_for(timeout=60_000)
    assert "2 data-parallel engines per replica" in await text_of(p, "#sc-basis")
    await shot(p, "serve-described-dp-1280")
    await _describe(p, "llama-3.1-8b", "SM90_H100")
    # served by SGLang: its scheduler, and its KV cache sized as SGLang sizes it (mem_fraction_static
    # 0.835 of an 80 GB H100 at TP 1, against vLLM's 0.9 less activations)
    await p.page.select_option("select[name=scheduler]", "sglang")
    await p.page.click("#serve button[type=submit]")
    await p.page.locator("#sc-basis.described", has_text="SM90_H100").wait_for(timeout=60_000)
    await p.page.locator("#ch-ttft path.line").wait_for(timeout=30_000)
    sglang_kv = re.search(r"KV cache\s*([\d.]+ ?[kMG]?) tokens", await text_of(p, "#sc-basis"))
    vllm_kv = re.search(r"KV cache\s*([\d.]+ ?[kMG]?) tokens", text)
    assert sglang_kv and vllm_kv and sglang_kv.group(1) != vllm_kv.group(1), (sglang_kv, vllm_kv)
    assert "(SGLang's rule)" in await text_of(p, "#sc-basis") and "(vLLM's rule)" in text
    await shot(p, "serve-described-sglang-1280")
    await p.page.select_option("select[name=scheduler]", "vllm")
    # the same model from a config.json file
    configs = (await stack.get_json("/api/model-configs"))["configs"]
    llama = next(c["config"] for c in configs if c["name"] == "llama-3.1-8b")
    good = tmp_path / "config.json"
    good.write_text(msgspec.json.encode(llama).decode())
    await p.page.select_option("#sc-config", "__upload__")
    await p.page.set_input_files("#sc-config-file", str(good))
    await p.page.locator("#sc-config-note", has_text="Uploaded config.json").wait_for(timeout=5_000)
    # an uploaded checkpoint is served in its own precision (its quantization_config) unless told
    assert await p.page.locator("select[name=quant]").input_value() == ""
    await p.page.evaluate("document.querySelector('#sc-out').innerHTML = ''")
    await p.page.click("#serve button[type=submit]")
    await basis.wait_for(timeout=60_000)
    # a mistyped field: the api's 400 names it, shown at the file picker
    bad = tmp_path / "bad.json"
    bad.write_text(msgspec.json.encode({**llama, "hidden_size": "wide"}).decode())
    await p.page.set_input_files("#sc-config-file", str(bad))
    await p.page.click("#serve button[type=submit]")
    err = p.page.locator("#sc-config-file + .field-error")
    await err.wait_for(timeout=15_000)
    assert "hidden_size: Expected int" in await err.inner_text()
    await p.page.set_viewport_size({"width": 420, "height": 900})
    await p.page.wait_for_timeout(400)
    assert await p.page.evaluate("document.documentElement.scrollWidth") <= 421
    await shot(p, "serve-described-error-420")
    assert p.unexpected(400) == []


PAGES = {"overview": "#/", "traces": "#/traces", "trace": f"#/traces/{SYNTHETIC_TRACE_ID}", "new": "#/new",
         "run": f"#/runs/{RECORDED_RUN_ID}", "compare": "#/compare", "serve": "#/serve", "gpus": "#/gpus"}


@pytest.mark.parametrize("width", [1280, 420])
async def test_every_page_renders(stack: UIStack, browser: Any, width: int) -> None:
    p = await new_page(browser, width=width, token=TOKEN)
    for name, hash_ in PAGES.items():
        await p.page.goto(stack.url + hash_)
        await p.page.wait_for_load_state("networkidle")
        await p.page.wait_for_timeout(1200)
        assert await p.page.locator("main p.error").count() == 0, (name, await text_of(p, "main"))
        overflow = await p.page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= width + 1, (name, overflow)
        await shot(p, f"{name}-{width}")
    assert p.unexpected() == [], p.errors


async def test_trace_page_table_and_charts(stack: UIStack, browser: Any) -> None:
    p = await new_page(browser)
    await p.page.goto(stack.url + f"#/traces/{SYNTHETIC_TRACE_ID}")
    await p.page.locator("#ch-family rect.mark").first.wait_for(timeout=20_000)
    assert await p.page.locator("#ch-steps path.line").count() == 2  # prefill and decode
    info = p.page.locator("#kt-info")
    await info.wait_for()
    assert "of 11248" in await info.inner_text()
    # sort by duration, longest first (keyboard: the header is a button)
    await p.page.locator('button.sort[data-col="duration_ns"]').focus()
    await p.page.keyboard.press("Enter")
    await p.page.locator('th[aria-sort="ascending"] button[data-col="duration_ns"], '
                         'th[aria-sort="descending"] button[data-col="duration_ns"]').wait_for()
    await p.page.wait_for_timeout(300)
    first = await text_of(p, "#kt tbody tr:first-child")
    assert " ms" in first or " µs" in first
    await p.page.fill("#kt-q", "gemm")
    await p.page.locator("#kt-info", has_text="of 3104").wait_for(timeout=10_000)
    names = await p.page.locator("#kt tbody .kname").evaluate_all("ks => ks.map(k => k.title.toLowerCase())")
    fams = await p.page.locator("#kt tbody tr td:last-child").all_inner_texts()
    assert names and all("gemm" in n or f.strip() == "gemm" for n, f in zip(names, fams, strict=True))
    await p.page.click("#kt-next")
    await p.page.locator("#kt-info", has_text="26–50 of 3104").wait_for(timeout=10_000)
    assert p.unexpected() == []


async def test_custom_spec_field_error_and_save(stack: UIStack, browser: Any) -> None:
    p = await new_page(browser, token=TOKEN)
    await p.page.goto(stack.url + "#/gpus")
    await p.page.locator("#gp-table").wait_for(timeout=15_000)
    form = p.page.locator("#gp-form")
    await p.page.wait_for_function("document.querySelector('#gp-form [name=sms]').value !== ''")
    await form.locator("input[name=sms]").fill("-4")
    await form.locator("button[type=submit]").click()
    err = form.locator("input[name=sms] + .field-error")
    await err.wait_for(timeout=10_000)
    assert "from 1 to 1024" in await err.inner_text()  # the documented physical range
    assert await form.locator("input[name=sms]").get_attribute("aria-invalid") == "true"
    await shot(p, "gpus-field-error-1280")
    await form.locator("input[name=sms]").fill("200")
    await form.locator("input[name=id]").fill("UI_TEST_GPU")
    await form.locator("button[type=submit]").click()
    await p.page.locator("#gp-table td", has_text="UI_TEST_GPU").wait_for(timeout=10_000)
    assert p.unexpected(400) == []
