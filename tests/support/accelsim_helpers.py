"""Helpers for the accel-sim tests and benchmark: a stand-in binary and config folders."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from tests.support.paths import SHARED_DATA, TEST_DATA

STANDIN = Path(__file__).resolve().parent / "accelsim_standin.py"
#: A real Accel-Sim log (vectorAdd, one kernel) in the shared measured data.
REAL_LOG = SHARED_DATA / "accelsim-log" / "vectoradd-100-32.accelsim_log.txt"
#: A hand-written Accel-Sim checkout's config folders (the real layout: gpgpusim.config, the
#: interconnect file it names relative to the working directory and an AccelWattch XML under
#: gpu-simulator/gpgpu-sim/configs/tested-cfgs/NAME, trace.config under
#: gpu-simulator/configs/tested-cfgs/NAME).
CHECKOUT = TEST_DATA / "accelsim-checkout"
GPGPUSIM_CFGS = ("gpu-simulator", "gpgpu-sim", "configs", "tested-cfgs")
ACCELSIM_CFGS = ("gpu-simulator", "configs", "tested-cfgs")
#: Core clocks of the checkout's configs (their -gpgpu_clock_domains).
CHECKOUT_CLOCK_MHZ = {"SM6_TITANX": 1417.0, "SM7_QV100": 1132.0, "SM86_RTX3070": 1132.0,
                      "SM90_H100": 1132.0}


def copy_checkout(dest: Path, **standin: dict[str, object]) -> Path:
    """A copy of :data:`CHECKOUT` at ``dest``; ``standin[NAME]`` options are appended to that
    config's gpgpusim.config as ``# standin-...`` comments (ignored by the real Accel-Sim)."""
    shutil.copytree(CHECKOUT, dest)
    for name, options in standin.items():
        cfg = dest.joinpath(*GPGPUSIM_CFGS, name, "gpgpusim.config")
        if not cfg.is_file():
            raise FileNotFoundError(f"{cfg}: the test checkout has no config {name}")
        with cfg.open("a") as fh:
            fh.writelines(f"# standin-{k.replace('_', '-')}: {v}\n" for k, v in options.items())
    return dest
CLOCK_MHZ = {"SM80_A100": 1410.0, "SM90_H100": 1755.0, "SM70_V100_PCIE_32GB": 1380.0}


#: The symbol a real accel-sim.out misses when the system's libcudart.so is found before
#: GPGPU-Sim's (a shell that did not source setup_environment.sh).
MISSING_SYMBOL = "_ZTI10shd_warp_t"


