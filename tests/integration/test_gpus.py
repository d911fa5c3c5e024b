"""`cascade gpus --json` lists every spec a build must ship (the specs and registry lookups
themselves: tests/unit/test_gpus.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.gpu_ids import REQUIRED


def test_cli_gpus_json_lists_every_spec() -> None:
    out = subprocess.run([sys.executable, "-m", "programs.cli", "gpus", "--json"], capture_output=True, text=True,
                         check=True)
    ids = {s["id"] for s in json.loads(out.stdout)}
    assert set(REQUIRED) <= ids
