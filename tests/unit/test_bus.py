"""The bus without a server: connecting where none listens fails fast with a clear error, and the
subject builders validate ids (the bus against a real nats-server: tests/integration/test_bus.py)."""

from __future__ import annotations

import socket
import time

import pytest

from cascade.errors import (
    BusUnavailableError,
    ValidationError,
)
from cascade.platform import subjects
from cascade.platform.bus import connect
from tests.support.fixtures_nats import nats_settings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connect_failure_is_fast_and_clear() -> None:
    port = _closed_port()
    settings = nats_settings(f"nats://127.0.0.1:{port}", nats_connect_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(BusUnavailableError) as info:
        await connect(settings)
    elapsed = time.monotonic() - started
    assert elapsed < 3.0
    assert f"nats://127.0.0.1:{port}" in str(info.value)
    assert "CASCADE_NATS_URL" in str(info.value)


def test_subject_builders_validate_ids() -> None:
    assert subjects.trace_event("abc", "created") == "cascade.trace.abc.created"
    assert subjects.sim_progress("s-1") == "cascade.sim.s-1.progress"
    assert subjects.run_event("*", "state") == "cascade.run.*.state"
    with pytest.raises(ValidationError):
        subjects.trace_event("a.b", "created")
    with pytest.raises(ValidationError):
        subjects.trace_event("abc", "exploded")
    for s in subjects.EVENTS_SUBJECTS:
        assert not s.startswith("cascade.jobs")
