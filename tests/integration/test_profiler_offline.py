"""The ``hf`` recipe without a network: a hub id that is not on the machine is refused in one
line, fast, before anything starts. (The OPT-125m shape built in and recorded on the CPU
offline: ``tests/e2e/test_first_ten_minutes.py``, which runs the README's recipe line.)

The Hugging Face cache is an empty folder, ``HF_HUB_OFFLINE=1``, and ``HF_ENDPOINT`` points
at a closed local port, so any attempt to reach the hub would fail rather than download."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import REPO

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
