"""Shared pytest configuration: loads the real-server fixtures (NATS, S3)."""

from __future__ import annotations

import importlib.util

pytest_plugins = [
    name
    for name in ("tests.fixtures_nats", "tests.fixtures_s3")
    if importlib.util.find_spec(name) is not None
]
