"""What `cascade up` prints for people: short log lines from the services' JSON lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

from cascade.platform.log import HUMAN_MAX_FIELDS, human_line
from programs.embedded.console import LogFollower, render


def test_human_line_has_level_service_event_and_a_few_fields() -> None:
    line = human_line({"event": "sample loaded", "level": "info", "service": "api", "logger": "x",
                       "timestamp": "2026-12-03T16:42:01Z", "created": 10, "existing": 0})
    clock, rest = line.split(" ", 1)
    assert len(clock) == 8 and clock.count(":") == 2
    assert rest.split() == ["info", "api", "sample", "loaded", "created=10", "existing=0"]
    many = human_line({"event": "e", "level": "warning", **{f"k{i}": i for i in range(9)}}, service="prepare")
    assert f"k{HUMAN_MAX_FIELDS - 1}=" in many and f"k{HUMAN_MAX_FIELDS}=" not in many
    assert "(+4 more)" in many and " prepare " in many
    crash = human_line({"event": "job failed", "level": "error", "component": "simulator",
                        "path": "a b", "exception": "Traceback (most recent call last):\n  x\nValueError: bad"})
    assert crash.endswith('path="a b"  error="ValueError: bad"') and "\n" not in crash


def test_render_modes_and_levels() -> None:
    raw = json.dumps({"event": "simulation completed", "level": "info", "kernels": 12})
    assert render(raw, "simulator", mode="json") == raw
    assert render(raw, "simulator", mode="human").endswith("info    simulator    simulation completed  kernels=12")
    assert render(raw, "simulator", mode="human", min_level="warning") is None
    assert render(raw, "simulator", mode="off") is None
    assert render("Traceback (most recent call last):", "api", mode="human") == (
        "         api | Traceback (most recent call last):")
    assert render("   ", "api", mode="human") is None


def test_follower_prints_each_new_complete_line_once(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    log.write_text(json.dumps({"event": "from an earlier run", "level": "info"}) + "\n")
    out = io.StringIO()
    follower = LogFollower([("api", log)], out, mode="human")
    follower._offsets[log] = log.stat().st_size  # what start() records
    with log.open("a") as fh:
        fh.write(json.dumps({"event": "api listening", "level": "info", "url": "http://x"}) + "\n")
        fh.write('{"event": "half a li')
    assert follower.poll() == 1
    with log.open("a") as fh:
        fh.write('ne", "level": "warning"}\n')
    assert follower.poll() == 1 and follower.poll() == 0
    lines = out.getvalue().splitlines()
    assert [line.split(None, 3)[3] for line in lines] == ["api listening  url=http://x", "half a line"]
    assert "earlier run" not in out.getvalue()
