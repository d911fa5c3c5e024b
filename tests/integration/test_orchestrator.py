"""Orchestrator: timeouts, the local backend's process accounting."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cascade.platform.settings import load_settings
from services.orchestrator.backends import LocalBackend, settings_env
from tests.support.runs_stack import get, make_settings, make_trace, post, running, wait_run


async def test_sim_timeout_fails_the_run(s3_server: Any, nats_url: str, tmp_path: Any) -> None:
    settings = make_settings(s3_server, nats_url, tmp_path, orchestrator_backend="pool", sim_timeout_s=2.0)
    async with running(settings, "api", "orchestrator", "sim:1") as stack:
        trace = await make_trace(settings, 400)
        status, body = await post(stack.base, "/api/runs", {
            "trace_id": trace.id, "configs": ["SM90_H100"], "options": {"chunk_delay_s": 0.2}})
        assert status == 202, body
        detail = await wait_run(stack, body["id"], {"failed", "completed"}, timeout=40)
        assert detail["run"]["state"] == "failed"
        sim = detail["sims"][0]
        assert sim["state"] == "failed" and "timed out after 2 s" in sim["error"]
        assert "timed out" in detail["run"]["error"]
        results = await get(stack.base, f"/api/runs/{body['id']}/results")
        assert results["configs"][0]["predicted_e2e_ms"] is None


async def test_local_backend_keeps_at_most_max_processes(nats_url: str, tmp_path: Any) -> None:
    settings = load_settings({}, nats_url=nats_url, max_local_sims=2, data_dir=str(tmp_path),
                             job_ack_wait_s=2.0, drain_timeout_s=1.0, log_format="json")
    demand = {"n": 5}
    backend = LocalBackend(settings, lambda: demand["n"], log_dir=tmp_path / "logs")
    try:
        assert backend.reconcile() == 2
        first = set(backend.procs)
        assert backend.reconcile() == 2 and set(backend.procs) == first
        victim = next(iter(backend.procs.values()))
        victim.kill()
        victim.wait()
        assert backend.reconcile() == 2 and set(backend.procs) != first  # replaced
        demand["n"] = 0
        assert backend.reconcile() == 2  # idle ones are left to time out on their own
        assert backend.stats()["spawned"] == 3
        cmd = backend.command()
        assert cmd[1:4] == ["-m", "services.simulator", "--once"]
    finally:
        started = time.monotonic()
        await backend.stop()
    assert not backend.procs and time.monotonic() - started < 15
    env = settings_env(settings)
    assert env["CASCADE_NATS_URL"] == nats_url and env["CASCADE_MAX_LOCAL_SIMS"] == "2"
    assert load_settings(env).job_ack_wait_s == 2.0
    await asyncio.sleep(0)
