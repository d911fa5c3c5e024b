"""Unit tier: domain and pure logic (parsers, models, scheduler, in-process apps); no servers, no
subprocesses, no refits (a test that refits a calibration or records a real capture is marked
``slow``: ``make test`` runs it, ``make test-unit`` leaves it out).

Every test in this folder is marked ``unit``; a test here that starts a process fails, naming the
tier to move it to."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, pytest.mark.unit)


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise AssertionError("a unit test starts no process (subprocess, asyncio subprocess, fork): "
                         "move the test to tests/integration")


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way Python starts a process goes through one of these: ``subprocess.Popen`` (also
    under ``asyncio``'s subprocesses) or ``os.fork`` / ``os.posix_spawn`` (``multiprocessing``)."""
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse)
