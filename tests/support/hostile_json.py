"""Hostile Chrome-trace JSON for the reader's limits: a gzip string bomb written streaming, and
a well-formed kernel event to break (``tests/unit/test_json_limits.py`` reads them in process,
``tests/integration/test_json_limits.py`` through the CLI)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

MiB = 1 << 20

#: A well-typed kernel event of a PyTorch profiler trace.
KERNEL: dict[str, Any] = {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 10, "dur": 5,
                          "args": {"grid": [1, 2, 3], "block": [32, 1, 1], "correlation": 7}}


def gzip_bomb(path: Path, prefix: bytes, string_mib: int, suffix: bytes) -> Path:
    """A gzip holding ``prefix`` + one ``string_mib`` MiB string + ``suffix``, written
    streaming (the string never exists in this process's memory either)."""
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(prefix + b'"')
        block = b"A" * MiB
        for _ in range(string_mib):
            fh.write(block)
        fh.write(b'"' + suffix)
    return path
