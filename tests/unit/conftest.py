"""Unit tier: domain and pure logic (parsers, models, scheduler, in-process apps); no servers, no
subprocesses, no refits (a test that refits a calibration or records a real capture is marked
``slow``: ``make test`` runs it, ``make test-unit`` leaves it out).

Every test in this folder is marked ``unit``; a test here that starts a process fails, naming the
tier to move it to."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.support.tiers import mark_folder

#: The session fixtures that start a server process (``tests/support/fixtures_*``).
SERVER_FIXTURES = frozenset({"nats_server", "s3_server"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mark_folder(items, here, pytest.mark.unit)
    served = [item.nodeid for item in items if here in item.path.parents
              and SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))]
    if served:
        raise pytest.UsageError("unit tests use no server; move these to tests/integration: "
                                + ", ".join(served[:10]) + (" ..." if len(served) > 10 else ""))


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise AssertionError("a unit test starts no process (subprocess, asyncio subprocess, fork): "
                         "move the test to tests/integration")


@pytest.fixture(scope="module", autouse=True)
def _no_processes() -> Iterator[None]:
    """Every way Python starts a process goes through one of these: ``subprocess.Popen`` (also
    under ``asyncio``'s subprocesses) or ``os.fork`` / ``os.posix_spawn`` (``multiprocessing``).
    Module-scoped and autouse, so it is in place before a module's own fixtures run too (a
    session fixture that starts a server is refused at collection instead)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse)
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
            if hasattr(os, name):
                patch.setattr(os, name, _refuse)
        yield
