"""The OpenAPI document matches the server: schemathesis (every check, every phase) finds nothing.

The api runs on a real port against the session's real NATS and S3, with a bearer
token and one finished sim (so ``/v1`` and the run routes have something to serve);
schemathesis' CLI runs as a subprocess (every operation but POST /api/scenarios, whose
open-ended sub-objects are not described exactly yet) with a fixed seed and a small example budget
per operation (``CASCADE_SCHEMATHESIS_EXAMPLES``, default 4) so the suite stays short.
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

from tests.test_v1 import FinishedSim

pytestmark = pytest.mark.integration

TOKEN = "contract-token"
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


async def run_schemathesis(url: str, report: Path, *extra: str) -> tuple[int, str, list[dict]]:
    args = [*schemathesis_cli(), "run", f"{url}/openapi.json", "--checks", "all",
            "--phases", "examples,coverage,fuzzing,stateful", "--max-examples", str(EXAMPLES),
            "--seed", "20", "--no-shrink", "--generation-database", "none",
            "--header", f"Authorization: Bearer {TOKEN}", "--request-timeout", "20",
            "--workers", "1", *(["--max-time", MAX_TIME] if MAX_TIME else []), "--no-color", "--report", "ndjson",
            "--report-ndjson-path", str(report), "--suppress-health-check", "all",
            *extra,
            *os.environ.get("CASCADE_SCHEMATHESIS_ARGS", "").split()]
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 420)
    events = []
    if report.exists():
        events = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    return proc.returncode or 0, out.decode(errors="replace"), events


async def test_schemathesis_finds_nothing(client: TestClient, finished: FinishedSim,
                                          tmp_path: Path) -> None:
    url = str(client.make_url("")).rstrip("/")
    rc, out, _events = await run_schemathesis(url, tmp_path / "events.ndjson")
    (tmp_path / "schemathesis.txt").write_text(out)
    dump = os.environ.get("CASCADE_SCHEMATHESIS_OUT")
    if dump:
        Path(dump).write_text(out)
    tail = out[-12000:]
    assert rc == 0, tail
    assert "No issues found" in out or " passed" in out, tail
