"""The tier marker of a test comes from its folder: each tier's ``conftest.py`` calls
:func:`mark_folder` so that ``-m unit``, ``-m integration`` and ``-m e2e`` select exactly
the tests under ``tests/unit``, ``tests/integration`` and ``tests/e2e``."""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], folder: Path, marker: pytest.MarkDecorator) -> None:
    """Add ``marker`` to every collected item whose file lies under ``folder``.

    ``pytest_collection_modifyitems`` in a folder's conftest sees the whole session's items,
    hence the path check.
    """
    for item in items:
        if folder in item.path.parents:
            item.add_marker(marker)
