"""The accel-sim model through the real stack: nats-server, SeaweedFS, api, ingest, prepare,
orchestrator (local backend) and real simulator processes running a stand-in accel-sim.out.

``CASCADE_ACCELSIM_CONFIGS`` is a copy of an Accel-Sim checkout's config layout (gpgpu-sim's
tested-cfgs with gpgpusim.config naming its interconnect file relative to the working
directory, Accel-Sim's tested-cfgs with trace.config) under its own config names, which the
table pairs with Cascade GPUs (SM86_RTX3070 serves SM80_A100, SM90_H100 serves SM90_H100,
SM7_QV100 serves SM70_V100_PCIE_32GB, SM6_TITANX serves SM61_GTX1080TI). A generated
instruction trace is uploaded and prepared; then runs ask for ``accel-sim`` on configs whose
folders make the stand-in behave (finish with one kernel skipped, crash after two kernels,
hang after one); the real matrixmul trace runs on three configs and reproduces the cycles
the stand-in prints when run by hand on the same folder. Progress events per kernel reach the api's SSE
while the simulator runs; cancel and the sim timeout kill its process group; results carry
its cycles; unconfigured configs, an unset binary and timeline traces are refused with 400.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import lzma
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from cascade.engine.extrapolation import NOT_SIMULATED
from cascade.platform import subjects
from cascade.platform.runstore import read_kernels, read_result
from cascade.platform.state import RunRecord, SimRecord
from programs.bench._runbed import generate_timeline, publish_trace
from programs.cli.importer import run_import
from programs.embedded.ports import free_port
from tests.support.accelsim_helpers import (
    CHECKOUT_CLOCK_MHZ,
    GPGPUSIM_CFGS,
    copy_checkout,
    make_binary,
    pids_alive,
)
from tests.support.accelsim_standin import cycles_of, stats_of
from tests.support.paths import SHARED_DATA
from tests.support.traces_stack import TOKEN, TracesStack, running_stack, write_kernels
from tests.support.wait import wait_for_kv, wait_until

SIM_TIMEOUT_S = 12.0
#: SM80_A100 runs on SM86_RTX3070 (the closest stock config), at that config's clock.
A100_CLOCK = CHECKOUT_CLOCK_MHZ["SM86_RTX3070"]
MATRIXMUL = SHARED_DATA / "traces" / "matrixmul-32x32-sm61"


@pytest.fixture(scope="module")
async def accel(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    from services.orchestrator import run as run_orchestrator

    base = tmp_path_factory.mktemp("accelsim-stack")
    pids = base / "pids"
    pids.mkdir()
    binary = make_binary(base / "bin")
    configs = copy_checkout(base / "accel-sim-framework",
                            SM86_RTX3070={"pace_s": 0.25, "skip": "4"},
                            SM90_H100={"pace_s": 0.05, "mode": "crash", "after": 2},
                            SM7_QV100={"pace_s": 0.1, "mode": "hang", "after": 1, "pids_dir": pids},
                            SM6_TITANX={"pace_s": 0.05})
    async with running_stack(s3_server, base, accelsim_bin=str(binary),
                             accelsim_configs=str(configs), sim_timeout_s=SIM_TIMEOUT_S) as stack:
        await stack.start("orchestrator", run_orchestrator, orchestrator_backend="local",
                          max_local_sims=3)
        folder = base / "trace"
        write_kernels(folder, 6, blocks=8, iterations=2)
        summary = await run_import(argparse.Namespace(
            path=folder, app=stack.base_url, token=TOKEN, name=None, source_gpu="SM80_A100", kind=None,
            workload="accel-sim test", trace_id=None, state_file=base / "import.json", no_seal=False,
            wait=90.0, quiet=True))
        assert summary["state"] == "ready", summary
        yield {"stack": stack, "trace_id": summary["trace_id"], "pids": pids, "configs": configs,
               "folder": folder}


async def _post_run(stack: TracesStack, body: dict[str, Any], base_url: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as s, \
            s.post((base_url or stack.base_url) + "/api/runs", json=body, headers=headers) as r:
        return r.status, await r.json()


async def _get(stack: TracesStack, path: str, base_url: str | None = None) -> Any:
    async with aiohttp.ClientSession() as s, s.get((base_url or stack.base_url) + path) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def _sse(url: str, timeout: float = 90) -> list[dict[str, Any]]:
    """Every SSE event until the stream ends, with the monotonic time it arrived."""
    events: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, s.get(url) as r:
        assert r.status == 200
        async for raw in r.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if cur:
                    cur["arrived"] = time.monotonic()
                    events.append(cur)
                cur = {}
            elif line.startswith("event: "):
                cur["event"] = line[7:]
            elif line.startswith("data: "):
                cur["data"] = json.loads(line[6:])
    return events


async def _wait_run(stack: TracesStack, run_id: str, states: set[str], timeout: float = 60) -> dict[str, Any]:
    """Once the run's KV record is in one of ``states``: the api's detail of it."""
    await wait_for_kv(stack.bus, subjects.KV_RUNS, run_id, lambda r: r.state in states,
                      type_=RunRecord, timeout=timeout)
    return await _get(stack, f"/api/runs/{run_id}")


async def test_progress_per_kernel_reaches_sse_and_results_carry_cycles(accel: dict[str, Any]) -> None:
    stack: TracesStack = accel["stack"]
    status, body = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM80_A100"],
                                           "replicas": 2, "model": "accel-sim"})
    assert status == 202, body
    run_id = body["id"]
    events = await _sse(f"{stack.base_url}/api/runs/{run_id}/events")
    assert events[-1]["event"] == "run" and events[-1]["data"]["state"] == "completed", events[-3:]
    for sim_id in body["run"]["sim_ids"]:
        mine = [e for e in events if e["event"] == "sim" and e["data"]["id"] == sim_id]
        kernel_events = [e for e in mine if "kernel" in e["data"]]
        assert [e["data"]["kernel"]["kernel_id"] for e in kernel_events] == [1, 2, 3, 5, 6]
        assert [e["data"]["kernel"]["cycles"] for e in kernel_events] == [cycles_of(k) for k in (1, 2, 3, 5, 6)]
        assert [round(e["data"]["percent"], 3) for e in kernel_events] == [
            round(100 * i / 6, 3) for i in range(1, 6)]
        k1 = kernel_events[0]["data"]["kernel"]
        assert k1["name"] == "_Z6kernel1Pf" and k1["instructions"] == 10516
        assert k1["ipc"] == pytest.approx(10516 / cycles_of(1), rel=1e-3) and k1["sim_rate_ips"] == 10516
        completed = next(e for e in mine if e["data"]["state"] == "completed")
        # the first kernel's event arrived while the simulator still had 4 kernels x 0.25 s to go
        assert completed["arrived"] - kernel_events[0]["arrived"] > 0.5
        result = await read_result(stack.storage, run_id, sim_id)
        assert result.model == "accel-sim" and result.simulator is not None
        sim = result.simulator
        assert sim.name == "Accel-Sim" and sim.config_id == "SM80_A100" and sim.core_clock_mhz == A100_CLOCK
        assert (sim.accelsim_config, sim.config_relation) == ("SM86_RTX3070", "closest")
        folders = [accel["configs"].joinpath(*GPGPUSIM_CFGS, "SM86_RTX3070"),
                   accel["configs"] / "gpu-simulator" / "configs" / "tested-cfgs" / "SM86_RTX3070"]
        assert sim.config_dirs == [str(f) for f in folders]
        assert sim.config_files == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                                    for f in folders for p in f.iterdir()}
        assert set(sim.config_files) == {"gpgpusim.config", "config_ampere_islip.icnt",
                                         "accelwattch_sass_sim.xml", "trace.config"}
        # Accel-Sim's per-kernel statistics beside the built-in model's prediction
        assert [k.kernel_id for k in result.accelsim_kernels] == [1, 2, 3, 5, 6]
        for k in result.accelsim_kernels:
            want = stats_of(k.kernel_id)
            assert k.cycles == cycles_of(k.kernel_id) and k.instructions == 10516 * k.kernel_id
            assert k.occupancy_pct == pytest.approx(want["occupancy_pct"])
            assert k.l1d_hit_rate == pytest.approx(1 - want["l1d_misses"] / want["l1d_accesses"])
            assert k.l2_hit_rate == pytest.approx(1 - want["l2_misses"] / want["l2_accesses"])
            assert k.dram_bw_util == pytest.approx(want["dram_busy"] / want["dram_cmd"])
            assert k.simulated_ns == pytest.approx(k.cycles / A100_CLOCK * 1e3)
            assert k.builtin_ns is not None and k.builtin_ns > 0 and k.builtin_model
            assert k.difference_pct == pytest.approx((k.builtin_ns - k.simulated_ns) / k.simulated_ns * 100)
        assert sim.kernels_listed == 6 and sim.kernels_simulated == 5
        assert sim.cycles_total == sum(cycles_of(k) for k in (1, 2, 3, 5, 6))
        assert result.extrapolation.get(
            "not simulated by Accel-Sim (not traced or skipped): built-in model used") == 1
        kernels = await read_kernels(stack.storage, run_id, sim_id)
        by_id = dict(zip(kernels["kernel_id"].tolist(), range(len(kernels)), strict=True))
        for kid in (1, 2, 3, 5, 6):
            row = by_id[kid]
            assert kernels["sim_cycles"][row] == cycles_of(kid)
            assert kernels["predicted_ns"][row] == pytest.approx(cycles_of(kid) / A100_CLOCK * 1e3)
            assert kernels["extrapolation"][row] & NOT_SIMULATED == 0
        assert kernels["sim_cycles"][by_id[4]] == -1 and kernels["extrapolation"][by_id[4]] & NOT_SIMULATED
        assert np.isnan(kernels["sim_l2_hit_rate"][by_id[4]])
        assert kernels["sim_occupancy_pct"][by_id[5]] == pytest.approx(stats_of(5)["occupancy_pct"])
        assert np.all(kernels["builtin_ns"] > 0)
        assert result.gpu_busy_ns == pytest.approx(float(kernels["predicted_ns"].sum()))
    results = await _get(stack, f"/api/runs/{run_id}/results")
    entry = results["configs"][0]
    assert entry["model"] == "accel-sim" and entry["simulator"]["name"] == "Accel-Sim"
    assert entry["simulator"]["accelsim_config"] == "SM86_RTX3070"
    side = {k["kernel_id"]: k for k in entry["accelsim_kernels"]}
    assert sorted(side) == [1, 2, 3, 5, 6]
    assert side[5]["l2_hit_rate"] == pytest.approx(1 - stats_of(5)["l2_misses"] / stats_of(5)["l2_accesses"])
    assert side[5]["builtin_ns"] > 0 and side[5]["simulated_ns"] == pytest.approx(cycles_of(5) / A100_CLOCK * 1e3)
    page = await _get(stack, f"/api/runs/{run_id}/results/{body['run']['sim_ids'][0]}/kernels")
    assert "sim_cycles" in page["columns"]
    # both replicas (one node) share one copy of the instruction files
    cache = Path(stack.settings.data_dir) / "cache" / "traces" / accel["trace_id"]
    copies = [p for p in cache.iterdir() if p.is_dir()]
    assert len(copies) == 1 and (copies[0] / ".complete").is_file()
    assert sorted(p.name for p in copies[0].glob("kernel-*")) == [f"kernel-{k}.traceg" for k in range(1, 7)]
    for k in range(1, 7):  # decompressed whole (the generated files are two xz streams each)
        original = lzma.decompress((accel["folder"] / f"kernel-{k}.traceg.xz").read_bytes())
        assert (copies[0] / f"kernel-{k}.traceg").read_bytes() == original
    assert (copies[0] / "kernelslist.g").read_text().splitlines()[1:] == [
        f"kernel-{k}.traceg" for k in range(1, 7)]


async def test_configs_say_where_accelsim_runs_and_runs_elsewhere_are_refused(accel: dict[str, Any]) -> None:
    from services.api import run as run_api

    stack: TracesStack = accel["stack"]
    listing = await _get(stack, "/api/configs")
    can = {c["id"]: c for c in listing["configs"]}
    served = {c["id"]: c["accelsim_config"] for c in listing["configs"] if c["accelsim"]}
    assert served["SM80_A100"] == {"name": "SM86_RTX3070", "relation": "closest",
                                   "reason": served["SM80_A100"]["reason"]}
    assert served["SM61_GTX1080TI"]["name"] == "SM6_TITANX" and served["SM61_GTX1080TI"]["relation"] == "same chip"
    assert served["SM70_V100_PCIE_32GB"]["name"] == "SM7_QV100" and served["SM90_H200"]["name"] == "SM90_H100"
    assert listing["accelsim"]["configs"] == sorted(served)
    assert listing["accelsim"]["config_names"] == ["SM6_TITANX", "SM7_QV100", "SM86_RTX3070", "SM90_H100"]
    assert listing["accelsim"]["layout"] == "checkout"
    assert can["SM80_A100"]["accelsim"] and "accel-sim" in can["SM80_A100"]["models"]
    assert not can["SM100_B200"]["accelsim"] and "accel-sim" not in can["SM100_B200"]["models"]
    none = can["SM100_B200"]["accelsim_config"]
    assert none["name"] is None and "no Accel-Sim config pairs" in none["reason"]
    t4 = can["SM75_T4"]["accelsim_config"]
    assert t4["name"] is None and "SM75_RTX2060 (closest)" in t4["reason"]
    one = await _get(stack, "/api/configs/A100")
    assert one["config"]["accelsim"] is True
    status, err = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM80_A100", "SM100_B200"],
                                          "model": "accel-sim"})
    assert status == 400, err
    assert "CASCADE_ACCELSIM_CONFIGS" in err["message"] and "SM100_B200" in err["message"]
    assert ", ".join(sorted(served)) in err["message"]
    # a timeline-only trace has no instruction files for Accel-Sim
    timeline = await publish_trace(stack.bus, stack.storage, "tr-accel-timeline", generate_timeline(40))
    status, err = await _post_run(stack, {"trace_id": timeline.id, "configs": ["SM80_A100"],
                                          "model": "accel-sim"})
    assert status == 400 and "timeline-only" in err["message"], err
    status, ok = await _post_run(stack, {"trace_id": timeline.id, "configs": ["SM100_B200"], "model": "scaled"})
    assert status == 202, ok
    # an api whose CASCADE_ACCELSIM_BIN is unset refuses accel-sim everywhere, naming the setting
    port = free_port()
    await stack.start("api-nobin", run_api, http_port=port, accelsim_bin="")
    other = f"http://127.0.0.1:{port}"
    listing = await wait_until(lambda: _get(stack, "/api/configs", other), 20,
                               what=f"the second api at {other} to answer", interval=0.1,
                               ignore=(aiohttp.ClientError,))
    try:
        assert listing["accelsim"]["configs"] == [] and not any(c["accelsim"] for c in listing["configs"])
        assert any("CASCADE_ACCELSIM_BIN is not set" in p for p in listing["accelsim"]["problems"])
        status, err = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM80_A100"],
                                              "model": "accel-sim"}, other)
        assert status == 400 and "CASCADE_ACCELSIM_BIN is not set" in err["message"], err
    finally:
        await stack.stop("api-nobin")


async def test_crash_fails_the_sim_with_the_output_tail(accel: dict[str, Any]) -> None:
    stack: TracesStack = accel["stack"]
    status, body = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM90_H100"],
                                           "model": "accel-sim"})
    assert status == 202, body
    detail = await _wait_run(stack, body["id"], {"failed", "completed", "cancelled"})
    assert detail["run"]["state"] == "failed"
    sim = detail["sims"][0]
    assert sim["state"] == "failed" and sim["attempts"] == 1
    assert "accel-sim was killed by signal 11 after 2 kernels" in sim["error"]
    assert "deadlock detected" in sim["error"]  # the tail of its output


async def test_a_run_with_one_config_crashed_and_one_completed_is_partial(accel: dict[str, Any]) -> None:
    """One config's Accel-Sim crashes (the H100's), the other's completes: the run reads
    ``partial``, each config with its own state, the completed one's results kept."""
    stack: TracesStack = accel["stack"]
    status, body = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM90_H100", "SM80_A100"],
                                           "model": "accel-sim"})
    assert status == 202, body
    detail = await _wait_run(stack, body["id"], {"failed", "completed", "partial", "cancelled"})
    assert detail["run"]["state"] == "partial", detail["run"]
    assert "1 of 2 sims failed" in detail["run"]["error"]
    by_config = {s["config"]: s["state"] for s in detail["sims"]}
    assert by_config == {"SM90_H100": "failed", "SM80_A100": "completed"}, by_config
    async with aiohttp.ClientSession() as session, session.get(f"{stack.base_url}/api/runs/{body['id']}/results") as r:
        results = await r.json()
    states = {c["config"]: c["state"] for c in results["configs"]}
    assert states["SM80_A100"] == "completed" and states["SM90_H100"] != "completed", states
    events = await _sse(f"{stack.base_url}/api/runs/{body['id']}/events")
    assert events[-1]["event"] == "run" and events[-1]["data"]["state"] == "partial", events[-2:]


