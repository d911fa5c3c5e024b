"""The OpenAPI document matches the server: schemathesis (every check, every phase) finds nothing.

The api runs on a real port against the session's real NATS and S3, with a bearer
token and one finished sim (so ``/v1`` and the run routes have something to serve);
schemathesis' CLI runs as a subprocess over every operation, with every check and every phase
(examples, coverage, fuzzing, stateful), a fixed seed and a small example budget per operation
(``CASCADE_SCHEMATHESIS_EXAMPLES``, default 4) so the suite stays short; no answer is a 5xx and
no request makes the api scan a KV bucket (a JetStream consumer each);
``tests/e2e/schemathesis.toml`` lets POST /api/scenarios answer its documented 422 (fields that
cannot go together) to schema-valid bodies; half the generated path ids and /v1 ``model``
fields are the finished sim's real ones (schemathesis dictionaries), and the HAR report must
show real 2xx answers (run detail, results, kernels, the event stream), so the checks judge
the handlers' answers and not only their 404s. ``/v1`` refusals for the model's context
window are the one 400 accepted there (``tests/e2e/schemathesis_hooks.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from cascade.platform.bus import Bus
from tests.support.fixtures_api import FinishedSim

TOKEN = "contract-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")
"""Per-operation settings (POST /api/scenarios' documented 422 answers)."""
EXAMPLES = int(os.environ.get("CASCADE_SCHEMATHESIS_EXAMPLES", "4"))
MAX_TIME = os.environ.get("CASCADE_SCHEMATHESIS_MAX_TIME", "")
"""Seconds to keep fuzzing past the example budget (empty: stop after the budget)."""


@pytest.fixture
def api_tokens() -> list[str]:
    return [TOKEN]


def schemathesis_cli() -> list[str]:
    exe = Path(sys.executable).with_name("schemathesis")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("schemathesis")
    if found is None:
        pytest.fail("schemathesis is not installed: pip install -e '.[dev]'")
    return [found]


def write_config(path: Path, finished: FinishedSim) -> Path:
    """tests/e2e/schemathesis.toml plus dictionaries of the finished sim's real ids: half the
    generated path ids (and /v1 ``model`` fields) name something that exists, so the checks
    reach the handlers' real answers (results, kernels, event streams, estimates) and not
    only their 404s."""
    ids = {"runs": finished.run_id, "sims": finished.sim_id, "traces": finished.trace_id,
           "models": finished.model}
    lines = [CONFIG.read_text(), ""]
    for name, value in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = [{json.dumps(value)}]", ""]
    lines += ["[parameters]"]
    for param, name in (("path.run_id", "runs"), ("path.sim_id", "sims"),
                        ("path.trace_id", "traces"), ("path.model", "models")):
        lines.append(f'"{param}" = {{ dictionary = "{name}", probability = 0.5 }}')
    for op in ("v1.completions", "v1.chat_completions"):
        # a 400 is accepted only as context_length_exceeded (tests/e2e/schemathesis_hooks.py)
        lines += ["", "[[operations]]", f'include-operation-id = "{op}"',
                  'parameters = { "body.model" = { dictionary = "models", probability = 0.5 } }',
                  ('checks.positive_data_acceptance.expected-statuses = '
                   '["2xx", "3xx", "400", "401", "403", "404", "409", "429"]')]
    path.write_text("\n".join(lines) + "\n")
    return path


async def run_schemathesis(url: str, har: Path, config: Path, *extra: str) -> tuple[int, str]:
    """Schemathesis' exit status and output; its HAR report (every request and answer) in
    ``har``. (No NDJSON event report: nothing reads it, and its ~20 MB cost seconds of CPU.)"""
    args = [*schemathesis_cli(), "--config-file", str(config), "run", f"{url}/openapi.json",
            "--checks", "all",
            "--phases", "examples,coverage,fuzzing,stateful", "--max-examples", str(EXAMPLES),
            "--seed", "20", "--no-shrink", "--generation-database", "none",
            "--header", f"Authorization: Bearer {TOKEN}", "--request-timeout", "20",
            "--workers", "1", *(["--max-time", MAX_TIME] if MAX_TIME else []), "--no-color", "--report", "har",
            "--report-har-path", str(har), "--suppress-health-check", "all",
            *extra,
            *os.environ.get("CASCADE_SCHEMATHESIS_ARGS", "").split()]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.e2e.schemathesis_hooks",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env=env)
    out, _ = await asyncio.wait_for(proc.communicate(), 420)
    return proc.returncode or 0, out.decode(errors="replace")


async def test_schemathesis_finds_nothing(client: TestClient, finished: FinishedSim, bus: Bus,
                                          tmp_path: Path) -> None:
    url = str(client.make_url("")).rstrip("/")
    config = write_config(tmp_path / "schemathesis.toml", finished)
    scans_before = bus.stats.jetstream_consumers_created.get("kv-scan", 0)
    rc, out = await run_schemathesis(url, tmp_path / "events.har", config)
    (tmp_path / "schemathesis.txt").write_text(out)
    dump = os.environ.get("CASCADE_SCHEMATHESIS_OUT")
    if dump:
        Path(dump).write_text(out)
        shutil.copy(tmp_path / "events.har", Path(dump).with_suffix(".har"))
    tail = out[-12000:]
    assert rc == 0, tail
    assert "No issues found" in out or " passed" in out, tail
    # the checks saw real answers, not only 404s: the finished run's detail, results and
    # event stream (validated event by event against the documented SSE schema)
    reached = answered(tmp_path / "events.har", finished)
    for route in ("GET /api/runs/{run}", "GET /api/runs/{run}/results",
                  "GET /api/runs/{run}/events text/event-stream", "GET /api/traces/{trace}",
                  "GET /api/runs/{run}/results/{sim}/kernels"):
        assert reached.get(route, 0) > 0, (route, reached)
    assert server_errors(tmp_path / "events.har") == []
    # thousands of requests, and not one KV scan: every read answered from the api's indexes,
    # the only consumers open are its watches (traces, runs, sims, custom specs)
    assert bus.stats.jetstream_consumers_created.get("kv-scan", 0) == scans_before
    assert bus.stats.jetstream_consumers_open.get("kv-scan", 0) == 0
    assert bus.stats.jetstream_consumers_open.get("events", 0) == 0
    assert bus.stats.jetstream_consumers_open.get("kv-watch", 0) <= 4


def server_errors(har: Path) -> list[str]:
    """Every 5xx answer in schemathesis' HAR report (method, URL, status)."""
    return [f"{e['request']['method']} {e['request']['url']} {e['response']['status']}"
            for e in json.loads(har.read_text())["log"]["entries"]
            if e["response"]["status"] >= 500]


def answered(har: Path, finished: FinishedSim) -> dict[str, int]:
    """2xx answers in schemathesis' HAR report per route (the finished sim's ids templated;
    SSE answers keyed with their media type)."""
    out: dict[str, int] = {}
    for entry in json.loads(har.read_text())["log"]["entries"]:
        status = entry["response"]["status"]
        if not 200 <= status < 300:
            continue
        path = "/" + entry["request"]["url"].split("/", 3)[-1].split("?", 1)[0]
        for value, name in ((finished.sim_id, "{sim}"), (finished.run_id, "{run}"),
                            (finished.trace_id, "{trace}")):
            path = path.replace(value, name)
        key = f"{entry['request']['method']} {path}"
        if entry["response"]["content"].get("mimeType", "").startswith("text/event-stream"):
            key += " text/event-stream"
        out[key] = out.get(key, 0) + 1
    return out
