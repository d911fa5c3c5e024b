"""Uploads while the workload runs: parallel, retried, resumable, through the app's
presigned flow (:class:`programs.client.CascadeClient`).

Every file is submitted once; ``parallel`` workers request its presigned target
(a single PUT, or multipart parts above the app's threshold), send it from disk,
and report it. A network error, an S3 outage or a 5xx answer is retried with
backoff, for up to ``retry_for`` seconds per file, with a fresh presigned target
each attempt. What arrived is kept in the same state file ``cascade import`` uses
(``.cascade-import.json`` in the trace folder), so a later ``cascade profile
--resume`` or ``cascade import FOLDER`` continues the same trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from cascade.errors import CascadeError
from programs.client import ApiError, CascadeClient, UploadError

log = structlog.get_logger("programs.profiler")

RETRY_STATUSES = frozenset({408, 409, 425, 429})
"""4xx answers worth another attempt (409: the object was replaced or did not finish)."""


def retryable(exc: BaseException) -> bool:
    """Whether an upload attempt that raised ``exc`` should be tried again."""
    if isinstance(exc, ApiError):
        return exc.http_status >= 500 or exc.http_status in RETRY_STATUSES
    return isinstance(exc, UploadError | aiohttp.ClientError | asyncio.TimeoutError | OSError)


@dataclass
class UploadStats:
    """What the uploader did."""

    files: int = 0
    kernels: int = 0
    bytes: int = 0
    retries: int = 0
    first_kernel_at: float | None = None
    """``time.time()`` the first kernel file was reported to the app."""
    arrived: dict[str, float] = field(default_factory=dict)
    """file name -> ``time.time()`` the app accepted it."""
    lag_s: dict[str, float] = field(default_factory=dict)
    """kernel file name -> seconds from being found complete to being accepted."""
    failed: dict[str, str] = field(default_factory=dict)
    """file name -> why it could not be uploaded."""


class StreamUploader:
    """Uploads submitted files to one trace with ``parallel`` workers."""

    def __init__(self, api: CascadeClient, trace_id: str, *, parallel: int = 4,
                 retry_for: float = 300.0, entry: dict[str, Any] | None = None,
                 save: Any = None, progress: Any = None) -> None:
        self.api = api
        self.trace_id = trace_id
        self.parallel = max(1, parallel)
        self.retry_for = retry_for
        self.entry = entry if entry is not None else {}
        self.entry.setdefault("part_sizes", {})
        self.entry.setdefault("uploaded", {})
        self._save = save
        self._progress = progress
        self._task_id: Any = None
        self.stats = UploadStats()
        self.submitted: set[str] = set()
        self._queue: asyncio.Queue[tuple[Path, float | None] | None] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start the workers (in the running loop)."""
        if self._progress is not None:
            self._task_id = self._progress.add_task("uploading", total=0)
        self._workers = [asyncio.create_task(self._worker(), name=f"upload-{i}")
                         for i in range(self.parallel)]

    def submit(self, path: Path, seen_complete: float | None = None) -> bool:
        """Queue ``path`` (once per file name); False when it was submitted before."""
        if path.name in self.submitted:
            return False
        self.submitted.add(path.name)
        if self._progress is not None:
            self._progress.update(self._task_id, total=(self._progress.tasks[self._task_id].total or 0)
                                  + path.stat().st_size)
        self._queue.put_nowait((path, seen_complete))
        return True

    async def drain(self) -> None:
        """Wait until everything submitted so far was uploaded or given up on."""
        await self._queue.join()

    async def close(self) -> None:
        """Finish the queue and stop the workers."""
        await self.drain()
        for _ in self._workers:
            self._queue.put_nowait(None)
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def cancel(self) -> None:
        """Stop at once (uploads in flight are abandoned; a resume redoes them)."""
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def _worker(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if item is None:
                    return
                await self._upload(*item)
            except Exception as exc:  # a worker must outlive one file's bug
                self.stats.failed[item[0].name if item else "?"] = f"{type(exc).__name__}: {exc}"
                log.exception("upload crashed", file=item[0].name if item else None)
            finally:
                self._queue.task_done()

    def _advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task_id, n)

    async def _upload(self, path: Path, seen_complete: float | None) -> None:
        name = path.name
        size = path.stat().st_size
        deadline = time.monotonic() + self.retry_for
        attempt = 0
        while True:
            sent = 0

            def count(n: int) -> None:
                nonlocal sent
                sent += n
                self._advance(n)

            try:
                answer = await self.api.request_uploads(self.trace_id, [(name, size)])
                (target,) = answer["uploads"]
                if target.get("multipart"):
                    self.entry["part_sizes"][name] = int(target["multipart"]["part_size"])
                reported = await self.api.upload_target(self.trace_id, target, path, progress=count)
                break
            except (CascadeError, aiohttp.ClientError, TimeoutError, OSError) as exc:
                self._advance(-sent)
                attempt += 1
                if not retryable(exc) or time.monotonic() >= deadline:
                    why = f"{type(exc).__name__}: {exc}"
                    self.stats.failed[name] = why
                    log.error("upload failed", file=name, attempts=attempt, error=why)
                    return
                self.stats.retries += 1
                delay = min(0.25 * 2 ** min(attempt, 6), 5.0)
                log.warning("upload retried", file=name, attempt=attempt, error=str(exc)[:200],
                            delay_s=delay)
                await asyncio.sleep(delay)
        now = time.time()
        self.stats.files += 1
        self.stats.bytes += size
        self.stats.arrived[name] = now
        if name.startswith("kernel-"):
            self.stats.kernels += 1
            if self.stats.first_kernel_at is None:
                self.stats.first_kernel_at = now
            if seen_complete is not None:
                self.stats.lag_s[name] = now - seen_complete
        self.entry["uploaded"][name] = str(reported.get("etag", ""))
        if self._save is not None:
            with contextlib.suppress(OSError):
                self._save()