async def _wait_pids(pids: Path, before: set[int], timeout: float = 30) -> list[int]:
    """The hanging stand-in's and its child's pids (files under ``pids``, not in ``before``)."""

    def started() -> list[int]:
        alive = [p for p in pids_alive(pids) if p not in before]
        return alive if len(alive) >= 2 else []

    return await wait_until(started, timeout, what=f"the hanging stand-in and its child ({pids})",
                            interval=0.1)


async def _wait_gone(pids: Path, timeout: float = 15) -> None:
    """Every process recorded under ``pids`` has exited."""
    try:
        await wait_until(lambda: not pids_alive(pids), timeout, what=f"every stand-in process to exit ({pids})",
                         interval=0.1)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; still alive: {pids_alive(pids)}") from None


async def test_cancel_kills_the_simulators_process_group(accel: dict[str, Any]) -> None:
    stack: TracesStack = accel["stack"]
    assert pids_alive(accel["pids"]) == []
    status, body = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM70_V100_PCIE_32GB"],
                                           "model": "accel-sim"})
    assert status == 202, body
    run_id = body["id"]
    await _wait_pids(accel["pids"], set())
    await wait_for_kv(stack.bus, subjects.KV_SIMS, body["run"]["sim_ids"][0], lambda s: s.kernels_done >= 1,
                      type_=SimRecord, timeout=30)  # kernel progress from the stand-in
    async with aiohttp.ClientSession() as s, s.post(
            f"{stack.base_url}/api/runs/{run_id}/cancel", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        assert r.status == 202
    detail = await _wait_run(stack, run_id, {"cancelled", "failed", "completed"})
    assert detail["run"]["state"] == "cancelled"
    await _wait_gone(accel["pids"])


async def test_sim_timeout_kills_the_simulators_process_group(accel: dict[str, Any]) -> None:
    stack: TracesStack = accel["stack"]
    await _wait_gone(accel["pids"])
    status, body = await _post_run(stack, {"trace_id": accel["trace_id"], "configs": ["SM70_V100_PCIE_32GB"],
                                           "model": "accel-sim"})
    assert status == 202, body
    await _wait_pids(accel["pids"], set())
    detail = await _wait_run(stack, body["id"], {"failed", "completed", "cancelled"},
                             timeout=SIM_TIMEOUT_S + 30)
    assert detail["run"]["state"] == "failed"
    error = detail["sims"][0]["error"]
    assert "CASCADE_SIM_TIMEOUT_S" in error, error
    await _wait_gone(accel["pids"])


async def test_instruction_files_fetched_once_per_node_from_any_listing(storage: Any, tmp_path: Path) -> None:
    from cascade.errors import ValidationError
    from cascade.platform.accelsim import fetch_instruction_trace
    from cascade.platform.keys import raw_key

    cache = tmp_path / "cache"
    # raw tracer output only: Accel-Sim needs post-processed .traceg files
    await storage.put_bytes(raw_key("tr-raw", "kernel-1.trace"), b"-kernel name = k\n")
    await storage.put_bytes(raw_key("tr-raw", "kernelslist"), b"kernel-1.trace\n")
    with pytest.raises(ValidationError, match="post-traces-processing"):
        await fetch_instruction_trace(storage, "tr-raw", "instructions", cache)
    with pytest.raises(ValidationError, match="timeline-only"):
        await fetch_instruction_trace(storage, "tr-raw", "timeline", cache)
    # a plain kernelslist naming .traceg.xz files, two xz streams per file
    body = b"-kernel name = _Z1kv\n-kernel id = 2\n" + b"#BEGIN_TB\n" * 1000
    packed = lzma.compress(body[:30]) + lzma.compress(body[30:])
    await storage.put_bytes(raw_key("tr-xz", "kernel-2.traceg.xz"), packed)
    await storage.put_bytes(raw_key("tr-xz", "kernel-1.traceg"), b"-kernel name = _Z1jv\n")
    await storage.put_bytes(raw_key("tr-xz", "kernelslist"),
                            b"MemcpyHtoD,0x7f0000000000,64\nkernel-1.trace\n/old/dir/kernel-2.traceg.xz\n")
    first, again = await asyncio.gather(
        fetch_instruction_trace(storage, "tr-xz", "both", cache),
        fetch_instruction_trace(storage, "tr-xz", "both", cache))
    assert sorted([first.downloaded, again.downloaded]) == [False, True]  # one download per node
    assert first.folder == again.folder and first.kernel_ids == [1, 2]
    folder = Path(first.folder)
    assert (folder / "kernel-2.traceg").read_bytes() == body
    assert (folder / "kernelslist.g").read_text() == (
        "MemcpyHtoD,0x7f0000000000,64\nkernel-1.traceg\nkernel-2.traceg\n")
    assert (await fetch_instruction_trace(storage, "tr-xz", "both", cache)).downloaded is False


async def test_real_trace_on_three_configs_reproduces_the_cycles_printed_by_hand(
        accel: dict[str, Any], tmp_path: Path) -> None:
    """matrixmul-32x32-sm61 through the api on three GPUs served by three stock-layout config
    folders; each result has the cycles the binary prints when run by hand on that folder."""
    import subprocess

    from cascade.engine.accelsim import parse_accelsim_output
    from cascade.platform.accelsim import discover, stage_config

    stack: TracesStack = accel["stack"]
    summary = await run_import(argparse.Namespace(
        path=MATRIXMUL, app=stack.base_url, token=TOKEN, name=None, source_gpu="SM61_GTX1080TI",
        kind=None, workload="matrixmul 32x32", trace_id=None, state_file=tmp_path / "import.json",
        no_seal=False, wait=90.0, quiet=True))
    assert summary["state"] == "ready", summary
    gpus = ["SM61_GTX1080TI", "SM80_A100", "SM90_H100"]
    status, body = await _post_run(stack, {"trace_id": summary["trace_id"], "configs": gpus,
                                           "model": "accel-sim"})
    assert status == 202, body
    detail = await _wait_run(stack, body["id"], {"completed", "failed", "cancelled"}, timeout=90)
    assert detail["run"]["state"] == "completed", detail
    setup = discover(stack.settings.accelsim_bin, stack.settings.accelsim_configs)
    seen = set()
    for sim_id in body["run"]["sim_ids"]:
        result = await read_result(stack.storage, body["id"], sim_id)
        gpu = setup.configs[result.config]
        by_hand_dir = tmp_path / f"by-hand-{result.config}"
        by_hand_dir.mkdir()
        stage_config(gpu.paths, by_hand_dir)
        printed = subprocess.run([stack.settings.accelsim_bin, "-trace", str(MATRIXMUL / "kernelslist.g"),
                                  "-config", "gpgpusim.config", "-config", "trace.config"],
                                 cwd=by_hand_dir, capture_output=True, text=True, timeout=60, check=True)
        [by_hand] = parse_accelsim_output(printed.stdout)
        [k] = result.accelsim_kernels
        assert (k.kernel_id, k.cycles, k.instructions) == (1, by_hand.cycles, by_hand.instructions)
        assert k.name == by_hand.name == "_Z8mult_gpuIfEvPT_S1_S1_ii"
        assert result.simulator is not None and result.simulator.accelsim_config == gpu.name
        assert result.simulator.core_clock_mhz == CHECKOUT_CLOCK_MHZ[gpu.name]
        assert k.simulated_ns == pytest.approx(by_hand.cycles / CHECKOUT_CLOCK_MHZ[gpu.name] * 1e3)
        assert result.gpu_busy_ns == pytest.approx(k.simulated_ns)
        seen.add(gpu.name)
    assert seen == {"SM6_TITANX", "SM86_RTX3070", "SM90_H100"}
