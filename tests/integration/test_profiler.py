"""``cascade profile``: streaming while a stand-in tracer runs, an S3 outage survived,
Ctrl-C sealing an incomplete trace, local capture resumed, and the ``hf`` recipe on the
CPU under the real PyTorch profiler, imported and simulated end to end.

The stand-in (:mod:`programs.profiler.standin`) is a separate process writing real-format
raw Accel-Sim kernel traces into ``TRACES_FOLDER`` over several seconds. The stack is
real: ``nats-server``, a SeaweedFS server of this module's own (so it can be killed and
started again on the same ports and data), api, ingest, prepare and orchestrator.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from cascade.platform import subjects
from cascade.platform.state import RunRecord
from cascade.traces.baseline import read_baseline
from programs.cli.importer import run_import
from programs.client import md5_etag
from programs.embedded.binaries import weed_binary
from programs.embedded.ports import can_connect
from programs.embedded.procs import spawn, stop_popen, tail
from programs.embedded.procs import wait_until as procs_wait_until
from programs.embedded.seaweed import (
    generate_credentials,
    pick_ports,
    weed_mini_argv,
    write_s3_config,
)
from programs.profiler.session import ProfileOptions, ProfileSession, profile
from tests.support.fixtures_s3 import S3Server, _signed_request_works
from tests.support.traces_stack import REPO, TOKEN, TracesStack, running_stack
from tests.support.wait import wait_for_kv, wait_until

pytestmark = pytest.mark.timeout(240)

STANDIN = ["-m", "programs.profiler.standin"]
HAVE_HF = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None

TINY_OPT = {
    "model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 2, "ffn_dim": 64, "vocab_size": 50272,
    "max_position_embeddings": 128, "word_embed_proj_dim": 32, "do_layer_norm_before": True,
    "activation_function": "relu", "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
    "enable_bias": True, "layer_norm_elementwise_affine": True,
}


class RestartableS3:
    """A SeaweedFS S3 server that can be killed and started again on the same ports/data.

    Not the testbed's: it offers S3 only inside a whole supervised stack
    (:func:`~programs.embedded.testbed.embedded_servers`: a NATS of its own beside the traces
    stack's, no handle on the server, and a supervisor that restarts a killed S3 within a
    second), while this test holds S3 down for an outage of its own length."""

    def __init__(self, base: Path) -> None:
        self.base = base
        access, secret = generate_credentials()
        self.config = write_s3_config(base / "s3-identities.json", access, secret)
        self.data = base / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.ports = pick_ports()
        self.server = S3Server(endpoint=f"http://127.0.0.1:{self.ports.s3}", access_key=access,
                               secret_key=secret, region="us-east-1", data_dir=self.data,
                               log_path=base / "weed.log", pid=0)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        self.proc = spawn(weed_mini_argv(weed_binary(), self.data, self.ports, self.config),
                          self.base / "weed.log")
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"weed mini exited: {tail(self.base / 'weed.log')}")
            return can_connect("127.0.0.1", self.ports.s3, 0.2) and _signed_request_works(
                self.server.endpoint, self.server.access_key, self.server.secret_key)

        if not procs_wait_until(ready, timeout):
            raise RuntimeError(f"SeaweedFS did not come up: {tail(self.base / 'weed.log')}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        procs_wait_until(lambda: not self.ports.busy(), 20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_popen(self.proc, 10)


@pytest.fixture(scope="module")
def own_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableS3]:
    s3 = RestartableS3(tmp_path_factory.mktemp("profiler-s3"))
    s3.start()
    try:
        yield s3
    finally:
        s3.stop()


@pytest.fixture(scope="module")
async def stack(own_s3: RestartableS3, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    from services.orchestrator import run as run_orchestrator

    async with running_stack(own_s3.server, tmp_path_factory.mktemp("profiler-stack"),
                             job_max_deliver=20) as st:
        await st.start("orchestrator", run_orchestrator, orchestrator_backend="local", max_local_sims=2)
        yield st


def _uploaded(session: ProfileSession) -> int:
    return len(session.uploader.stats.arrived) if session.uploader else 0


def _opts(stack: TracesStack, out: Path, command: list[str], **kw: Any) -> ProfileOptions:
    values: dict[str, Any] = {
        "command": command, "app": stack.base_url, "token": TOKEN, "source_gpu": "SM80_A100",
        "mode": "instructions", "out": out, "baseline_repeats": 1, "baseline_warmup": 0,
        "wait": 120.0, "retry_for": 120.0, "quiet": True, "name": out.name,
    }
    values.update(kw)
    return ProfileOptions(**values)


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def _reports(stack: TracesStack) -> tuple[Counter[tuple[str, str]], Any]:
    """Count every upload the api hands to ingest, by (trace, file)."""
    counts: Counter[tuple[str, str]] = Counter()

    async def on_msg(msg: Any) -> None:
        body = json.loads(msg.data)
        counts[(str(body.get("trace_id")), str(body.get("file")))] += 1

    sub = await stack.bus.nc.subscribe("cascade.trace.*.uploaded", cb=on_msg)
    return counts, sub


async def test_streams_while_tracer_runs_and_survives_s3_restart(
        stack: TracesStack, own_s3: RestartableS3, tmp_path: Path) -> None:
    out, log, go = tmp_path / "trace", tmp_path / "standin.log", tmp_path / "go"
    counts, sub = await _reports(stack)
    kernels = 12
    session = ProfileSession(_opts(stack, out, [
        sys.executable, *STANDIN, "--kernels", str(kernels), "--interval", "0.3",
        "--log", str(log), "--wait-for", str(go), "--before", "5"]))
    task = asyncio.create_task(session.run())
    # kernels 1-4 are written, then the stand-in waits: they must arrive while it runs
    await wait_until(lambda: _uploaded(session) >= 4, 60, what="4 kernels uploaded")
    assert not any(e["event"] == "exit" for e in _events(log))
    own_s3.kill()
    go.touch()
    await wait_until(lambda: sum(e["event"] == "complete" for e in _events(log)) >= 8, 30,
                     what="the stand-in writing on while S3 is down")
    uploader = session.uploader
    assert uploader is not None
    await wait_until(lambda: uploader.stats.retries >= 2, 30, what="a few failed upload attempts while S3 is down")
    own_s3.start()
    result = await asyncio.wait_for(task, 180)
    await sub.unsubscribe()

    assert result.exit_status == 0 and result.state == "ready", result
    assert result.retries > 0, "the S3 outage should have cost retries"
    exited = next(e["t"] for e in _events(log) if e["event"] == "exit")
    assert min(t for n, t in result.arrived.items() if n.startswith("kernel-")) < exited - 1.0
    local = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    assert local == {*(f"kernel-{i}.trace" for i in range(1, kernels + 1)), "kernelslist",
                     "stats.csv", "baseline.json"}
    tid = result.trace_id
    assert tid is not None
    per_file = {f: n for (t, f), n in counts.items() if t == tid}
    assert per_file == dict.fromkeys(local, 1), "every file reported to ingest exactly once"
    files = {f.name: f for f in await stack.store.files(tid)}
    assert set(files) == local
    assert all(files[n].etag == md5_etag(out / n) for n in local)
    record = await stack.store.require(tid)
    assert record.bundle_kernels == kernels
    base = read_baseline((out / "baseline.json").read_bytes())
    assert record.baseline["e2e_ms"] == pytest.approx(base.summary()["e2e_ms"])
    # uploads overlapped the run: the last kernel arrived after the first one by seconds
    assert result.kernels == kernels and set(result.lag_s) == {f"kernel-{i}.trace" for i in range(1, kernels + 1)}


async def test_ctrl_c_stops_command_and_seals_incomplete(stack: TracesStack, tmp_path: Path) -> None:
    out, log = tmp_path / "trace", tmp_path / "standin.log"
    session = ProfileSession(_opts(stack, out, [
        sys.executable, *STANDIN, "--kernels", "4", "--interval", "0.2", "--log", str(log),
        "--hang"], baseline_repeats=0))
    task = asyncio.create_task(session.run())
    await wait_until(lambda: _uploaded(session) >= 3, 60, what="3 kernels uploaded")
    session.runner.on_sigint()  # what the SIGINT handler does
    result = await asyncio.wait_for(task, 60)
    assert result.interrupted and result.exit_status == 130
    assert session.runner.proc is not None and session.runner.proc.returncode is not None
    assert result.kernels == 3
    async with stack.client() as api:
        final = await api.wait_for_state(result.trace_id or "", {"ready", "incomplete", "failed"},
                                         timeout=60)
    assert final["state"] == "incomplete"
    assert "kernel-4.trace" in " ".join(final["missing"])  # the one it was writing


async def test_local_capture_then_resume_and_import_finish_the_same_trace(
        stack: TracesStack, tmp_path: Path) -> None:
    from programs.embedded.ports import free_port

    out = tmp_path / "capture"
    cmd = [sys.executable, *STANDIN, "--kernels", "3", "--interval", "0.1"]
    dead = f"http://127.0.0.1:{free_port()}"
    local = await profile(_opts(stack, out, cmd, app=dead))
    assert local.exit_status == 0 and local.local_only and local.trace_id is None
    assert {p.name for p in out.iterdir()} >= {"kernel-1.trace", "kernel-3.trace", "baseline.json"}
    resumed = await profile(_opts(stack, out, [], resume=True))
    assert resumed.state == "ready" and resumed.kernels == 3
    again = await run_import(argparse.Namespace(
        path=out, app=stack.base_url, token=TOKEN, name=None, source_gpu=None, kind=None,
        workload="", trace_id=None, state_file=None, no_seal=False, wait=30.0, quiet=True))
    assert again["trace_id"] == resumed.trace_id and again["uploaded"] == 0
    assert again["state"] == "ready"


def test_command_exit_status_and_missing_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "programs.cli", "profile", "--out", str(tmp_path / "o"), "--mode",
         "instructions", "--baseline-repeats", "0", "--", sys.executable, *STANDIN,
         "--kernels", "1", "--interval", "0.05", "--exit-code", "7"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert "standin: wrote 1 kernels" in proc.stdout  # COMMAND's output passes through
    assert (tmp_path / "o" / "kernel-1.trace").is_file()
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "profile", "--out", str(tmp_path / "o")],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "COMMAND: give COMMAND after --" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "profile", "--mode", "instructions",
                           "--out", str(tmp_path / "p"), "--", "/nonexistent/tracer-app"],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "not found" in proc.stderr


@pytest.mark.skipif(not HAVE_HF, reason="torch and transformers are not installed")
async def test_hf_recipe_on_cpu_profiled_imported_and_simulated(stack: TracesStack, tmp_path: Path) -> None:
    from programs.cli.profile import options_from_args, register

    config = tmp_path / "tiny-opt" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY_OPT))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args([
        "profile", "--app", stack.base_url, "--token", TOKEN, "--source-gpu", "SM90_H100",
        "--out", str(tmp_path / "hf"), "--quiet", "--wait", "120",
        "hf", "--model", str(config), "--random-init", "--max-new-tokens", "4", "--repeats", "2",
        "--warmup", "1"])
    opts = options_from_args(args)
    assert opts.recipe and opts.mode == "timeline" and opts.command[1:3] == ["-m", "programs.profiler.hf"]
    result = await profile(opts)
    assert result.exit_status == 0 and result.state == "ready", result
    base = result.baseline
    assert base is not None and len(base.e2e_ms) == 2 and base.warmup == 1 and base.device == "cpu"
    assert all(len(steps) == 4 for steps in base.step_ms)  # one prefill + three decode forwards
    chrome = json.loads((tmp_path / "hf" / "timeline.pt.trace.json").read_text())
    names = {e.get("name") for e in chrome["traceEvents"]}
    assert "step:prefill:tokens=6:context=6" in names
    assert any(str(n).startswith("step:decode:tokens=1:context=") for n in names)
    assert any(e.get("args", {}).get("Input Dims") for e in chrome["traceEvents"])  # record_shapes
    record = await stack.store.require(result.trace_id or "")
    assert record.kind == "timeline" and record.bundle_kernels > 100
    assert record.baseline["e2e_ms"] == pytest.approx(base.summary()["e2e_ms"])
    async with stack.client() as api:
        run = await api.request("POST", "/api/runs", json={
            "trace_id": record.id, "configs": ["SM90_H100", "SM80_A100"], "replicas": 1})
        await wait_for_kv(stack.bus, subjects.KV_RUNS, run["id"],
                          lambda r: r.state in ("completed", "failed", "cancelled"), type_=RunRecord, timeout=120)
        detail = await api.request("GET", f"/api/runs/{run['id']}")
        assert detail["run"]["state"] == "completed", detail
        results = await api.request("GET", f"/api/runs/{run['id']}/results")
    by_config = {c["config"]: c for c in results["configs"]}
    assert by_config["SM90_H100"]["baseline_e2e_ms"] == pytest.approx(base.summary()["e2e_ms"], rel=1e-3)
    assert by_config["SM80_A100"]["baseline_e2e_ms"] is None


async def test_failed_command_status_is_returned_and_what_arrived_sealed(
        stack: TracesStack, tmp_path: Path) -> None:
    out = tmp_path / "trace"
    result = await asyncio.wait_for(profile(_opts(stack, out, [
        sys.executable, *STANDIN, "--kernels", "2", "--interval", "0.1", "--exit-code", "3"],
        baseline_repeats=0)), 60)
    assert result.exit_status == 3 and result.kernels == 2
    record = await stack.store.require(result.trace_id or "")
    assert record.sealed
