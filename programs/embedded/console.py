"""What ``cascade up`` shows of its services: their log files followed, line by line.

Each service writes JSON lines to ``logs/<service>.log`` (kept whole there). The console
gets each new line once, as :func:`cascade.platform.log.human_line` renders it (``human``)
or unchanged (``json``); lines below the level are left to the file. A line that is not
JSON (a crash's traceback, a library writing to stderr) is shown as it is, prefixed with
the service. Following reads the files from where they ended when it started, so an
earlier run's lines are not replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TextIO

from cascade.platform.log import human_line

ConsoleMode = Literal["human", "json", "off"]

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50,
           "exception": 40}
#: Longest non-JSON line shown (the file has it whole).
MAX_RAW_LINE = 300


def render(line: str, service: str, *, mode: ConsoleMode, min_level: str = "info") -> str | None:
    """The console form of one log-file line of ``service``, or None to leave it out."""
    text = line.rstrip("\r\n")
    if not text.strip() or mode == "off":
        return None
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        shown = text if len(text) <= MAX_RAW_LINE else text[:MAX_RAW_LINE - 1] + "…"
        return f"{service:>12} | {shown}"
    if _LEVELS.get(str(event.get("level", "info")).lower(), 20) < _LEVELS.get(min_level, 20):
        return None
    if mode == "json":
        return text
    return human_line(event, service=service)


class LogFollower:
    """Follow several services' log files and print their new lines to ``out``."""

    def __init__(self, files: Sequence[tuple[str, Path]], out: TextIO, *, mode: ConsoleMode,
                 min_level: str = "info", interval_s: float = 0.2) -> None:
        self.files = list(files)
        self.out = out
        self.mode = mode
        self.min_level = min_level
        self.interval_s = interval_s
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, str] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Note where each file ends now and start following (no-op in mode ``off``)."""
        if self.mode == "off" or self._task is not None:
            return
        for _, path in self.files:
            try:
                self._offsets[path] = path.stat().st_size
            except OSError:
                self._offsets[path] = 0
        self._task = asyncio.create_task(self._follow(), name="cascade-up-console")

    async def stop(self) -> None:
        """Print what is left, then stop (idempotent)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        self.poll()

    async def _follow(self) -> None:
        while True:
            self.poll()
            await asyncio.sleep(self.interval_s)

    def poll(self) -> int:
        """Print every complete new line of every file once; returns how many were printed."""
        printed = 0
        for service, path in self.files:
            for line in self._new_lines(path):
                shown = render(line, service, mode=self.mode, min_level=self.min_level)
                if shown is not None:
                    print(shown, file=self.out, flush=True)
                    printed += 1
        return printed

    def _new_lines(self, path: Path) -> list[str]:
        offset = self._offsets.get(path, 0)
        try:
            size = path.stat().st_size
            if size < offset:  # truncated or replaced: start again from its beginning
                offset = 0
                self._partial.pop(path, None)
            if size == offset:
                return []
            with path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read(size - offset)
        except OSError:
            return []
        self._offsets[path] = offset + len(data)
        text = self._partial.pop(path, "") + data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines[-1]:
            self._partial[path] = lines[-1]
        return lines[:-1]
