"""Unit tier: domain and pure logic (parsers, models, scheduler, in-process apps); no servers, no
subprocesses.

Every test in this folder is marked ``unit``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, pytest.mark.unit)
