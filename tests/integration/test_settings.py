"""Settings at a service's start: an invalid CASCADE_* value ends the service with exit status 2,
naming the variable (the settings themselves: tests/unit/test_settings.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO


@pytest.mark.parametrize("service", ["ingest", "api"])
def test_service_main_exits_2_on_invalid_setting(service: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env["CASCADE_JOB_MAX_DELIVER"] = "lots"
    proc = subprocess.run(
        [sys.executable, "-m", f"services.{service}"],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "CASCADE_JOB_MAX_DELIVER" in proc.stderr
    assert "an integer >= 1" in proc.stderr
