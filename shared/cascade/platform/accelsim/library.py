"""Where GPGPU-Sim's ``libcudart.so`` is (``CASCADE_ACCELSIM_LD_LIBRARY_PATH``, else found in
the Accel-Sim checkout as ``setup_environment.sh`` would put it) and the environment
``accel-sim.out`` runs in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The setting that puts GPGPU-Sim's libcudart.so on the library path.
LIBRARY_VAR = "CASCADE_ACCELSIM_LD_LIBRARY_PATH"
#: Where a built GPGPU-Sim keeps its libraries: ``$GPGPUSIM_ROOT/lib/$GPGPUSIM_CONFIG`` with
#: ``GPGPUSIM_CONFIG=gcc-$CC_VERSION/cuda-$CUDA_VERSION_NUMBER/{release,debug}``, the folder
#: ``source gpu-simulator/setup_environment.sh`` prepends to LD_LIBRARY_PATH.
GPGPUSIM_LIB = ("gpu-simulator", "gpgpu-sim", "lib")


def checkout_of(binary: str, configs_dir: str) -> Path | None:
    """The Accel-Sim checkout the settings point into: ``CASCADE_ACCELSIM_CONFIGS`` (or its
    parent) when it holds ``gpu-simulator``, else the checkout of a binary under
    ``gpu-simulator/bin/{release,debug}/``."""
    for root in ([Path(configs_dir), Path(configs_dir).parent] if configs_dir else []):
        if (root / "gpu-simulator").is_dir():
            return root
    if binary:
        parents = Path(binary).resolve().parents
        if len(parents) > 2 and parents[1].name == "bin" and parents[2].name == "gpu-simulator":
            return parents[2].parent
    return None


def library_path(binary: str, configs_dir: str, setting: str = "") -> tuple[str, str]:
    """The folders to put first on LD_LIBRARY_PATH and where they come from: the setting, else
    the checkout's ``gpgpu-sim/lib/*/*/{release,debug}`` folder holding ``libcudart.so`` (the
    build type of ``bin/{release,debug}/accel-sim.out`` first), else nothing."""
    if setting.strip():
        return setting.strip(), LIBRARY_VAR
    root = checkout_of(binary, configs_dir)
    if root is None:
        return "", ""
    lib = root.joinpath(*GPGPUSIM_LIB)
    found = sorted({p.parent for p in lib.glob("**/libcudart.so*")}) if lib.is_dir() else []
    if not found:
        return "", f"no libcudart.so under {lib}"
    build = Path(binary).parent.name if binary else "release"
    found.sort(key=lambda d: (d.name != build, str(d)))
    return str(found[0]), f"the checkout {root}"


def run_env(library: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``library`` first on LD_LIBRARY_PATH."""
    env = dict(os.environ if base is None else base)
    if library:
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (library, env.get("LD_LIBRARY_PATH", "")) if p)
    return env
