"""Keep a child running: restart it with exponential backoff when it dies.

The same supervisor keeps the Cascade services and the servers of the
embedded stack (nats-server, SeaweedFS) up; a server is restarted with the
same command line, so on the same ports and data directories. Every restart
logs one line with the old pid, its exit code, the attempt and the delay.
A child that stays up for ``stable_after_s`` resets its backoff. Stopping
sends SIGTERM, waits a bounded time, then SIGKILLs the child's whole process
group (so processes it spawned go too).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from programs.embedded.procs import child_kwargs, open_log

ServiceStateName = Literal["starting", "running", "backoff", "stopping", "stopped"]


class SupervisedProcess:
    """One supervised child process (a Cascade service, or a server when ``kind="server"``)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        logger: Any,
        on_change: Callable[[], None] = lambda: None,
        base_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        stable_after_s: float = 30.0,
        cwd: Path | None = None,
        kind: str = "service",
        port: int | None = None,
    ) -> None:
        self.name = name
        #: "service" or "server": the word used in log lines and ``state.json``.
        self.kind = kind
        #: Main TCP port, when it has one.
        self.port = port
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.restarts = 0
        self.last_exit: int | None = None
        self.state: ServiceStateName = "stopped"
        self.started_at: float | None = None
        self._log = logger.bind(component=name)
        self._on_change = on_change
        self._base = base_backoff_s
        self._max = max_backoff_s
        self._stable = stable_after_s
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._failures = 0

    @property
    def pid(self) -> int | None:
        """Pid of the running child, if any."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def _set(self, state: ServiceStateName) -> None:
        self.state = state
        self._on_change()

    async def start(self, *, supervise: bool = True) -> None:
        """Spawn the child and (unless ``supervise`` is False) begin watching it.

        With ``supervise=False`` the child runs unwatched until :meth:`supervise`, so a
        start-up failure surfaces to the caller instead of turning into restarts.
        """
        if self._task is not None:
            return
        self._stopping.clear()
        if self._proc is None or self._proc.returncode is not None:
            await self._spawn()
        if supervise:
            self.supervise()

    def supervise(self) -> None:
        """Begin restarting the (already started) child whenever it exits; idempotent."""
        if self._task is None and not self._stopping.is_set():
            self._task = asyncio.create_task(self._watch(), name=f"supervise-{self.name}")

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The current child process (None before the first start)."""
        return self._proc

    async def _spawn(self) -> None:
        with open_log(self.log_path) as log:
            if self.kind == "server":
                log.write(f"\n=== cascade up: starting {self.name} at "
                          f"{dt.datetime.now(dt.UTC).isoformat()} ===\n".encode())
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv, env=self.env, cwd=self.cwd, **child_kwargs(log)
            )
        self.started_at = time.time()
        self._set("running")
        self._log.info(f"{self.kind} started", pid=self._proc.pid, log=str(self.log_path),
                       restarts=self.restarts)

    async def _watch(self) -> None:
        while True:
            proc = self._proc
            assert proc is not None
            began = time.monotonic()
            code = await proc.wait()
            self.last_exit = code
            if self._stopping.is_set():
                return
            if time.monotonic() - began >= self._stable:
                self._failures = 0
            delay = min(self._max, self._base * (2**self._failures))
            self._failures += 1
            self._set("backoff")
            self._log.warning(
                f"{self.kind} exited; restarting",
                pid=proc.pid, exit_code=code, attempt=self._failures,
                restart_in_s=round(delay, 2), restarts=self.restarts + 1,
                log=str(self.log_path),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return
            self.restarts += 1
            try:
                await self._spawn()
            except OSError as exc:
                self._log.error(f"{self.kind} could not be started", error=str(exc))
                self._proc = None
                return

    async def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the child, wait up to ``grace_s``, then SIGKILL its process group."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._set("stopping")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                self._log.warning(f"{self.kind} ignored SIGTERM; killing it", grace_s=grace_s)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            self.last_exit = proc.returncode
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._set("stopped")
        self._log.info(f"{self.kind} stopped", exit_code=self.last_exit)
        return self.last_exit
