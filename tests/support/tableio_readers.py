"""Both CSV readers of :mod:`cascade.tableio` for every test of a module that imports
:func:`reader` (``tests/unit/test_tableio.py``, ``tests/integration/test_tableio.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["careful", "arrow"], autouse=True)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with both CSV readers: the careful one (small files) and Arrow."""
    import cascade.tableio

    if request.param == "arrow":
        monkeypatch.setattr(cascade.tableio, "SMALL_CSV_BYTES", 0)
    else:
        monkeypatch.setattr(cascade.tableio, "SMALL_CSV_BYTES", 1 << 40)
    return str(request.param)
