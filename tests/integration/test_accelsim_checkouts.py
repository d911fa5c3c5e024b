"""Accel-Sim as people run it, with the stand-in: a checkout-shaped tree with today's config
folder names (SM80_A100, NVIDIA_A100_80GB_PCIe, SM90_H100, SM90_H200, SM89_RTX4060_LAPTOP,
SM87_ORIN, SM86_RTX3060_MOBILE, the PTX-only SM2_GTX480, Kepler and AMD configs) paired by chip
and architecture; a binary that cannot load GPGPU-Sim's libcudart.so (exit 127, the loader's
line on stderr) reported unavailable with the fix, and started once the library path derived
from the checkout (or the setting) is given; a trace Accel-Sim refuses (``unsupported binary
version: 0``, exit 0, nothing simulated) failing with Accel-Sim's line; ``cascade predict
--model accel-sim`` printing the cycles beside the time."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cascade.errors import AccelSimError, ValidationError
from cascade.gpus import default_registry
from cascade.platform.accelsim import (
    BIN_VAR,
    LIBRARY_VAR,
    discover,
    require,
    run_accelsim,
    simulate,
)
from tests.support.accelsim_helpers import LIB_PARTS, MISSING_SYMBOL, make_checkout
from tests.support.accelsim_standin import cycles_of
from tests.support.paths import SHARED_DATA

MATRIXMUL = SHARED_DATA / "traces" / "matrixmul-32x32-sm61"


def _trace(folder: Path, binary_version: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    version = f"-binary version = {binary_version}\n" if binary_version is not None else ""
    (folder / "kernel-1.traceg").write_text(f"-kernel name = _Z6kernelPf\n-kernel id = 1\n{version}"
                                            "-grid dim = (4,1,1)\n")
    (folder / "kernelslist.g").write_text("kernel-1.traceg\n")
    return folder / "kernelslist.g"


def test_todays_config_folders_pair_by_chip_and_architecture(tmp_path: Path) -> None:
    checkout, binary = make_checkout(tmp_path / "accel-sim-framework")
    setup = discover(str(binary), str(checkout))
    assert setup.problems == [] and setup.binary_ok
    assert setup.library_path == str(checkout.joinpath(*LIB_PARTS))

    def served(gpu: str) -> tuple[str | None, str]:
        s = setup.serving(gpu)
        return s.config, s.relation

    for gpu in ("SM80_A100", "SM80_A100_SXM_40GB"):
        assert served(gpu) == ("SM80_A100", "same chip")
    for gpu in ("SM80_A100_PCIE_40GB", "SM80_A100_PCIE_80GB"):
        assert served(gpu) == ("NVIDIA_A100_80GB_PCIe", "same chip")
    for gpu in ("SM90_H100", "SM90_H100_PCIE", "SM90_GH200"):
        assert served(gpu) == ("SM90_H100", "same chip")
    assert served("SM90_H200") == ("SM90_H200", "same chip")
    for gpu in ("SM89_L4", "SM89_L40", "SM89_L40S", "SM89_RTX4090", "SM89_RTX6000ADA"):
        assert served(gpu) == ("SM89_RTX4060_LAPTOP", "closest"), gpu
    for gpu in ("SM87_ORIN", "SM86_RTX3060_MOBILE", "SM89_RTX4060_LAPTOP"):  # their own specs
        assert served(gpu) == (gpu, "same chip")
    assert served("SM70_V100_SXM2") == ("SM7_QV100", "same chip")
    assert served("SM86_A10") == ("SM86_RTX3070", "closest")
    assert "GA100" in setup.serving("SM80_A100_SXM_40GB").reason
    # every config offered is one a run accepts; what cannot run is listed once, with why
    reg = default_registry()
    assert setup.runnable() and all(reg.resolve(c) is not None for c in setup.runnable())
    assert not {"SM3_KEPLER_TITAN", "SM7_TITANV", "SM2_GTX480", "SM100_GCN3"} & set(setup.runnable())
    assert set(setup.unrunnable) == {"SM2_GTX480", "SM3_KEPLER_TITAN", "SM100_GCN3"}
    assert "PTX-mode" in setup.unrunnable["SM2_GTX480"] and "trace.config" in setup.unrunnable["SM2_GTX480"]
    assert "no Kepler GPU spec" in setup.unrunnable["SM3_KEPLER_TITAN"]
    assert "AMD GCN3" in setup.unrunnable["SM100_GCN3"]
    with pytest.raises(ValidationError, match="SM100_B200: no Accel-Sim config pairs"):
        require(setup, ["SM100_B200"])


def test_a_binary_that_cannot_load_its_library_is_unavailable_with_the_fix(tmp_path: Path) -> None:
    checkout, binary = make_checkout(tmp_path / "co")
    lib = checkout.joinpath(*LIB_PARTS)
    # pointed at the configs only through a copy elsewhere: nothing says where the library is
    flat = tmp_path / "configs"
    shutil.copytree(checkout / "gpu-simulator" / "configs", flat)
    alone = tmp_path / "bin" / "accel-sim.out"
    alone.parent.mkdir()
    shutil.copy(binary, alone)
    setup = discover(str(alone), str(flat))
    assert not setup.binary_ok and setup.runnable() == []
    why = next(p for p in setup.problems if BIN_VAR in p)
    assert "cannot start (exit 127" in why and f"undefined symbol: {MISSING_SYMBOL}" in why
    assert LIBRARY_VAR in why and "setup_environment.sh" in why and "gcc-*/cuda-*/release" in why
    with pytest.raises(ValidationError, match=f"undefined symbol: {MISSING_SYMBOL}"):
        require(setup, ["SM80_A100"])
    # the setting names the folder: it starts
    fixed = discover(str(alone), str(checkout), library=str(lib))
    assert fixed.binary_ok and fixed.library_source == LIBRARY_VAR and "SM80_A100" in fixed.runnable()


async def test_a_run_without_the_library_carries_the_loaders_line_and_the_fix(tmp_path: Path) -> None:
    checkout, binary = make_checkout(tmp_path / "co", SM80_A100={"pace_s": 0.01})
    gpu = discover(str(binary), str(checkout), probe=False).configs["SM80_A100"]
    bare = gpu.__class__(**{**{f: getattr(gpu, f) for f in gpu.__struct_fields__}, "library_path": ""})
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    with pytest.raises(AccelSimError, match="exited with 127 after 0 kernels") as err:
        await run_accelsim(str(binary), str(_trace(tmp_path / "trace")), bare, tmp_path / "w1", env=env)
    assert f"undefined symbol: {MISSING_SYMBOL}" in str(err.value) and LIBRARY_VAR in str(err.value)
    done = await run_accelsim(str(binary), str(_trace(tmp_path / "trace")), gpu, tmp_path / "w2")
    assert [k.cycles for k in done.kernels] == [cycles_of(1)]


async def test_a_trace_accelsim_refuses_fails_with_accelsims_line(tmp_path: Path) -> None:
    checkout, binary = make_checkout(tmp_path / "co", SM80_A100={"pace_s": 0.01})
    gpu = discover(str(binary), str(checkout)).configs["SM80_A100"]
    klist = _trace(tmp_path / "trace", binary_version=0)
    with pytest.raises(AccelSimError) as err:
        await run_accelsim(str(binary), str(klist), gpu, tmp_path / "work")
    text = str(err.value)
    assert "exited with 0 having simulated none of the 1 kernels kernelslist.g names" in text
    assert text.rstrip().endswith("unsupported binary version: 0")
    assert "-binary version = 0" in text and "tracer" in text
    with pytest.raises(AccelSimError, match="unsupported binary version: 0"):
        simulate(str(binary), str(klist.parent), gpu)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "programs.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_cascade_predict_model_accelsim_prints_the_cycles_beside_the_time(tmp_path: Path) -> None:
    checkout, binary = make_checkout(tmp_path / "co", SM6_TITANX={"pace_s": 0.01},
                                     SM80_A100={"pace_s": 0.01})
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.pop("LD_LIBRARY_PATH", None)
    env.update(CASCADE_ACCELSIM_BIN=str(binary), CASCADE_ACCELSIM_CONFIGS=str(checkout))
    got = _cli(["predict", "--trace", str(MATRIXMUL), "--source", "SM61_GTX1080TI",
                "--target", "SM61_GTX1080TI,SM80_A100,SM100_B200", "--model", "accel-sim"], env)
    assert got.returncode == 0, got.stderr
    assert (f"SM61_GTX1080TI: Accel-Sim SM6_TITANX (same chip): 1 kernels, {cycles_of(1):,} cycles at "
            f"1417 MHz") in got.stderr
    assert "SM80_A100: Accel-Sim SM80_A100 (same chip)" in got.stderr
    assert "SM100_B200: no Accel-Sim config pairs" in got.stderr and "auto model instead" in got.stderr
    rows = list(csv.DictReader(io.StringIO(got.stdout)))
    by_target = {r["target"]: r for r in rows}
    gtx = by_target["SM61_GTX1080TI"]
    assert gtx["model"] == "accel-sim" and int(gtx["sim_cycles"]) == cycles_of(1)
    assert float(gtx["predicted_ns"]) == pytest.approx(cycles_of(1) / 1417.0 * 1e3, rel=1e-3)
    assert by_target["SM100_B200"]["sim_cycles"] == "" and by_target["SM100_B200"]["model"] != "accel-sim"
    # not an Accel-Sim trace folder: says what it needs
    bad = _cli(["predict", "--trace", str(MATRIXMUL / "stats.csv"), "--target", "SM80_A100",
                "--model", "accel-sim"], env)
    assert bad.returncode != 0 and "kernelslist.g" in bad.stderr


def test_cascade_gpus_lists_what_cannot_run_once_and_the_library_fix(tmp_path: Path) -> None:
    checkout, binary = make_checkout(tmp_path / "co")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.pop("LD_LIBRARY_PATH", None)
    env.update(CASCADE_ACCELSIM_BIN=str(binary), CASCADE_ACCELSIM_CONFIGS=str(checkout))
    out = _cli(["gpus"], env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("SM2_GTX480:") == 1 and "PTX-mode" in out.stdout
    assert f"library path: {checkout.joinpath(*LIB_PARTS)}" in out.stdout
    env[LIBRARY_VAR] = str(tmp_path / "elsewhere")
    broken = _cli(["gpus"], env)
    assert "accel-sim model: not available" in broken.stdout
    assert f"undefined symbol: {MISSING_SYMBOL}" in broken.stdout and LIBRARY_VAR in broken.stdout
