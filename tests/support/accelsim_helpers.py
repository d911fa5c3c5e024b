"""Helpers for the accel-sim tests and benchmark: a stand-in binary and config folders."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from tests.support.paths import TEST_DATA

STANDIN = Path(__file__).resolve().parent / "accelsim_standin.py"
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


def make_binary(folder: Path) -> Path:
    """An executable ``accel-sim.out`` that runs the stand-in (same pid: ``exec``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "accel-sim.out"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


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
