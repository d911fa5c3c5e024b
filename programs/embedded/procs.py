"""Child processes of the embedded stack and the test fixtures.

Children run in their own process group (so a Ctrl-C in the terminal reaches
only ``cascade up``, which then stops them in order) and, on Linux, get
SIGTERM if their parent dies, so a killed ``cascade up`` leaves no orphans.
Output goes to a log file, appended across restarts.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

_PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    prctl = ctypes.CDLL(name, use_errno=True).prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return preexec


def child_kwargs(log: IO[bytes] | int | None) -> dict[str, Any]:
    """Keyword arguments for Popen / create_subprocess_exec used for every child."""
    kwargs: dict[str, Any] = {
        "stdin": subprocess.DEVNULL,
        "stdout": log if log is not None else subprocess.DEVNULL,
        "stderr": subprocess.STDOUT,
        "start_new_session": True,
        "close_fds": True,
    }
    preexec = _parent_death_signal()
    if preexec is not None:
        kwargs["preexec_fn"] = preexec
    return kwargs


def open_log(path: Path) -> IO[bytes]:
    """Open ``path`` for appending child output (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("ab", buffering=0)


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a child (own process group, output appended to ``log_path``)."""
    with open_log(log_path) as log:
        return subprocess.Popen(
            [os.fspath(a) for a in argv],
            env=dict(env) if env is not None else None,
            cwd=cwd,
            **child_kwargs(log),
        )


def pid_alive(pid: int) -> bool:
    """True when a process with ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            # the leader of a multi-threaded process turns zombie before its other threads
            # have exited (and released its sockets): alive while any thread still runs
            return any(_task_running(t) for t in Path(f"/proc/{pid}/task").iterdir())
    return True


def _task_running(task: Path) -> bool:
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def group_members(pgid: int, marker: bytes) -> list[int]:
    """Live processes in process group ``pgid`` whose command line contains ``marker`` (a
    component started in its own session may leave children behind when it dies)."""
    found: list[int] = []
    if pgid <= 0:
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z" and marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def stop_popen(proc: subprocess.Popen[bytes], grace: float = 10.0) -> int:
    """SIGTERM ``proc``, wait up to ``grace`` seconds, then SIGKILL; returns its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    return int(proc.returncode)


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file (empty when missing)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Call ``check`` until it returns True or ``timeout`` seconds pass (for sync callers)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
