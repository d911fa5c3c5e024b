"""Finding the embedded stack from any folder: a per-user record of every ``cascade up``.

``cascade up`` keeps its data in ``data_dir`` (``.cascade`` of the folder it ran in, by
default), so a later ``cascade status`` or ``cascade import`` run elsewhere would not see it.
Each start therefore also records, per user::

    $XDG_STATE_HOME/cascade/stacks.json   (default ~/.local/state/cascade/stacks.json)
    {"stacks": {"<absolute data dir>": {"http_url": "...", "pid": 123, "started_at": 1.7e9}}}

:func:`locate_data_dir` picks the data dir a command means: the one named (``--data-dir`` /
``CASCADE_DATA_DIR``), else ``.cascade`` here when a stack ran here, else the recorded stack
that runs now (the latest started), else the latest recorded one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import msgspec

#: File name of the per-user record.
STACKS_FILE = "stacks.json"


class StackEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded ``cascade up``."""

    #: Absolute data directory.
    data_dir: str
    #: Web UI / api base URL.
    http_url: str
    #: Pid of the ``cascade up`` process.
    pid: int
    #: Unix time of the start.
    started_at: float


def user_state_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/cascade`` (default ``~/.local/state/cascade``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "cascade"


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    stacks = data.get("stacks") if isinstance(data, dict) else None
    return {k: v for k, v in stacks.items() if isinstance(v, dict)} if isinstance(stacks, dict) else {}


def known_stacks(environ: dict[str, str] | None = None) -> list[StackEntry]:
    """Recorded stacks whose data dir still holds a ``state.json``, latest start first."""
    found: list[StackEntry] = []
    for data_dir, raw in _read(user_state_dir(environ) / STACKS_FILE).items():
        if not (Path(data_dir) / "state.json").exists():
            continue
        with contextlib.suppress(TypeError, ValueError):
            found.append(StackEntry(data_dir=data_dir, http_url=str(raw.get("http_url", "")),
                                    pid=int(raw.get("pid", 0)),
                                    started_at=float(raw.get("started_at", 0.0))))
    return sorted(found, key=lambda e: -e.started_at)


def remember_stack(data_dir: Path, http_url: str, *, pid: int | None = None,
                   environ: dict[str, str] | None = None) -> None:
    """Record a starting ``cascade up`` (best effort: an unwritable state dir is skipped);
    entries whose data dir is gone are dropped."""
    folder = user_state_dir(environ)
    path = folder / STACKS_FILE
    with contextlib.suppress(OSError):
        stacks = {k: v for k, v in _read(path).items() if Path(k).is_dir()}
        stacks[str(data_dir)] = {"http_url": http_url, "pid": pid or os.getpid(),
                                 "started_at": time.time()}
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"stacks": stacks}, indent=2, sort_keys=True))
        tmp.replace(path)


def _alive(pid: int) -> bool:
    from programs.embedded.procs import pid_alive

    return pid_alive(pid)


def locate_data_dir(given: str | None, default: str = ".cascade", *,
                    environ: dict[str, str] | None = None) -> tuple[Path, str]:
    """(data dir, how it was found) for a command run in this folder.

    ``given``: ``--data-dir``; ``CASCADE_DATA_DIR`` in ``environ`` counts as given too.
    """
    env = os.environ if environ is None else environ
    if given:
        return Path(given).expanduser().resolve(), "--data-dir"
    if env.get("CASCADE_DATA_DIR", "").strip():
        return Path(env["CASCADE_DATA_DIR"]).expanduser().resolve(), "CASCADE_DATA_DIR"
    here = Path(default).expanduser().resolve()
    if (here / "state.json").exists():
        return here, "this folder"
    stacks = known_stacks(environ)
    record = str(user_state_dir(environ) / STACKS_FILE)
    for entry in stacks:
        if _alive(entry.pid):
            return Path(entry.data_dir), record
    if stacks:
        return Path(stacks[0].data_dir), record
    return here, "this folder"


def stack_for_url(url: str, environ: dict[str, str] | None = None) -> StackEntry | None:
    """The recorded stack serving ``url`` (same scheme, host and port), if any."""
    want = _origin(url)
    for entry in known_stacks(environ):
        if _origin(entry.http_url) == want:
            return entry
    return None


def _origin(url: str) -> tuple[str, str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if host in ("localhost", "0.0.0.0", "::1"):
        host = "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, host, port
