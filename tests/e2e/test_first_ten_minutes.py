"""The README's "first ten minutes", followed as written against a real `cascade up`: start,
sign in with the printed link, the sample answering at once, the request simulator, a trace
recorded offline on this CPU, imported and run on three GPUs.

The shell block of that section is read from README.md and every line run with bash as it is
(the README's URL replaced by this stack's), so the README cannot drift from what works."""

from __future__ import annotations

import http.client
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from programs.embedded.layout import read_credentials
from programs.embedded.procs import pid_alive
from programs.embedded.testbed import UpStack
from tests.support.paths import REPO
from tests.support.wait import wait_until_blocking

README = (REPO / "README.md").read_text()
README_URL = "http://127.0.0.1:8080"
HAVE_HF = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
SYNTHETIC = "cascade/sample-opt125m-h100-e2e-synthetic"


def section_commands() -> list[str]:
    """The command lines of the section's second ``sh`` block (the first is ``make run``)."""
    body = README.split("## The first ten minutes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", body, flags=re.S)
    assert len(blocks) == 2, "the section has its `make run` block and one block of commands"
    assert blocks[0].split()[:2] == ["make", "run"]
    return [line for line in blocks[1].splitlines() if line.strip()]


def check_opt125m_trace(out: Path, *, new_tokens: int) -> None:
    """The recipe's trace is OPT-125m's shape, recorded on the CPU (the hub unreachable)."""
    chrome = json.loads((out / "timeline.pt.trace.json").read_text())
    events = chrome["traceEvents"]
    steps = [e["name"] for e in events if str(e.get("name", "")).startswith("step:")]
    assert steps[0] == "step:prefill:tokens=6:context=6" and len(steps) == new_tokens
    linear = [e["args"]["Input Dims"] for e in events
              if e.get("name") == "aten::linear" and "Input Dims" in e.get("args", {})]
    weights = Counter(tuple(d[1]) for d in linear)
    # 12 layers x (q, k, v, out: 768x768; fc1 3072x768; fc2 768x3072) + the lm_head, per step
    assert weights == {(768, 768): new_tokens * 12 * 4, (3072, 768): new_tokens * 12,
                       (768, 3072): new_tokens * 12, (50272, 768): new_tokens}
    tokens = [math.prod(d[0][:-1]) for d in linear if tuple(d[1]) == (3072, 768)]
    assert tokens == [6] * 12 + [1] * 12 * (new_tokens - 1)  # the prompt's 6 tokens, then 1
    baseline = json.loads((out / "baseline.json").read_text())
    assert baseline["device"] == "cpu" and "facebook/opt-125m (random init)" in baseline["workload"]


def _request(url: str, method: str = "GET", body: object = None,
             token: str | None = None) -> tuple[int, object]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""),
                     body=json.dumps(body) if body is not None else None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException):
        return 0, None
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data.decode(errors="replace")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpStack]:
    """`cascade up` as `make run` starts it (the testbed's, on free ports), with a human
    console; stopped after the test."""
    with UpStack(tmp_path) as stack:
        stack.env.pop("CASCADE_LOG_FORMAT")  # the console a person gets
        stack.env["XDG_STATE_HOME"] = str(tmp_path / "state")
        yield stack


def _alive(up: UpStack) -> None:
    assert up.proc is not None
    if up.proc.poll() is not None:
        raise AssertionError(f"cascade up exited with {up.proc.returncode}:\n{up.output(3000)}")


