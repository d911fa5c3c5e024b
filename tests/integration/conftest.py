"""Integration tier: tests that talk to the real nats-server and/or S3 server of the session
fixtures, or run a service, CLI or stand-in as a subprocess.

Every test in this folder is marked ``integration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, pytest.mark.integration)
