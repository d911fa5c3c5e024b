"""End-to-end tier: the whole stack (`cascade up`, the in-process pipeline, the bundled sample),
the browser tests in chromium and the schemathesis contract.

Every test in this folder is marked ``e2e``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, pytest.mark.e2e)