def test_readme_first_ten_minutes(up: UpStack, tmp_path: Path) -> None:
    commands = section_commands()
    # 1. start: time until the sample answers /v1/completions (the target is under 15 s)
    t0 = time.monotonic()
    up.start(timeout=90)  # until /readyz answers 200 and the banner is printed

    def answering() -> bool:
        _alive(up)
        creds = read_credentials(up.layout)
        if creds is None:
            return False
        status, _ = _request(f"{up.base}/v1/completions", "POST", {
            "model": f"{SYNTHETIC}/SM90_H100", "prompt": "Hello, my name is", "max_tokens": 32},
            token=creds.api_token)
        return status == 200

    wait_until_blocking(answering, max(1.0, 90 - (time.monotonic() - t0)),
                        what="/v1/completions to answer on the sample", interval=0.1)
    seconds = time.monotonic() - t0
    print(f"first start: /v1/completions answered {seconds:.1f} s after `cascade up` started")
    wait_until_blocking(lambda: "Cascade is up in" in up.output(0), 10, what="the banner", interval=0.1)
    creds = read_credentials(up.layout)
    assert creds is not None
    out = up.output(0)
    # a console for people: short lines, no JSON; the log files keep the JSON
    assert re.search(r"^\d\d:\d\d:\d\d info\s+api\s+sample loaded", out, flags=re.M), out[-2000:]
    assert not [line for line in out.splitlines() if line.lstrip().startswith("{")]
    api_log = up.layout.log("api").read_text().splitlines()
    assert any(json.loads(line).get("event") == "sample loaded" for line in api_log if line.startswith("{"))

    # 2. sign in: the printed link's code is exchanged once for the token
    link = re.search(r"Sign in\s*:\s*(\S+)", out)
    assert link, out[-2000:]
    parts = urlsplit(link.group(1))
    assert f"{parts.scheme}://{parts.netloc}" == up.base
    code = parse_qs(parts.query)["signin"][0]
    assert _request(f"{up.base}/api/signin", "POST", {"code": code}) == (200, {"token": creds.api_token})
    status, body = _request(f"{up.base}/api/signin", "POST", {"code": code})
    assert status == 401 and "already used" in str(body)

    # 3. the sample: recorded run and the synthetic run simulated at first start
    status, runs = _request(f"{up.base}/api/runs")
    by_id = {r["id"]: r for r in runs["runs"]}  # type: ignore[index]
    assert by_id["sample-opt125m-h100-e2e"]["state"] == "completed"
    synthetic = by_id["sample-opt125m-h100-e2e-synthetic-run"]
    assert synthetic["state"] == "completed" and synthetic["provenance"]["badge"] == "synthetic"

    # 4-6. the README's commands, as written
    env = dict(up.env, CASCADE_API_TOKEN=creds.api_token,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               HF_HOME=str(tmp_path / "empty-hf-home"), HF_HUB_OFFLINE="1",
               HF_ENDPOINT="http://127.0.0.1:9")
    outputs: list[str] = []
    for line in commands:
        if line.startswith("export CASCADE_API_TOKEN="):
            continue  # set above: the token `cascade up` printed
        if line.startswith("cascade profile") and not HAVE_HF:
            pytest.fail("torch and transformers are missing: `make setup` installs them")
        cmd = line.replace(README_URL, up.base)
        assert shlex.split(cmd)[0] in ("curl", "cascade"), cmd
        started = time.monotonic()
        proc = subprocess.run(["bash", "-c", f"set -euo pipefail; {cmd}"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        print(f"{time.monotonic() - started:6.1f} s  {line[:90]}")
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr, proc.stderr
        outputs.append(proc.stdout)
    models, completion, scenario, described, _profile, imported = outputs
    check_opt125m_trace(tmp_path / "opt125m-trace", new_tokens=8)
    listed_models = json.loads(models)["data"]
    ids = [m["id"] for m in listed_models if m["cascade_source"] == "traced"]
    assert ids == sorted(f"{SYNTHETIC}/{c}" for c in ("SM80_A100", "SM90_H100", "SM90_H200"))
    # beside them, the bundled described models (a config.json on a GPU, no trace)
    assert any(m["cascade_source"] == "described" for m in listed_models)
    metrics = json.loads(completion)["metrics"]
    assert 0 < metrics["ttft_ms"] < metrics["e2e_ms"]
    result = json.loads(scenario)["result"]
    assert result["completed"] == 200
    # a model described by its config.json alone: 16 closed-loop clients, ten requests each
    answer = json.loads(described)
    assert answer["result"]["completed"] == 160, answer
    assert answer["basis"]["kind"] == "described" and answer["basis"]["gpu"] == "SM90_H100", answer["basis"]
    assert 0 < answer["result"]["ttft_ms"]["median"] < answer["result"]["e2el_ms"]["median"]
    ran = re.search(r"run (\S+) completed: predicted end to end (.*)", imported)
    assert ran, imported
    figures = dict(re.findall(r"(SM\w+) ([\d.]+) ms", ran.group(2)))
    assert set(figures) == {"SM90_H100", "SM90_H200", "SM80_A100"} and all(float(v) > 0 for v in figures.values())
    status, detail = _request(f"{up.base}/api/runs/{ran.group(1)}")
    assert status == 200 and detail["run"]["state"] == "completed"  # type: ignore[index]
    # the imported trace's sims are request models now, beside the sample's
    status, listed = _request(f"{up.base}/v1/models")
    assert len([m for m in listed["data"] if m["cascade_source"] == "traced"]) == 6  # type: ignore[index]
    assert up.proc is not None and pid_alive(up.proc.pid)
