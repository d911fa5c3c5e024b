"""The ``hf`` recipe without a network: the OPT-125m shape built in and recorded on the CPU,
and a hub id that is not on the machine refused in one line, fast, before anything starts.

The Hugging Face cache is an empty folder, ``HF_HUB_OFFLINE=1``, and ``HF_ENDPOINT`` points
at a closed local port, so any attempt to reach the hub would fail rather than download."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.paths import REPO

HAVE_HF = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
CASCADE = [sys.executable, "-m", "programs.cli"]


def _offline_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "CASCADE_"))}
    env.update(HF_HOME=str(tmp_path / "empty-hf-home"), HF_HUB_OFFLINE="1",
               HF_ENDPOINT="http://127.0.0.1:9", CASCADE_PROFILE_AUTOSTEP="0")
    return env


def test_unresolvable_hub_id_is_one_line_in_under_a_second(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run([*CASCADE, "profile", "--out", str(tmp_path / "t"), "hf", "--model",
                           "facebook/opt-999m", "--random-init"], cwd=REPO, env=_offline_env(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)
    took = time.perf_counter() - t0
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "facebook/opt-999m is not on this machine" in lines[0]
    assert "--model facebook/opt-125m --random-init" in lines[0]
    assert not (tmp_path / "t").exists()  # refused before anything started
    # the interpreter's own start counts too; the refusal itself imports neither torch nor the hub
    assert took < 5.0, took
    check = subprocess.run(
        [sys.executable, "-c", "import sys, time; t=time.perf_counter();"
         "from programs.profiler.hfsource import resolve_model\n"
         "try: resolve_model('facebook/opt-999m', random_init=True)\n"
         "except ValueError: pass\n"
         "print(time.perf_counter()-t, 'torch' in sys.modules, 'huggingface_hub' in sys.modules)"],
        cwd=REPO, env=_offline_env(tmp_path), capture_output=True, text=True, timeout=60, check=True)
    seconds, torch_loaded, hub_loaded = check.stdout.split()
    assert float(seconds) < 1.0 and torch_loaded == "False" and hub_loaded == "False"


@pytest.mark.skipif(not HAVE_HF, reason="torch and transformers are not installed")
def test_opt125m_shape_recorded_on_the_cpu_offline(tmp_path: Path) -> None:
    out = tmp_path / "opt125m"
    proc = subprocess.run(
        [*CASCADE, "profile", "--out", str(out), "--quiet", "--baseline-repeats", "1",
         "--baseline-warmup", "0", "hf", "--model", "facebook/opt-125m", "--random-init",
         "--max-new-tokens", "2", "--repeats", "1", "--warmup", "0"],
        cwd=REPO, env=_offline_env(tmp_path), capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    chrome = json.loads((out / "timeline.pt.trace.json").read_text())
    events = chrome["traceEvents"]
    steps = [e["name"] for e in events if str(e.get("name", "")).startswith("step:")]
    assert steps[0] == "step:prefill:tokens=6:context=6" and len(steps) == 2
    linear = [e["args"]["Input Dims"] for e in events
              if e.get("name") == "aten::linear" and "Input Dims" in e.get("args", {})]
    weights = Counter(tuple(d[1]) for d in linear)
    # OPT-125m: 12 layers x (q, k, v, out: 768x768; fc1 3072x768; fc2 768x3072) + lm_head, per step
    assert weights == {(768, 768): 2 * 12 * 4, (3072, 768): 2 * 12, (768, 3072): 2 * 12,
                       (50272, 768): 2}
    tokens = [math.prod(d[0][:-1]) for d in linear if tuple(d[1]) == (3072, 768)]
    assert tokens == [6] * 12 + [1] * 12  # fc1 of every layer: the prompt's 6 tokens, then 1
    baseline = json.loads((out / "baseline.json").read_text())
    assert baseline["device"] == "cpu" and "facebook/opt-125m (random init)" in baseline["workload"]
    rows = (out / "timeline.jsonl").read_text().splitlines()
    assert len(rows) > 1000 and all(json.loads(r)["duration_ns"] >= 0 for r in rows[:50])
