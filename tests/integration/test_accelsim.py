"""The accel-sim backend with a stand-in accel-sim.out process, without servers: discovery (an
Accel-Sim checkout's layout merged per config name, the config-name table and its override,
refusals), the stand-in failing as Accel-Sim fails on a missing config or include, the
streaming runner (progress while it runs, crash, hang, cancel, timeout killing the whole
process group, per-kernel statistics from run-long counters) and the engine's accel-sim model
running a binary. The pure pieces (the real log parsed, golden, statistics included; the
config-map setting; unsimulated kernels falling back, flagged) are unit tests:
``tests/unit/test_accelsim_pieces.py``."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cascade.engine import predict
from cascade.engine.accelsim import parse_accelsim_output
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
from tests.support.accelsim_helpers import (
    ACCELSIM_CFGS,
    CHECKOUT,
    CHECKOUT_CLOCK_MHZ,
    GPGPUSIM_CFGS,
    REAL_LOG,
    copy_checkout,
    make_binary,
    make_config,
    pids_alive,
)
from tests.support.accelsim_standin import DRAM_CHANNELS, cycles_of, stats_of
from tests.support.wait import wait_until, wait_until_blocking


def _trace(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for kid in range(1, n + 1):
        (folder / f"kernel-{kid}.traceg").write_text(
            f"-kernel name = _Z6kernel{kid}Pf\n-kernel id = {kid}\n-grid dim = (4,1,1)\n")
    lines = ["MemcpyHtoD,0x00007f3a00000000,4096", *(f"kernel-{k}.traceg" for k in range(1, n + 1))]
    (folder / "kernelslist.g").write_text("\n".join(lines) + "\n")
    return folder / "kernelslist.g"


# --------------------------------------------------------------------------- discovery


def test_discovery_and_refusals_name_the_settings(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    root = tmp_path / "configs"
    make_config(root, "SM80_A100")
    make_config(root, "H100", clock_mhz=1755.0)  # an alias resolves to the spec id
    (root / "SM90_H200").mkdir()
    (root / "SM90_H200" / "gpgpusim.config").write_text("-gpgpu_n_clusters 66\n")
    setup = discover(str(binary), str(root), hashes=True)
    # SM80_A100 is Accel-Sim's GA100 config too: every A100 board runs on it, the other Ampere
    # and the Ada boards as the closest config present; the folder named after an alias only
    # its GPU
    a100s = {"SM80_A100", "SM80_A100_SXM_40GB", "SM80_A100_PCIE_40GB", "SM80_A100_PCIE_80GB"}
    assert a100s | {"SM90_H100", "SM86_A10", "SM89_L40S"} <= set(setup.runnable())
    assert not {"SM90_H200", "SM90_GH200", "SM70_V100_SXM2", "SM100_B200"} & set(setup.runnable())
    assert {setup.configs[g].relation for g in a100s} == {"same chip"}
    assert setup.configs["SM86_A10"].relation == "closest"
    assert setup.unrunnable["SM90_H200"].endswith("has no trace.config, which Accel-Sim's "
                                                  "trace-driven mode needs")
    can = ", ".join(setup.runnable())
    assert setup.configs["SM90_H100"].core_clock_mhz == 1755.0
    assert set(setup.configs["SM80_A100"].files) == {"gpgpusim.config", "trace.config",
                                                     "config_test_islip.icnt"}
    assert setup.problems == []
    require(setup, ["SM80_A100", "SM90_H100"])
    with pytest.raises(ValidationError, match=CONFIGS_VAR) as err:
        require(setup, ["SM80_A100", "SM90_H200"])
    assert "SM90_H200" in str(err.value) and f"can run accel-sim: {can}" in str(err.value)
    unset = discover("", str(root))
    assert unset.runnable() == []
    with pytest.raises(ValidationError, match=f"{BIN_VAR} is not set"):
        require(unset, ["SM80_A100"])
    with pytest.raises(ValidationError, match="does not exist"):
        require(discover(str(tmp_path / "nope"), str(root)), ["SM80_A100"])
    with pytest.raises(ValidationError, match="timeline-only"):
        refuse_timeline_trace("tr-1", "timeline")
    refuse_timeline_trace("tr-1", "instructions")


def test_checkout_layout_is_merged_per_config_name_and_paired_with_gpus(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    setup = discover(str(binary), str(CHECKOUT), hashes=True)
    assert setup.layout == "checkout" and setup.problems == []
    assert setup.available == ["SM6_TITANX", "SM7_QV100", "SM86_RTX3070", "SM90_H100"]
    gtx = setup.configs["SM61_GTX1080TI"]
    assert (gtx.name, gtx.relation, gtx.core_clock_mhz) == ("SM6_TITANX", "same chip", 1417.0)
    assert "GP102" in gtx.reason
    gdir = CHECKOUT.joinpath(*GPGPUSIM_CFGS, "SM6_TITANX")
    adir = CHECKOUT.joinpath(*ACCELSIM_CFGS, "SM6_TITANX")
    assert gtx.folders == [str(gdir), str(adir)]
    expected = {p.name: p for p in [*gdir.iterdir(), *adir.iterdir()]}
    assert set(expected) == {"gpgpusim.config", "config_pascal_islip.icnt", "accelwattch_sass_sim.xml",
                             "trace.config"}
    assert gtx.paths == {k: str(v) for k, v in expected.items()}
    assert gtx.files == {k: hashlib.sha256(v.read_bytes()).hexdigest() for k, v in expected.items()}
    a100 = setup.serving("SM80_A100")
    assert (a100.config, a100.relation) == ("SM86_RTX3070", "closest")
    assert setup.serving("SM90_H200").config == "SM90_H100"
    assert setup.serving("SM70_V100_SXM2").config == "SM7_QV100"
    b200 = setup.serving("SM100_B200")
    assert b200.config is None and "no Accel-Sim config pairs" in b200.reason
    t4 = setup.serving("SM75_T4")  # paired in the table, its config not in this checkout
    assert t4.config is None and "SM75_RTX2060 (closest)" in t4.reason and str(CHECKOUT) in t4.reason
    with pytest.raises(ValidationError, match="SM75_T4: pairs with SM75_RTX2060") as err:
        require(setup, ["SM75_T4"])
    assert "CASCADE_ACCELSIM_CONFIG_MAP" in str(err.value)
    # the setting replaces a pairing, or says a GPU has none
    moved = discover(str(binary), str(CHECKOUT), config_map=["SM80_A100=SM90_H100", "SM90_H200="])
    assert (moved.serving("SM80_A100").config, moved.serving("SM80_A100").relation) == ("SM90_H100", "setting")
    assert moved.serving("SM90_H200").config is None and moved.serving("SM90_H100").config == "SM90_H100"
    bad = discover(str(binary), str(CHECKOUT), config_map=["SM80_A100"])
    assert any("CASCADE_ACCELSIM_CONFIG_MAP" in p and "GPU_ID=ACCELSIM_CONFIG" in p for p in bad.problems)
    # a folder named after a Cascade GPU (or alias) wins over the table for that GPU
    root = tmp_path / "flat"
    make_config(root, "GTX 1080 Ti", clock_mhz=1500.0)
    shutil.copytree(gdir, root / "SM6_TITANX")
    (root / "SM6_TITANX" / "trace.config").write_text((adir / "trace.config").read_text())
    flat = discover(str(binary), str(root))
    assert flat.layout == "folders"
    assert (flat.configs["SM61_GTX1080TI"].name, flat.configs["SM61_GTX1080TI"].relation) == (
        "GTX 1080 Ti", "folder")
    assert flat.configs["SM61_GTX1080"].name == "SM6_TITANX"
    # a checkout whose gpgpu-sim is not cloned says so
    half = tmp_path / "half"
    shutil.copytree(CHECKOUT.joinpath(*ACCELSIM_CFGS), half.joinpath(*ACCELSIM_CFGS))
    lone = discover(str(binary), str(half))
    assert lone.configs == {} and any("gpgpu-sim cloned" in p for p in lone.problems)


def _run_standin(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = make_binary(cwd.parent / "bin")
    return subprocess.run([str(binary), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_standin_opens_configs_and_includes_relative_to_its_cwd_like_accelsim(tmp_path: Path) -> None:
    kl = _trace(tmp_path / "trace", 1)
    gdir = CHECKOUT.joinpath(*GPGPUSIM_CFGS, "SM6_TITANX")
    work = tmp_path / "work"
    work.mkdir()
    missing = _run_standin(work, "-trace", str(kl), "-config", "gpgpusim.config")
    assert missing.returncode == 1
    assert "GPGPU-Sim ** ERROR: Cannot open config file 'gpgpusim.config'" in missing.stderr
    # gpgpusim.config by absolute path, its interconnect file not in the working directory
    lone = _run_standin(work, "-trace", str(kl), "-config", str(gdir / "gpgpusim.config"))
    assert lone.returncode == 255  # intersim's exit(-1)
    assert lone.stderr.strip() == "Could not open configuration file config_pascal_islip.icnt"
    assert "-gpgpu_clock_domains 1417.0:1417.0:1417.0:2500.0 #" in lone.stdout
    (work / "config_pascal_islip.icnt").symlink_to(gdir / "config_pascal_islip.icnt")
    ok = _run_standin(work, "-trace", str(kl), "-config", str(gdir / "gpgpusim.config"))
    assert ok.returncode == 0, ok.stderr
    assert parse_accelsim_output(ok.stdout)[0].cycles == cycles_of(1)


async def test_runs_go_through_the_stock_layout_with_relative_includes(tmp_path: Path) -> None:
    """The working directory holds every file of the merged config folder; the stand-in (like
    Accel-Sim) opens config_pascal_islip.icnt relative to it. Fails where only gpgpusim.config
    and trace.config are passed by path."""
    binary = make_binary(tmp_path / "bin")
    checkout = copy_checkout(tmp_path / "accel-sim-framework", SM6_TITANX={"pace_s": 0.01})
    setup = discover(str(binary), str(checkout), hashes=True)
    gpu = setup.configs["SM61_GTX1080TI"]
    kl = _trace(tmp_path / "trace", 3)
    out = await run_accelsim(str(binary), str(kl), gpu, tmp_path / "work")
    assert [k.cycles for k in out.kernels] == [cycles_of(i) for i in (1, 2, 3)]
    assert out.kernels[0].core_clock_mhz == CHECKOUT_CLOCK_MHZ["SM6_TITANX"]
    staged = tmp_path / "work"
    assert sorted(p.name for p in staged.iterdir()) == sorted(gpu.paths)
    assert (staged / "config_pascal_islip.icnt").read_text() == Path(gpu.paths["config_pascal_islip.icnt"]).read_text()
    with pytest.raises(AccelSimError, match="exited with 255 after 0 kernels") as err:
        await _unstaged(str(binary), str(kl), gpu, tmp_path)
    assert "Could not open configuration file config_pascal_islip.icnt" in str(err.value)


async def _unstaged(binary: str, kl: str, gpu: object, tmp_path: Path) -> None:
    """What the simulator did before: the two config files by path in an empty directory."""
    from cascade.platform.accelsim import accelsim_argv

    work = tmp_path / "unstaged"
    work.mkdir()
    args = accelsim_argv(binary, kl, [gpu.gpgpusim_config, gpu.trace_config])  # type: ignore[attr-defined]
    proc = await asyncio.create_subprocess_exec(*args, cwd=work, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    text = (await proc.communicate())[0].decode()
    if proc.returncode:
        raise AccelSimError(f"accel-sim exited with {proc.returncode} after 0 kernels; last output:\n{text}")


async def test_statistics_per_kernel_from_run_long_counters(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    checkout = copy_checkout(tmp_path / "co", SM90_H100={"pace_s": 0.01})
    gpu = discover(str(binary), str(checkout)).configs["SM90_H100"]
    kl = _trace(tmp_path / "trace", 4)
    out = await run_accelsim(str(binary), str(kl), gpu, tmp_path / "work")
    assert [s.kernel_id for s in out.statistics] == [1, 2, 3, 4]
    for st in out.statistics:
        want = stats_of(st.kernel_id or 0)
        assert st.occupancy_pct == pytest.approx(want["occupancy_pct"])
        assert st.l1d_accesses == want["l1d_accesses"]
        assert st.l1d_hit_rate == pytest.approx(1 - want["l1d_misses"] / want["l1d_accesses"])
        assert st.l2_hit_rate == pytest.approx(1 - want["l2_misses"] / want["l2_accesses"])
        assert st.dram_bw_util == pytest.approx(want["dram_busy"] / want["dram_cmd"])
        assert st.ipc == pytest.approx(st.instructions / st.cycles, rel=1e-3)
    # the printed counters are sums over the run: the last kernel's rate is not its own
    last = stats_of(4)
    assert DRAM_CHANNELS == 2 and last["l1d_misses"] / last["l1d_accesses"] != sum(
        stats_of(k)["l1d_misses"] for k in (1, 2, 3, 4)) / sum(stats_of(k)["l1d_accesses"] for k in (1, 2, 3, 4))


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
    text = REAL_LOG.read_text()
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


def test_cascade_gpus_names_the_accelsim_config_of_every_gpu(tmp_path: Path) -> None:
    from cascade.gpus import default_registry
    from cascade.gpus.accelsim_names import stock_pairings

    PAIRINGS = stock_pairings(default_registry())

    binary = make_binary(tmp_path / "bin")
    env = {**os.environ, "CASCADE_ACCELSIM_BIN": str(binary), "CASCADE_ACCELSIM_CONFIGS": str(CHECKOUT),
           "CASCADE_ACCELSIM_CONFIG_MAP": "SM75_T4=SM7_QV100"}
    env.pop("CASCADE_CONFIG", None)
    listed = subprocess.run([sys.executable, "-m", "programs.cli", "gpus", "--json"], env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    import json

    by_id = {g["id"]: g for g in json.loads(listed.stdout)}
    assert set(by_id) == set(default_registry().ids())
    present = {"SM6_TITANX", "SM7_QV100", "SM86_RTX3070", "SM90_H100"}
    for gpu_id in {p.gpu_id for p in PAIRINGS} - {"SM75_T4"}:
        first = next((p for p in PAIRINGS if p.gpu_id == gpu_id and p.config in present), None)
        got = by_id[gpu_id]["accelsim_config"]
        if first is None:  # its stock config is not in this checkout: it says why
            assert got["config"] is None and "not found in CASCADE_ACCELSIM_CONFIGS" in got["reason"]
        else:
            assert (got["config"], got["relation"], got["reason"]) == (first.config, first.relation, first.reason)
            assert by_id[gpu_id]["accelsim"] and "accel-sim" in by_id[gpu_id]["models"]
    assert by_id["SM75_T4"]["accelsim_config"]["config"] == "SM7_QV100"  # the setting
    assert by_id["SM75_T4"]["accelsim_config"]["relation"] == "setting"
    assert by_id["SM100_B200"]["accelsim_config"]["config"] is None and not by_id["SM100_B200"]["accelsim"]
    table = subprocess.run([sys.executable, "-m", "programs.cli", "gpus"], env=env, capture_output=True,
                           text=True, timeout=120, check=True).stdout
    row = next(line for line in table.splitlines() if "SM61_GTX1080TI" in line)
    assert "SM6_TITANX (same chip)" in row
    assert "none" in next(line for line in table.splitlines() if "SM100_B200" in line)


async def test_a_missing_include_fails_naming_the_file_and_the_folder(tmp_path: Path) -> None:
    binary = make_binary(tmp_path / "bin")
    checkout = copy_checkout(tmp_path / "co", SM7_QV100={"pace_s": 0.01})
    gdir = checkout.joinpath(*GPGPUSIM_CFGS, "SM7_QV100")
    (gdir / "config_volta_islip.icnt").unlink()
    gpu = discover(str(binary), str(checkout), hashes=True).configs["SM70_V100_SXM2"]
    assert "config_volta_islip.icnt" not in gpu.files
    with pytest.raises(AccelSimError, match="exited with 255 after 0 kernels") as err:
        await run_accelsim(str(binary), str(_trace(tmp_path / "trace", 1)), gpu, tmp_path / "work")
    text = str(err.value)
    assert f"config_volta_islip.icnt, named by the config relative to Accel-Sim's working directory, is not in the config folder {gdir} or {checkout.joinpath(*ACCELSIM_CFGS, 'SM7_QV100')}: add it there" in text
    assert "Could not open configuration file config_volta_islip.icnt" in err.value.tail
