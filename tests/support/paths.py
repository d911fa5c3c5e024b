"""Paths the tests read: the repository, the test data files, and the shared measured data
(``../shared/data`` beside the checkout, not in git)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
TEST_DATA = TESTS / "data"
SHARED_DATA = REPO.parent / "shared" / "data"
