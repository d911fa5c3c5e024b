"""The repository's Dockerfile read as (instruction, arguments) pairs, for the tests that check
it without a Docker engine (``tests/unit/test_compose.py``, ``tests/integration/test_compose.py``)."""

from __future__ import annotations

from tests.support.paths import REPO


def dockerfile() -> list[tuple[str, str]]:
    """Each instruction of ``Dockerfile``, continuation lines joined, comments left out."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out
