"""The supervisor of `cascade up` on a plain child process: restarts, backoff, its log lines."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from programs.embedded.supervisor import SupervisedProcess


class RecordingLogger:
    """A structlog-like logger keeping every (level, event, fields)."""

    def __init__(self, records: list[tuple[str, str, dict[str, Any]]] | None = None,
                 **bound: Any) -> None:
        self.records = records if records is not None else []
        self.bound = bound

    def bind(self, **fields: Any) -> RecordingLogger:
        return RecordingLogger(self.records, **{**self.bound, **fields})

    def _add(self, level: str, event: str, **fields: Any) -> None:
        self.records.append((level, event, {**self.bound, **fields}))

    def info(self, event: str, **fields: Any) -> None:
        self._add("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._add("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._add("error", event, **fields)


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


async def test_killed_server_is_restarted_with_backoff_and_logged(tmp_path: Path) -> None:
    logger = RecordingLogger()
    proc = SupervisedProcess(
        "fake", [sys.executable, "-c", "import time; time.sleep(60)"], env=dict(os.environ),
        log_path=tmp_path / "fake.log", logger=logger, kind="server", port=1234,
        base_backoff_s=0.05, max_backoff_s=0.1, stable_after_s=30.0,
    )
    await proc.start(supervise=False)
    first = proc.pid
    assert first is not None
    proc.supervise()
    try:
        pids = [first]
        for attempt in (1, 2, 3):
            os.kill(pids[-1], signal.SIGKILL)
            await _until(lambda: proc.pid not in (None, pids[-1]) and proc.state == "running", 10,
                         f"restart {attempt}")
            pids.append(proc.pid)  # type: ignore[arg-type]
        assert proc.restarts == 3
        exits = [f for level, event, f in logger.records if event == "server exited; restarting"]
        assert [e["attempt"] for e in exits] == [1, 2, 3]
        assert [e["pid"] for e in exits] == pids[:3]
        assert all(e["exit_code"] == -signal.SIGKILL and e["component"] == "fake" for e in exits)
        assert [e["restart_in_s"] for e in exits] == [0.05, 0.1, 0.1]   # doubling, capped
        assert (tmp_path / "fake.log").read_text().count("=== cascade up: starting fake") == 4
    finally:
        await proc.stop(grace_s=2.0)
    assert proc.state == "stopped" and proc.pid is None


async def test_unsupervised_child_is_not_restarted(tmp_path: Path) -> None:
    proc = SupervisedProcess(
        "once", [sys.executable, "-c", "pass"], env=dict(os.environ),
        log_path=tmp_path / "once.log", logger=RecordingLogger(), base_backoff_s=0.01,
    )
    await proc.start(supervise=False)
    assert proc.process is not None
    assert await proc.process.wait() == 0
    await asyncio.sleep(0.1)
    assert proc.restarts == 0
    await proc.stop(grace_s=1.0)
