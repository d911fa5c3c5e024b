"""`cascade up` end to end: real nats-server, SeaweedFS and the five services.

Every wait polls a real condition (HTTP answer, pid gone, state file change)
against a deadline; nothing relies on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
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
    isolated_environment,
    load_state,
    read_credentials,
)
from tests.support.paths import REPO
from tests.support.wait import wait_until_blocking

CASCADE = [sys.executable, "-m", "programs.cli"]
START_DEADLINE_S = 90.0
STOP_DEADLINE_S = 60.0


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, http.client.HTTPException):
        # nothing listening yet; on a free port in the ephemeral range the kernel may even
        # connect the socket to itself and echo the request back (BadStatusLine)
        return None


class Stack:
    """One `cascade up` process under test."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        self.data = Path(env["CASCADE_DATA_DIR"])
        self.layout = StackLayout(self.data)
        self.http = f"http://127.0.0.1:{env['CASCADE_HTTP_PORT']}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        out = (self.workdir / f"up-{self.runs}.log").open("wb")
        self.proc = subprocess.Popen(
            [*CASCADE, "up"], env=self.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        out.close()

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"cascade up exited with {self.proc.returncode}:\n{self.output()}")
            return _http_status(f"{self.http}/readyz") == 200

        wait_until_blocking(ready, START_DEADLINE_S, what=f"{self.http}/readyz to answer 200", interval=0.1)
        wait_until_blocking(lambda: "Cascade is up" in self.output(), 10, what="the banner", interval=0.1)

    def output(self) -> str:
        return (self.workdir / f"up-{self.runs}.log").read_text(errors="replace")[-4000:]

    def state(self) -> dict[str, dict[str, object]]:
        state = load_state(self.layout)
        assert state is not None
        return {c.name: msgspec.structs.asdict(c) for c in state.components}

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        try:
            return self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"cascade up did not stop within {STOP_DEADLINE_S} s") from None

    def settings(self) -> Settings:
        creds = read_credentials(self.layout)
        assert creds is not None
        return load_settings(
            {},
            nats_url=self.env["CASCADE_NATS_URL"],
            s3_endpoint=self.env["CASCADE_S3_ENDPOINT"],
            s3_access_key=creds.s3_access_key,
            s3_secret_key=creds.s3_secret_key,
        )


def _stack_env(tmp_path: Path) -> dict[str, str]:
    return isolated_environment(tmp_path / "data", samples="false")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    st = Stack(_stack_env(tmp_path), tmp_path)
    try:
        yield st
    finally:
        if st.proc is not None and st.proc.poll() is None:
            st.proc.kill()
            st.proc.wait()


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


def test_up_stop_and_restart_keeps_data(stack: Stack) -> None:
    stack.start()
    first_output = stack.output()
    creds = read_credentials(stack.layout)
    assert creds is not None
    assert stat.S_IMODE(stack.layout.credentials.stat().st_mode) == 0o600
    assert creds.api_token in first_output
    assert stack.http in first_output

    components = stack.state()
    assert set(components) == {"nats", "s3", "ingest", "prepare", "orchestrator", "simulator", "api"}
    pids = [int(c["pid"]) for c in components.values()]  # type: ignore[call-overload]
    assert all(pid_alive(p) for p in pids)

    status = subprocess.run([*CASCADE, "status", "--json"], env=stack.env, cwd=REPO,
                            capture_output=True, timeout=30, check=False)
    report = json.loads(status.stdout)
    assert status.returncode == 0, status.stdout
    assert report["running"] is True and "services" in report["api"]

    settings = stack.settings()
    seq = asyncio.run(_write_data(settings))

    assert stack.stop() == 0
    wait_until_blocking(lambda: not any(pid_alive(p) for p in pids), 10, what=f"every child to exit ({pids})",
                        interval=0.1)
    assert load_state(stack.layout).status == "stopped"  # type: ignore[union-attr]
    assert not any(c.pid for c in load_state(stack.layout).components)  # type: ignore[union-attr]

    stack.start()
    assert read_credentials(stack.layout) == creds
    asyncio.run(_check_data(settings, seq))
    assert stack.stop() == 0


