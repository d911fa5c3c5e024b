"""The api's pieces that need no server: its route modules are discovered, a service's status
reply becomes scalar `stats`, and a Last-Event-ID is read as the next event's number (the app
against real NATS and S3: tests/integration/test_api_basics.py, test_api_limits.py)."""

from __future__ import annotations

from cascade.platform import subjects
from services.api.app import route_modules
from services.api.routes.runs import parse_last_event_id


def test_route_modules_are_discovered() -> None:
    names = [m.__name__.rsplit(".", 1)[-1] for m in route_modules()]
    assert "health" in names


def test_service_stats_keep_scalars_only() -> None:
    """A service's status data becomes `stats` as documented (scalars): anything else a
    reply carries (a nested object, a list) is dropped, and a non-number uptime is null."""
    from services.api.routes.health import _instances

    name = subjects.micro_name("ingest")
    reply = {"name": name, "id": "i1", "version": "1", "endpoints": [{"data": {
        "uptime_s": True, "healthy": True, "role": "ingest", "files": 3, "rate": 1.5, "ok": False,
        "none": None, "nested": {"a": 1}, "listed": [1, 2]}}]}
    (inst,) = _instances([reply])["ingest"]
    assert inst.stats == {"role": "ingest", "files": 3, "rate": 1.5, "ok": False, "none": None}
    assert inst.uptime_s is None


def test_parse_last_event_id() -> None:
    assert parse_last_event_id("0") == 1
    assert parse_last_event_id(" 41 ") == 42
