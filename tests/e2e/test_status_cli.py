"""`cascade status` from any folder: a short table of the stack `cascade up` recorded per
user, "not running" told apart from "never started", ``--json`` for the full report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from programs.embedded.locate import known_stacks, locate_data_dir, remember_stack, stack_for_url
from programs.embedded.stack import ComponentState, StackLayout, StackState
from programs.embedded.testbed import UpStack
from tests.e2e.test_embedded import START_DEADLINE_S, STOP_DEADLINE_S


def _status(env: dict[str, str], cwd: Path, *extra: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "status", *extra], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _elsewhere(tmp: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """``env`` without CASCADE_DATA_DIR, and an empty folder to run in."""
    other = tmp / "somewhere-else"
    other.mkdir(exist_ok=True)
    return {k: v for k, v in env.items() if k != "CASCADE_DATA_DIR"}, other


def test_never_started_vs_not_running_from_another_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env, other = _elsewhere(tmp_path, env)
    rc, out, _ = _status(env, other)
    assert rc == 1 and out.startswith(f"Cascade: never started (no state in {other / '.cascade'})")
    # a stack that ran elsewhere and is gone (its cascade up pid is dead)
    layout = StackLayout(tmp_path / "proj" / ".cascade")
    layout.create()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    state = StackState(supervisor_pid=int(dead.stdout), status="up", data_dir=str(layout.root),
                       http_url="http://127.0.0.1:18080", nats_url="nats://127.0.0.1:1",
                       s3_endpoint="http://127.0.0.1:2", bucket="cascade", started_at=time.time(),
                       updated_at=time.time(),
                       components=[ComponentState(name="nats", kind="server", pid=int(dead.stdout),
                                                  state="running")])
    layout.state.write_bytes(msgspec.json.encode(state))
    remember_stack(layout.root, "http://127.0.0.1:18080", pid=int(dead.stdout),
                   environ={"XDG_STATE_HOME": env["XDG_STATE_HOME"]})
    rc, out, _ = _status(env, other)
    lines = out.splitlines()
    assert rc == 1
    assert lines[0] == ("Cascade: not running (last at http://127.0.0.1:18080); start it with "
                        "`make run` or `cascade up`")
    assert lines[1] == (f"data dir : {layout.root}  (found through "
                        f"{tmp_path / 'state' / 'cascade' / 'stacks.json'})")
    assert lines[3].split()[:3] == ["nats", "stopped", "-"]
    rc, out, _ = _status(env, other, "--json")
    report = json.loads(out)
    assert rc == 1 and report["running"] is False and report["status"] == "stopped"
    # an explicit data dir wins over the record
    rc, out, _ = _status({**env, "CASCADE_DATA_DIR": str(tmp_path / "empty")}, other)
    assert rc == 1 and "never started" in out.splitlines()[0]


def test_locate_prefers_the_running_stack_and_drops_vanished_ones(tmp_path: Path) -> None:
    environ = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    old, new = StackLayout(tmp_path / "a"), StackLayout(tmp_path / "b")
    for layout in (old, new):
        layout.create()
        layout.state.write_text("{}")
    remember_stack(old.root, "http://127.0.0.1:8080", pid=os.getpid(), environ=environ)
    remember_stack(new.root, "http://localhost:9090", pid=2**22 + 12345, environ=environ)
    assert [e.data_dir for e in known_stacks(environ)] == [str(new.root), str(old.root)]
    found, how = locate_data_dir(None, str(tmp_path / "here" / ".cascade"),
                                 environ=environ)
    assert found == old.root and how.endswith("stacks.json")  # alive beats the latest
    by_url = stack_for_url("http://127.0.0.1:9090/", environ)
    assert by_url is not None and by_url.data_dir == str(new.root)
    new.state.unlink()
    assert [e.data_dir for e in known_stacks(environ)] == [str(old.root)]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[UpStack]:
    """A `cascade up` of its own (the testbed's) that records itself under ``tmp_path/xdg``."""
    with UpStack(tmp_path, samples="false") as up:
        up.env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
        yield up


@pytest.mark.timeout(240)
def test_status_finds_the_running_stack_from_any_folder(stack: UpStack, tmp_path: Path) -> None:
    stack.start(START_DEADLINE_S)
    env, other = _elsewhere(tmp_path, stack.env)
    rc, out, err = _status(env, other)
    assert rc == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith(f"Cascade: running at {stack.base}  (cascade up pid "
                               f"{stack.proc.pid if stack.proc else '?'}, up ")
    assert lines[1].startswith(f"data dir : {stack.layout.root}  (found through ")
    assert lines[2].split() == ["component", "state", "pid", "uptime", "restarts", "port"]
    rows = {line.split()[0]: line.split() for line in lines[3:10]}
    assert set(rows) == {"nats", "s3", "ingest", "prepare", "orchestrator", "simulator", "api"}
    assert all(r[1] == "running" and r[2].isdigit() for r in rows.values())
    assert rows["api"][-1] == stack.env["CASCADE_HTTP_PORT"]
    assert lines[10].startswith("api      : answering")
    assert len(lines) == 11  # short: the full report is --json
    rc, out, _ = _status(env, other, "--json")
    report = json.loads(out)
    assert rc == 0 and report["running"] is True and "services" in report["api"]
    assert report["found_by"].endswith("stacks.json")
    assert stack.stop(STOP_DEADLINE_S) == 0
    rc, out, _ = _status(env, other)
    assert rc == 1 and out.startswith(f"Cascade: not running (last at {stack.base})")
