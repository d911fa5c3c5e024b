"""The accel-sim backend without servers: the real log (golden), discovery and refusals, the
streaming runner with a stand-in accel-sim.out (progress while it runs, crash, hang, cancel,
timeout killing the whole process group), and unsimulated kernels falling back, flagged."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cascade.engine import predict
from cascade.engine.accelsim import (
    AccelSimConfig,
    AccelSimOutputParser,
    parse_accelsim_output,
)
from cascade.engine.perf import NOT_SIMULATED
from cascade.errors import AccelSimError, JobTimeoutError, ValidationError
from cascade.kerneltable import KernelTable
from cascade.platform.accelsim import (
    BIN_VAR,
    CONFIGS_VAR,
    discover,
    refuse_timeline_trace,
    require,
    run_accelsim,
    simulate,
)
from tests.support.accelsim_helpers import make_binary, make_config, pids_alive
from tests.support.accelsim_standin import cycles_of
from tests.support.paths import SHARED_DATA
from tests.support.wait import wait_until, wait_until_blocking

DATA = SHARED_DATA
LOG = DATA / "accelsim-log" / "vectoradd-100-32.accelsim_log.txt"


def _trace(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for kid in range(1, n + 1):
        (folder / f"kernel-{kid}.traceg").write_text(
            f"-kernel name = _Z6kernel{kid}Pf\n-kernel id = {kid}\n-grid dim = (4,1,1)\n")
    lines = ["MemcpyHtoD,0x00007f3a00000000,4096", *(f"kernel-{k}.traceg" for k in range(1, n + 1))]
    (folder / "kernelslist.g").write_text("\n".join(lines) + "\n")
    return folder / "kernelslist.g"


# --------------------------------------------------------------------------- golden log


def test_real_log_parsed_line_by_line_golden() -> None:
    parser = AccelSimOutputParser(str(LOG))
    completed_at = []
    with LOG.open() as fh:
        for line in fh:
            k = parser.feed(line.rstrip("\n"))
            if k is not None:
                completed_at.append((parser.lineno, k))
    assert parser.finish() is None
    assert len(completed_at) == 1
    lineno, k = completed_at[0]
    assert lineno == 7696  # the gpu_total_sim_rate line closes the kernel's block
    assert (k.uid, k.name, k.cycles, k.instructions) == (1, "_Z6vecAddIfEvPT_S1_S1_i", 1282, 10516)
    assert k.core_clock_mhz == 1607.0 and k.ipc == pytest.approx(8.2028)
    assert k.sim_rate_ips == 10516 and k.kernel_id == 1  # from "Processing kernel .../kernel-1.traceg"
    assert k.duration_ns == pytest.approx(1282 / 1607.0 * 1e3)
    assert parse_accelsim_output(LOG.read_text(), str(LOG)) == [k]


def test_statistics_without_a_clock_name_the_line() -> None:
    from cascade.errors import TraceFormatError

    text = "kernel_name = k\nkernel_launch_uid = 1\ngpu_sim_cycle = 10\ngpu_sim_insn = 5\ngpu_total_sim_rate=5\n"
    with pytest.raises(TraceFormatError, match="gpgpu_clock_domains"):
        parse_accelsim_output(text, "out.log")
    assert parse_accelsim_output(text, "out.log", core_clock_mhz=1000.0)[0].duration_ns == 10.0


# --------------------------------------------------------------------------- discovery


def test_discovery_and_refusals_name_the_settings(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    root = tmp_path / "configs"
    make_config(root, "SM80_A100")
    make_config(root, "H100", clock_mhz=1755.0)  # an alias resolves to the spec id
    (root / "SM90_H200").mkdir()
    (root / "SM90_H200" / "gpgpusim.config").write_text("-gpgpu_n_clusters 66\n")
    setup = discover(str(binary), str(root), hashes=True)
    assert setup.runnable() == ["SM80_A100", "SM90_H100"]
    assert setup.configs["SM90_H100"].core_clock_mhz == 1755.0
    assert set(setup.configs["SM80_A100"].files) == {"gpgpusim.config", "trace.config",
                                                     "config_test_islip.icnt"}
    assert any("SM90_H200" in p and "trace.config" in p for p in setup.problems)
    require(setup, ["SM80_A100", "SM90_H100"])
    with pytest.raises(ValidationError, match=CONFIGS_VAR) as err:
        require(setup, ["SM80_A100", "SM90_H200"])
    assert "SM90_H200" in str(err.value) and "can run accel-sim: SM80_A100, SM90_H100" in str(err.value)
    unset = discover("", str(root))
    assert unset.runnable() == []
    with pytest.raises(ValidationError, match=f"{BIN_VAR} is not set"):
        require(unset, ["SM80_A100"])
    with pytest.raises(ValidationError, match="does not exist"):
        require(discover(str(tmp_path / "nope"), str(root)), ["SM80_A100"])
    with pytest.raises(ValidationError, match="timeline-only"):
        refuse_timeline_trace("tr-1", "timeline")
    refuse_timeline_trace("tr-1", "instructions")


# --------------------------------------------------------------------------- the runner


async def test_progress_arrives_while_accelsim_runs(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.3)
    kl = _trace(tmp_path / "trace", 4)
    pid: list[int] = []
    seen: list[tuple[int, float, bool]] = []

    async def on_kernel(k: object) -> None:
        alive = Path(f"/proc/{pid[0]}").exists()
        seen.append((k.uid, time.perf_counter(), alive))  # type: ignore[attr-defined]

    t0 = time.perf_counter()
    out = await run_accelsim(str(binary), str(kl), [str(cfg / "gpgpusim.config"), str(cfg / "trace.config")],
                             tmp_path / "work", on_kernel=on_kernel, on_start=pid.append)
    end = time.perf_counter()
    assert [u for u, _, _ in seen] == [1, 2, 3, 4]
    assert all(alive for _, _, alive in seen[:3])  # reported before the simulator exited
    assert seen[0][1] - t0 < (end - t0) * 0.6  # the first kernel came early, not at exit
    assert [k.cycles for k in out.kernels] == [cycles_of(i) for i in (1, 2, 3, 4)]
    assert [k.kernel_id for k in out.kernels] == [1, 2, 3, 4]
    assert out.kernels[0].core_clock_mhz == 1410.0 and out.first_line_s is not None
    assert (tmp_path / "work").is_dir()


async def test_crash_mid_way_fails_with_the_tail(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.05, mode="crash", after=2)
    kl = _trace(tmp_path / "trace", 5)
    got: list[int] = []

    async def on_kernel(k: object) -> None:
        got.append(k.uid)  # type: ignore[attr-defined]

    with pytest.raises(AccelSimError, match="killed by signal 11 after 2 kernels") as err:
        await run_accelsim(str(binary), str(kl), [str(cfg / "gpgpusim.config")], tmp_path / "w",
                           on_kernel=on_kernel)
    assert got == [1, 2]
    assert "deadlock detected" in str(err.value) and err.value.returncode == -11


async def test_nonzero_exit_fails(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.01, mode="exit", after=1)
    kl = _trace(tmp_path / "trace", 3)
    with pytest.raises(AccelSimError, match="exited with 3 after 1 kernels") as err:
        await run_accelsim(str(binary), str(kl), [str(cfg / "gpgpusim.config")], tmp_path / "w")
    assert "unsupported opcode" in err.value.tail


async def _wait_for_pids(pids_dir: Path, timeout: float = 10.0) -> list[int]:
    """The stand-in's and its child's pids, once both are recorded under ``pids_dir``."""
    return await wait_until(lambda: alive if len(alive := pids_alive(pids_dir)) >= 2 else [], timeout,
                            what=f"the stand-in to start its child ({pids_dir})")


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.05, mode="hang", after=1,
                      pids_dir=pids)
    kl = _trace(tmp_path / "trace", 3)
    t0 = time.perf_counter()
    task = asyncio.create_task(run_accelsim(str(binary), str(kl), [str(cfg / "gpgpusim.config")],
                                            tmp_path / "w", timeout_s=2.0))
    assert len(await _wait_for_pids(pids)) == 2  # the stand-in and its child
    with pytest.raises(JobTimeoutError, match="ran past 2 s.*process group"):
        await task
    assert time.perf_counter() - t0 < 2.0 + 4.0
    assert pids_alive(pids) == []


async def test_cancel_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.05, mode="hang", after=0,
                      pids_dir=pids)
    kl = _trace(tmp_path / "trace", 2)
    task = asyncio.create_task(run_accelsim(str(binary), str(kl), [str(cfg / "gpgpusim.config")],
                                            tmp_path / "w"))
    alive = await _wait_for_pids(pids)
    assert len(alive) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pids_alive(pids) == []


def test_blocking_predict_runs_the_binary_without_an_event_loop(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.01, skip="2")
    _trace(tmp_path / "trace", 3)
    table = KernelTable.from_rows([{"name": f"k{i}", "kernel_id": i, "bytes": 4096.0} for i in (1, 2, 3)])
    p = predict(table, "SM80_A100", model="accel-sim", config=simulate(
        str(binary), str(tmp_path / "trace"), [str(cfg / "gpgpusim.config")]))
    assert p.predicted_ns[[0, 2]] == pytest.approx([cycles_of(1) / 1.41, cycles_of(3) / 1.41])
    assert list(p.models) == ["accel-sim", "analytical", "accel-sim"]


# --------------------------------------------------------------------------- mapping


def test_unsimulated_kernels_use_the_builtin_model_flagged() -> None:
    table = KernelTable.from_rows([{"name": f"k{i}", "kernel_id": i, "bytes": 1e6, "flops": 1e6}
                                   for i in (1, 2, 3, 4)])
    cfg = AccelSimConfig(simulated_cycles={"1": 1410, "3": 2820, "9": 99}, core_clock_mhz=1410.0)
    p = predict(table, "SM80_A100", model="accel-sim", config=cfg)
    assert p.predicted_ns[[0, 2]] == pytest.approx([1000.0, 2000.0])  # cycles at 1410 MHz, exactly
    assert list(p.models) == ["accel-sim", "analytical", "accel-sim", "analytical"]
    assert p.flags is not None
    assert [bool(f & NOT_SIMULATED) for f in p.flags] == [False, True, False, True]
    assert p.extrapolation_reasons[
        "not simulated by Accel-Sim (not traced or skipped): built-in model used"] == 2
    assert np.all(p.predicted_ns[[1, 3]] > 0)


def test_blocking_runner_timeout_kills_the_group(tmp_path: Path) -> None:
    from cascade.platform.accelsim import run_accelsim_blocking

    pids = tmp_path / "pids"
    pids.mkdir()
    binary = make_binary(tmp_path / "bin")
    cfg = make_config(tmp_path / "configs", "SM80_A100", pace_s=0.01, mode="hang", after=1,
                      pids_dir=pids)
    _trace(tmp_path / "trace", 3)
    t0 = time.perf_counter()
    with pytest.raises(JobTimeoutError, match="ran past 1.5 s"):
        run_accelsim_blocking(str(binary), str(tmp_path / "trace"), [str(cfg / "gpgpusim.config")],
                              timeout_s=1.5)
    assert time.perf_counter() - t0 < 6
    assert list(pids.glob("*.pids"))
    wait_until_blocking(lambda: not pids_alive(pids), 3, what=f"the stand-in's process group to exit ({pids})",
                        interval=0.02)


# the engine's accel-sim model running a binary (moved from the engine's unit tests)

def _stand_in(tmp_path: Path) -> Path:
    """A stand-in accel-sim.out printing the real log format for two kernels."""
    text = LOG.read_text()
    head = "\n".join(line for line in text.splitlines() if line.startswith("-gpgpu_clock_domains"))
    body = []
    for uid, cycles in ((1, 1282), (2, 5000)):
        body += ["kernel_name = _Z6vecAddIfEvPT_S1_S1_i ", f"kernel_launch_uid = {uid} ",
                 f"gpu_sim_cycle = {cycles}", "gpu_sim_insn = 10516", "gpu_ipc =       8.2028"]
    script = tmp_path / "accel-sim.out"
    script.write_text(f"#!{sys.executable}\nimport sys\nassert '-trace' in sys.argv\n"
                      f"print({(head + chr(10) + chr(10).join(body))!r})\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_accelsim_model_runs_binary_and_maps_kernels(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "kernelslist.g").write_text("kernel-1.traceg\nkernel-2.traceg\n")
    cfg = simulate(str(_stand_in(tmp_path)), str(trace), [])
    t = KernelTable.from_rows([{"name": "vecAdd", "kernel_id": 1, "bytes": 1200.0},
                               {"name": "vecAdd", "kernel_id": 2, "bytes": 1200.0},
                               {"name": "other", "kernel_id": 3, "bytes": 1e6}])
    p = predict(t, "SM80_A100", model="accel-sim", config=cfg)
    assert p.predicted_ns[:2] == pytest.approx([1282 / 1.607, 5000 / 1.607])
    assert list(p.models) == ["accel-sim", "accel-sim", "analytical"]


def test_accelsim_model_failure_is_reported(tmp_path: Path) -> None:
    from cascade.errors import CascadeError

    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "kernelslist.g").write_text("kernel-1.traceg\n")
    bad = tmp_path / "fail.sh"
    bad.write_text("#!/bin/sh\necho boom\nexit 3\n")
    os.chmod(bad, 0o755)
    with pytest.raises(CascadeError, match="exited with 3"):
        simulate(str(bad), str(trace), [])