def make_binary(folder: Path, *, needs_library: Path | None = None, loader: str = "symbol") -> Path:
    """An executable ``accel-sim.out`` that runs the stand-in (same pid: ``exec``).

    ``needs_library``: the folder whose ``libcudart.so`` it is linked against; unless that folder
    is on LD_LIBRARY_PATH it fails as the real binary does when the dynamic loader cannot resolve
    it, exit 127 with the loader's line on stderr: ``symbol lookup error: ... undefined symbol:
    _ZTI10shd_warp_t`` (``loader="symbol"``: another libcudart.so was found) or ``error while
    loading shared libraries: libcudart.so.11.0: cannot open shared object file`` (``"missing"``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "accel-sim.out"
    check = ""
    if needs_library is not None:
        message = (f"$0: symbol lookup error: $0: undefined symbol: {MISSING_SYMBOL}" if loader == "symbol"
                   else "$0: error while loading shared libraries: libcudart.so.11.0: cannot open "
                        "shared object file: No such file or directory")
        check = (f'case ":$LD_LIBRARY_PATH:" in\n  *":{needs_library}:"*) ;;\n'
                 f'  *) echo "{message}" >&2; exit 127 ;;\nesac\n')
    path.write_text(f'#!/bin/sh\n{check}exec "{sys.executable}" "{STANDIN}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


#: Config folders of today's Accel-Sim and GPGPU-Sim (``dev``) trees: name -> (SMs, core MHz,
#: has trace.config). SM2_GTX480 is PTX-only as shipped; SM100_GCN3 models an AMD GPU.
TODAYS_CONFIGS: dict[str, tuple[int, float, bool]] = {
    "SM2_GTX480": (15, 700.0, False), "SM3_KEPLER_TITAN": (14, 837.0, True),
    "SM6_TITANX": (28, 1417.0, True), "SM7_QV100": (80, 1132.0, True), "SM7_TITANV": (80, 1200.0, True),
    "SM75_RTX2060": (30, 1365.0, True), "SM80_A100": (108, 1410.0, True),
    "NVIDIA_A100_80GB_PCIe": (108, 1410.0, True), "SM86_RTX3070": (46, 1132.0, True),
    "SM86_RTX3060_MOBILE": (30, 975.0, True), "SM87_ORIN": (16, 1200.0, True),
    "SM89_RTX4060_LAPTOP": (24, 1890.0, True), "SM90_H100": (132, 1132.0, True),
    "SM90_H200": (132, 1755.0, True), "SM100_GCN3": (60, 1000.0, True),
}
#: Where a built GPGPU-Sim keeps libcudart.so in a checkout (``$GPGPUSIM_ROOT/lib/$GPGPUSIM_CONFIG``).
LIB_PARTS = ("gpu-simulator", "gpgpu-sim", "lib", "gcc-11.4.0", "cuda-11080", "release")


def make_checkout(dest: Path, configs: dict[str, tuple[int, float, bool]] | None = None,
                  **standin: dict[str, object]) -> tuple[Path, Path]:
    """A checkout-shaped tree at ``dest`` holding ``configs`` (default :data:`TODAYS_CONFIGS`):
    gpgpusim.config and its interconnect file under gpgpu-sim's tested-cfgs, trace.config under
    Accel-Sim's, GPGPU-Sim's ``lib/gcc-*/cuda-*/release/libcudart.so`` and
    ``gpu-simulator/bin/release/accel-sim.out``, a stand-in that starts only with that library
    folder on LD_LIBRARY_PATH. Returns (checkout, binary)."""
    for name, (sms, mhz, traced) in (configs or TODAYS_CONFIGS).items():
        g = dest.joinpath(*GPGPUSIM_CFGS, name)
        g.mkdir(parents=True, exist_ok=True)
        lines = [f"# {name} (test)", f"-gpgpu_n_clusters {sms}", "-gpgpu_n_cores_per_cluster 1",
                 f"-gpgpu_clock_domains {mhz:.1f}:{mhz:.1f}:{mhz:.1f}:3500.0",
                 "-inter_config_file config_test_islip.icnt"]
        lines += [f"# standin-{k.replace('_', '-')}: {v}" for k, v in standin.get(name, {}).items()]
        (g / "gpgpusim.config").write_text("\n".join(lines) + "\n")
        (g / "config_test_islip.icnt").write_text("network_count = 2;\ntopology = fly;\n")
        if traced:
            a = dest.joinpath(*ACCELSIM_CFGS, name)
            a.mkdir(parents=True, exist_ok=True)
            (a / "trace.config").write_text("-trace_opcode_latency_initiation_int 4,2\n")
    lib = dest.joinpath(*LIB_PARTS)
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libcudart.so.11.0").write_bytes(b"\x7fELF (stand-in)")
    (lib / "libcudart.so").symlink_to("libcudart.so.11.0")
    binary = make_binary(dest / "gpu-simulator" / "bin" / "release", needs_library=lib)
    return dest, binary


def make_config(root: Path, name: str, clock_mhz: float = 1410.0, **standin: object) -> Path:
    """``root/name/`` with gpgpusim.config (stand-in options as comments), trace.config and an
    included interconnect file."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["# Accel-Sim configuration (test)", "-gpgpu_n_clusters 54", "-gpgpu_n_cores_per_cluster 2",
             f"-gpgpu_clock_domains {clock_mhz:.1f}:{clock_mhz:.1f}:{clock_mhz:.1f}:1593.0",
             "-inter_config_file config_test_islip.icnt"]
    lines += [f"# standin-{k.replace('_', '-')}: {v}" for k, v in standin.items()]
    (folder / "gpgpusim.config").write_text("\n".join(lines) + "\n")
    (folder / "trace.config").write_text("-trace_opcode_latency_initiation_int 4,2\n"
                                          "-trace_opcode_latency_initiation_sp 4,1\n")
    (folder / "config_test_islip.icnt").write_text("network_count = 2;\ntopology = fly;\n")
    return folder


def pids_alive(pids_dir: Path) -> list[int]:
    """Pids written by stand-ins to ``pids_dir`` that are still running (zombies count as gone)."""
    alive = []
    for f in pids_dir.glob("*.pids"):
        for pid in map(int, f.read_text().split()):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            try:
                state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
    return alive
