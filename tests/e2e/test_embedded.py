"""`cascade up` end to end: real nats-server, SeaweedFS and the five services.

Every wait polls a real condition (HTTP answer, pid gone, state file change)
against a deadline; nothing relies on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from cascade.platform.bus import connect
from cascade.platform.settings import Settings, load_settings
from cascade.platform.storage import Storage
from programs.embedded.nats import nats_host_port, render_config
from programs.embedded.procs import pid_alive
from programs.embedded.stack import (
    StackLayout,
    child_environment,
    ensure_credentials,
    load_state,
    read_credentials,
)
from programs.embedded.testbed import UpStack, http_status, isolated_environment
from tests.support.paths import REPO
from tests.support.wait import wait_until_blocking

CASCADE = [sys.executable, "-m", "programs.cli"]
START_DEADLINE_S = 90.0
STOP_DEADLINE_S = 60.0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[UpStack]:
    """A `cascade up` of its own (the testbed's), stopped after the test."""
    with UpStack(tmp_path, samples="false") as up:
        yield up


async def _write_data(settings: Settings) -> int:
    """Put an object in S3, a KV value and a stream message; returns the message's sequence."""
    async with Storage.from_settings(settings) as storage:
        await storage.put_bytes("traces/persist/raw/stats.csv", b"kernel,cycles\n1,2\n")
    bus = await connect(settings)
    try:
        kv = await bus.kv("cascade-meta")
        await kv.put("test-persist", {"kept": True})
        ack = await bus.publish("cascade.trace.persist.test", b"hello")
    finally:
        await bus.close()
    return int(ack.seq)


async def _check_data(settings: Settings, seq: int) -> None:
    async with Storage.from_settings(settings) as storage:
        assert await storage.get_bytes("traces/persist/raw/stats.csv") == b"kernel,cycles\n1,2\n"
    bus = await connect(settings)
    try:
        kv = await bus.kv("cascade-meta")
        entry = await kv.get("test-persist", dict)
        assert entry is not None and entry.value == {"kept": True}
        msg = await bus.jsm.get_msg("CASCADE", seq)
        assert msg.data == b"hello" and msg.subject == "cascade.trace.persist.test"
    finally:
        await bus.close()


def test_up_stop_and_restart_keeps_data(stack: UpStack) -> None:
    stack.start(START_DEADLINE_S)
    first_output = stack.output()
    creds = read_credentials(stack.layout)
    assert creds is not None
    assert stat.S_IMODE(stack.layout.credentials.stat().st_mode) == 0o600
    assert creds.api_token in first_output
    assert stack.base in first_output

    components = stack.components()
    assert set(components) == {"nats", "s3", "ingest", "prepare", "orchestrator", "simulator", "api"}
    pids = [int(c.pid) for c in components.values()]  # type: ignore[arg-type]
    assert all(pid_alive(p) for p in pids)

    status = subprocess.run([*CASCADE, "status", "--json"], env=stack.env, cwd=REPO,
                            capture_output=True, timeout=30, check=False)
    report = json.loads(status.stdout)
    assert status.returncode == 0, status.stdout
    assert report["running"] is True and "services" in report["api"]

    settings = stack.settings()
    seq = asyncio.run(_write_data(settings))

    assert stack.stop(STOP_DEADLINE_S) == 0
    wait_until_blocking(lambda: not any(pid_alive(p) for p in pids), 10, what=f"every child to exit ({pids})",
                        interval=0.1)
    assert load_state(stack.layout).status == "stopped"  # type: ignore[union-attr]
    assert not any(c.pid for c in load_state(stack.layout).components)  # type: ignore[union-attr]

    stack.start(START_DEADLINE_S)
    assert read_credentials(stack.layout) == creds
    asyncio.run(_check_data(settings, seq))
    assert stack.stop(STOP_DEADLINE_S) == 0


def test_killed_service_is_restarted(stack: UpStack) -> None:
    stack.start(START_DEADLINE_S)
    before = stack.kill("orchestrator", signal.SIGKILL)
    assert before is not None and before.pid is not None
    old_pid = before.pid

    def restarted() -> bool:
        now = stack.components()["orchestrator"]
        return (now.restarts > before.restarts
                and now.pid not in (None, old_pid)
                and now.state == "running" and pid_alive(int(now.pid)))  # type: ignore[arg-type]

    wait_until_blocking(restarted, 30, what="the orchestrator to be restarted", interval=0.1)
    assert not pid_alive(old_pid)
    log = stack.output()
    assert "service exited; restarting" in log and "orchestrator" in log
    assert http_status(f"{stack.base}/readyz") == 200

    # A killed `cascade up` takes its children with it (or the next start reaps them).
    pids = [int(c.pid) for c in stack.components().values()]  # type: ignore[arg-type]
    assert stack.proc is not None
    stack.crash()
    stack.start(START_DEADLINE_S)
    assert all(not pid_alive(p) for p in pids)
    assert stack.stop(STOP_DEADLINE_S) == 0


def _up_log_events(stack: UpStack, event: str) -> list[dict[str, object]]:
    """JSON log lines of `cascade up` (its own output) whose event is ``event``."""
    found = []
    for line in stack.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == event:
                    found.append(entry)
    return found


def _kill_server_and_wait(stack: UpStack, name: str, bound_s: float) -> float:
    """SIGKILL the stack's ``name`` server; wait for its restart and /readyz 200 (seconds taken)."""
    before = stack.kill(name, signal.SIGKILL)
    assert before is not None and before.pid is not None
    old_pid = before.pid
    t0 = time.monotonic()

    def restarted() -> bool:
        now = stack.components()[name]
        return (now.pid not in (None, old_pid) and now.state == "running"
                and now.restarts == before.restarts + 1
                and pid_alive(int(now.pid)))  # type: ignore[arg-type]

    wait_until_blocking(restarted, bound_s, what=f"{name} to be restarted", interval=0.1)
    wait_until_blocking(lambda: http_status(f"{stack.base}/readyz") == 200, bound_s, what=f"/readyz 200 after killing {name}", interval=0.1)
    lines = [e for e in _up_log_events(stack, "server exited; restarting") if e.get("component") == name]
    assert lines, f"no restart line for {name} in:\n{stack.output()}"
    assert lines[-1]["pid"] == old_pid and lines[-1]["exit_code"] == -signal.SIGKILL
    assert int(lines[-1]["attempt"]) >= 1  # type: ignore[call-overload]
    assert not pid_alive(old_pid)
    return time.monotonic() - t0


def test_killed_nats_and_s3_are_restarted_with_their_data(stack: UpStack) -> None:
    stack.start(START_DEADLINE_S)
    settings = stack.settings()
    seq = asyncio.run(_write_data(settings))
    nats_port = stack.components()["nats"].port

    _kill_server_and_wait(stack, "nats", 30)
    assert stack.components()["nats"].port == nats_port
    asyncio.run(_check_data(settings, seq))   # JetStream stream, KV (file store) kept

    _kill_server_and_wait(stack, "s3", 45)
    asyncio.run(_check_data(settings, seq))   # S3 object kept
    # every service rode through both outages: none was restarted
    assert all(c.restarts == 0 for c in stack.components().values() if c.kind == "service")
    assert stack.stop(STOP_DEADLINE_S) == 0


async def _publish_paced_trace(settings: Settings) -> str:
    from programs.bench._runbed import generate_timeline, publish_trace

    bus = await connect(settings)
    try:
        async with Storage.from_settings(settings) as storage:
            record = await publish_trace(bus, storage, "tr-ridethrough", generate_timeline(200))
    finally:
        await bus.close()
    return record.id


def _api(stack: UpStack, method: str, path: str, body: object = None) -> dict[str, object]:
    creds = read_credentials(stack.layout)
    assert creds is not None and creds.api_token == stack.token
    return stack.api(method, path, body)  # type: ignore[no-any-return]


def test_run_in_progress_survives_a_nats_restart(stack: UpStack) -> None:
    stack.start(START_DEADLINE_S)
    trace_id = asyncio.run(_publish_paced_trace(stack.settings()))
    run = _api(stack, "POST", "/api/runs", {
        "trace_id": trace_id, "configs": ["SM90_H100"], "replicas": 2,
        "options": {"chunk_delay_s": 0.08}})
    run_id = str(run["id"])

    def state() -> str:
        try:
            return str(_api(stack, "GET", f"/api/runs/{run_id}")["run"]["state"])  # type: ignore[index]
        except (OSError, http.client.HTTPException):
            return "unreachable"

    wait_until_blocking(lambda: state() == "running", 30, what="the run to start", interval=0.1)
    killed_at = time.time()
    _kill_server_and_wait(stack, "nats", 30)
    wait_until_blocking(lambda: state() in ("completed", "failed", "cancelled"), 60, what="the run to finish", interval=0.1)
    body = _api(stack, "GET", f"/api/runs/{run_id}")
    assert body["run"]["state"] == "completed", body  # type: ignore[index]
    sims = body["sims"]
    assert isinstance(sims, list) and len(sims) == 2
    assert all(s["state"] == "completed" and s["kernels_done"] == s["kernels_total"] for s in sims)
    assert max(float(s["finished_at"]) for s in sims) > killed_at, "the run ended before the kill"
    assert stack.stop(STOP_DEADLINE_S) == 0


def test_busy_port_fails_with_clear_message(stack: UpStack) -> None:
    host, port = nats_host_port(stack.env["CASCADE_NATS_URL"])
    with socket.socket() as holder:
        holder.bind((host, port))
        holder.listen(1)
        proc = subprocess.run([*CASCADE, "up"], env=stack.env, cwd=REPO, capture_output=True,
                              timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert f"port {port} needed by NATS" in err and "already in use" in err


def test_status_before_first_start(tmp_path: Path) -> None:
    env = UpStack(tmp_path, samples="false").env
    proc = subprocess.run([*CASCADE, "status"], env=env, cwd=REPO, capture_output=True, timeout=30,
                          check=False)
    assert proc.returncode == 1
    assert b"never started" in proc.stdout


def test_child_environment_round_trips_settings() -> None:
    settings = load_settings(
        {}, api_tokens=["a", "b"], samples=False, http_port=9999, s3_secret_key="s3cr=t",
        nats_url="nats://127.0.0.1:4333", max_local_sims=3,
    )
    env = child_environment(settings, base={"PATH": "/bin", "CASCADE_CONFIG": "/nope.toml"})
    assert env["PATH"] == "/bin" and env["CASCADE_API_TOKENS"] == "a,b"
    assert "CASCADE_CONFIG" not in env
    assert load_settings(env) == settings


def test_credentials_are_generated_once(tmp_path: Path) -> None:
    layout = StackLayout(tmp_path / "d")
    layout.create()
    first, created = ensure_credentials(layout)
    again, created_again = ensure_credentials(layout)
    assert created and not created_again and first == again
    assert stat.S_IMODE(layout.credentials.stat().st_mode) == 0o600
    layout.credentials.write_text("{not json")
    with pytest.raises(ValueError, match="credentials.json"):
        read_credentials(layout)


def test_nats_config_caps_jetstream(tmp_path: Path) -> None:
    text = render_config(host="127.0.0.1", port=4555, store_dir=tmp_path / "js",
                         max_file_store=1 << 30)
    assert 'listen: "127.0.0.1:4555"' in text
    assert f'store_dir: "{tmp_path / "js"}"' in text
    assert "max_memory_store: 268435456" in text and "max_file_store: 1073741824" in text
    with pytest.raises(ValueError, match="CASCADE_NATS_URL"):
        nats_host_port("http://x:1")


def test_go_servers_get_the_memory_settings() -> None:
    from cascade.platform.settings import load_settings
    from programs.embedded.stack import go_environment

    env = go_environment(load_settings(), {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "GOMEMLIMIT": "384MiB", "GOGC": "50"}
    off = go_environment(load_settings(embedded_go_memory_mib=0, embedded_go_gc=0), {})
    assert "GOMEMLIMIT" not in off and "GOGC" not in off


async def test_a_seaweed_port_taken_after_the_pick_is_picked_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Parallel starts race for free ports: a SeaweedFS port taken between the pick (and the
    busy-port check) and weed's start is picked again, once, on a first start."""
    from programs.embedded import stack as stack_module
    from programs.embedded.seaweed import pick_ports
    from programs.embedded.stack import EmbeddedStack

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks: list[int] = []

    def pick(s3_port: int | None = None) -> object:
        ports = pick_ports(s3_port)
        if not picks:  # the first pick collides with what another process holds now
            ports = msgspec.structs.replace(ports, admin=taken.getsockname()[1])
        picks.append(ports.admin)
        return ports

    monkeypatch.setattr(stack_module, "pick_ports", pick)
    monkeypatch.setattr(EmbeddedStack, "_busy_ports", lambda self, *a: [])  # taken after the check
    env = isolated_environment(tmp_path / "data", samples="false")
    settings = load_settings(env)
    up = EmbeddedStack(settings, services=(), start_timeout_s=60.0)
    try:
        await up.start()
        assert len(picks) == 2 and picks[0] == taken.getsockname()[1] != picks[1]
        recorded = json.loads(up.layout.s3_ports.read_text())
        assert recorded["admin"] == picks[1]
        async with Storage.from_settings(up.child_settings) as storage:  # type: ignore[arg-type]
            await storage.ping()
    finally:
        await up.stop()
        taken.close()