def test_killed_service_is_restarted(stack: Stack) -> None:
    stack.start()
    before = stack.state()["orchestrator"]
    old_pid = int(before["pid"])  # type: ignore[call-overload]
    os.kill(old_pid, 9)

    def restarted() -> bool:
        now = stack.state()["orchestrator"]
        return (int(now["restarts"]) > int(before["restarts"])  # type: ignore[call-overload]
                and now["pid"] not in (None, old_pid)
                and now["state"] == "running" and pid_alive(int(now["pid"])))  # type: ignore[call-overload]

    wait_until_blocking(restarted, 30, what="the orchestrator to be restarted", interval=0.1)
    assert not pid_alive(old_pid)
    log = stack.output()
    assert "service exited; restarting" in log and "orchestrator" in log
    assert _http_status(f"{stack.http}/readyz") == 200

    # A killed `cascade up` takes its children with it (or the next start reaps them).
    pids = [int(c["pid"]) for c in stack.state().values()]  # type: ignore[call-overload]
    assert stack.proc is not None
    stack.proc.kill()
    stack.proc.wait()
    stack.start()
    assert all(not pid_alive(p) for p in pids)
    assert stack.stop() == 0


def _up_log_events(stack: Stack, event: str) -> list[dict[str, object]]:
    """JSON log lines of `cascade up` (its own output) whose event is ``event``."""
    found = []
    for line in (stack.workdir / f"up-{stack.runs}.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == event:
                    found.append(entry)
    return found


def _kill_server_and_wait(stack: Stack, name: str, bound_s: float) -> float:
    """SIGKILL the stack's ``name`` server; wait for its restart and /readyz 200 (seconds taken)."""
    before = stack.state()[name]
    old_pid = int(before["pid"])  # type: ignore[call-overload]
    os.kill(old_pid, signal.SIGKILL)
    t0 = time.monotonic()

    def restarted() -> bool:
        now = stack.state()[name]
        return (now["pid"] not in (None, old_pid) and now["state"] == "running"
                and int(now["restarts"]) == int(before["restarts"]) + 1  # type: ignore[call-overload]
                and pid_alive(int(now["pid"])))  # type: ignore[call-overload]

    wait_until_blocking(restarted, bound_s, what=f"{name} to be restarted", interval=0.1)
    wait_until_blocking(lambda: _http_status(f"{stack.http}/readyz") == 200, bound_s, what=f"/readyz 200 after killing {name}", interval=0.1)
    lines = [e for e in _up_log_events(stack, "server exited; restarting") if e.get("component") == name]
    assert lines, f"no restart line for {name} in:\n{stack.output()}"
    assert lines[-1]["pid"] == old_pid and lines[-1]["exit_code"] == -signal.SIGKILL
    assert int(lines[-1]["attempt"]) >= 1  # type: ignore[call-overload]
    assert not pid_alive(old_pid)
    return time.monotonic() - t0


def test_killed_nats_and_s3_are_restarted_with_their_data(stack: Stack) -> None:
    stack.start()
    settings = stack.settings()
    seq = asyncio.run(_write_data(settings))
    nats_port = stack.state()["nats"]["port"]

    _kill_server_and_wait(stack, "nats", 30)
    assert stack.state()["nats"]["port"] == nats_port
    asyncio.run(_check_data(settings, seq))   # JetStream stream, KV (file store) kept

    _kill_server_and_wait(stack, "s3", 45)
    asyncio.run(_check_data(settings, seq))   # S3 object kept
    # every service rode through both outages: none was restarted
    assert all(c["restarts"] == 0 for c in stack.state().values() if c["kind"] == "service")
    assert stack.stop() == 0


async def _publish_paced_trace(settings: Settings) -> str:
    from programs.bench._runbed import generate_timeline, publish_trace

    bus = await connect(settings)
    try:
        async with Storage.from_settings(settings) as storage:
            record = await publish_trace(bus, storage, "tr-ridethrough", generate_timeline(200))
    finally:
        await bus.close()
    return record.id


def _api(stack: Stack, method: str, path: str, body: object = None) -> dict[str, object]:
    creds = read_credentials(stack.layout)
    assert creds is not None
    req = urllib.request.Request(
        stack.http + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {creds.api_token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_run_in_progress_survives_a_nats_restart(stack: Stack) -> None:
    stack.start()
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
    assert stack.stop() == 0


def test_busy_port_fails_with_clear_message(stack: Stack) -> None:
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
    env = _stack_env(tmp_path)
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
    assert env == {"PATH": "/bin", "GOMEMLIMIT": "128MiB", "GOGC": "50"}
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
