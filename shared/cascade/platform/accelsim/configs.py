"""What is configured for Accel-Sim: the settings' names, the config folder that serves each
GPU (:class:`AccelSimGPUConfig`) and what discovery found (:class:`AccelSimSetup`); how an
Accel-Sim checkout's config folders merge per name, and how a config folder is staged into the
working directory a simulation runs in."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec

from cascade.errors import ValidationError
from cascade.gpus.accelsim_names import ConfigPairing
from cascade.platform.accelsim.library import run_env

MODEL = "accel-sim"
BIN_VAR = "CASCADE_ACCELSIM_BIN"
CONFIGS_VAR = "CASCADE_ACCELSIM_CONFIGS"
MAP_VAR = "CASCADE_ACCELSIM_CONFIG_MAP"
CONFIG_FILES = ("gpgpusim.config", "trace.config")
BUILD_DOCS = "https://github.com/accel-sim/accel-sim-framework#accel-sim-framework"


class AccelSimGPUConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The Accel-Sim configuration folder that serves one Cascade GPU."""

    config_id: str
    """Cascade GPU config id it serves."""
    folder: str
    """The folder holding its gpgpusim.config."""
    gpgpusim_config: str
    """Path of gpgpusim.config."""
    trace_config: str
    """Path of trace.config."""
    core_clock_mhz: float | None = None
    """Core clock of ``-gpgpu_clock_domains`` in gpgpusim.config."""
    files: dict[str, str] = {}
    """File name (relative to the folder) -> sha256, when hashed (every file of the folder)."""
    name: str = ""
    """Accel-Sim config name (the folder's name, e.g. ``SM6_TITANX``)."""
    folders: list[str] = []
    """Every folder merged into this config (gpgpu-sim's, then Accel-Sim's ``tested-cfgs``)."""
    paths: dict[str, str] = {}
    """File name (relative to the folder) -> path of that file: what the working directory holds."""
    relation: str = "folder"
    """How it pairs with the GPU (:data:`cascade.gpus.accelsim_names.Relation`)."""
    reason: str = ""
    """Why this config serves this GPU."""
    library_path: str = ""
    """Folders put first on LD_LIBRARY_PATH when accel-sim.out runs (CASCADE_ACCELSIM_LD_LIBRARY_PATH
    or the checkout's gpgpu-sim/lib/.../release)."""


class AccelSimServing(msgspec.Struct, frozen=True, kw_only=True):
    """Which Accel-Sim config serves one GPU, or why none does."""

    config: str | None = None
    """Accel-Sim config name, or None when no config serves this GPU here."""
    relation: str = ""
    """``same chip``, ``closest``, ``folder`` or ``setting`` (empty when none)."""
    reason: str = ""
    """Why this config pairs with the GPU, or why there is none."""


class AccelSimSetup(msgspec.Struct, frozen=True, kw_only=True):
    """What the settings configure."""

    binary: str = ""
    """CASCADE_ACCELSIM_BIN as given."""
    binary_ok: bool = False
    """The binary exists, is executable and starts (its libraries load: :func:`probe_binary`)."""
    configs_dir: str = ""
    configs: dict[str, AccelSimGPUConfig] = {}
    """Usable configs by Cascade config id."""
    problems: list[str] = []
    """Why the model (or a config folder) is unusable, one sentence each."""
    layout: str = ""
    """``checkout`` (an Accel-Sim checkout's tested-cfgs) or ``folders`` (a folder of folders)."""
    available: list[str] = []
    """Usable Accel-Sim config folder names found."""
    candidates: dict[str, list[ConfigPairing]] = {}
    """GPU id -> the Accel-Sim configs that may serve it, best first (table and setting)."""
    unrunnable: dict[str, str] = {}
    """Config folders found that serve no GPU here -> why (PTX-only, no GPU of their
    architecture, a name that is neither a known config nor a GPU), each listed once."""
    library_path: str = ""
    """Folders put first on LD_LIBRARY_PATH when the binary runs (empty: none)."""
    library_source: str = ""
    """Where :attr:`library_path` comes from (the setting, or the checkout folder it was found in)."""

    def runnable(self) -> list[str]:
        """Config ids that can run accel-sim (none without a usable binary)."""
        return sorted(self.configs) if self.binary_ok else []

    def can_run(self, config_id: str) -> bool:
        """True when ``config_id`` can run the accel-sim model."""
        return self.binary_ok and config_id in self.configs

    def env(self) -> dict[str, str]:
        """The environment accel-sim.out runs in: this process's, with :attr:`library_path` first
        on LD_LIBRARY_PATH."""
        return run_env(self.library_path)

    def serving(self, config_id: str) -> AccelSimServing:
        """Which Accel-Sim config serves ``config_id`` here, or why none does."""
        got = self.configs.get(config_id)
        if got is not None:
            return AccelSimServing(config=got.name, relation=got.relation, reason=got.reason)
        wanted = self.candidates.get(config_id, [])
        if not wanted:
            return AccelSimServing(reason=(
                "no Accel-Sim config pairs with this GPU (add a folder named after it to "
                f"{CONFIGS_VAR} or an entry to {MAP_VAR})"))
        names = ", ".join(f"{p.config} ({p.relation})" for p in wanted)
        where = self.configs_dir or f"({CONFIGS_VAR} is not set)"
        return AccelSimServing(reason=f"pairs with {names}, not found in {CONFIGS_VAR} {where}")


#: Where an Accel-Sim checkout keeps its tested configs, in merge order (gpgpu-sim's folder
#: holds gpgpusim.config and the files it includes, Accel-Sim's own holds trace.config).
CHECKOUT_CONFIG_DIRS = (("gpu-simulator", "gpgpu-sim", "configs", "tested-cfgs"),
                        ("gpu-simulator", "configs", "tested-cfgs"))


def config_roots(root: Path) -> tuple[list[Path], str]:
    """The folders of config folders under ``root`` and the layout: an Accel-Sim checkout
    (``root`` or ``root/..`` holding ``gpu-simulator``), else ``root`` itself."""
    for parts in (CHECKOUT_CONFIG_DIRS, tuple(p[1:] for p in CHECKOUT_CONFIG_DIRS)):
        found = [root.joinpath(*p) for p in parts if root.joinpath(*p).is_dir()]
        if found:
            return found, "checkout"
    return [root], "folders"


def config_folders(root: Path) -> tuple[dict[str, dict[str, Path]], dict[str, list[Path]], str]:
    """Config name -> {file name: path} merged over :func:`config_roots` (a later root's file
    of the same name wins), the folders merged per name, and the layout."""
    roots, layout = config_roots(root)
    merged: dict[str, dict[str, Path]] = {}
    dirs: dict[str, list[Path]] = {}
    for base in roots:
        for sub in sorted(base.iterdir()):
            if not sub.is_dir() or sub.name.startswith("."):
                continue
            files = merged.setdefault(sub.name, {})
            dirs.setdefault(sub.name, []).append(sub)
            for f in sorted(sub.rglob("*")):
                rel = f.relative_to(sub)
                if f.is_file() and not any(part.startswith(".") for part in rel.parts):
                    files[str(rel)] = f
    return merged, dirs, layout


def stage_config(paths: dict[str, str], workdir: Path) -> None:
    """Put every file of a config folder into ``workdir`` (a symlink, a copy where links fail),
    so the files gpgpusim.config names relative to the working directory resolve."""
    for rel, src in sorted(paths.items()):
        dest = workdir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        try:
            dest.symlink_to(Path(src).resolve())
        except OSError:
            shutil.copyfile(src, dest)


def folder_of_files(config_files: list[str]) -> tuple[dict[str, str], list[str]]:
    """For config files given by path: every file of their folders (name -> path) and the
    ``-config`` names relative to the working directory they are staged into."""
    paths: dict[str, str] = {}
    names: list[str] = []
    for cfg in config_files:
        p = Path(cfg)
        for f in sorted(p.parent.iterdir()) if p.parent.is_dir() else []:
            if f.is_file() and not f.name.startswith("."):
                if f.name in paths and Path(paths[f.name]).resolve() != f.resolve():
                    if f.name == p.name:
                        raise ValidationError(
                            f"two config files named {f.name} ({paths[f.name]} and {f}): Accel-Sim "
                            "reads both from one working directory", field="configs")
                    continue
                paths.setdefault(f.name, str(f))
        paths[p.name] = str(p)
        names.append(p.name)
    return paths, names


def staged_files(config: AccelSimGPUConfig | list[str]) -> tuple[dict[str, str], list[str]]:
    """(file name -> path of every file to stage, the ``-config`` names) of a discovered config
    folder or of config files given by path (:func:`folder_of_files`)."""
    if isinstance(config, AccelSimGPUConfig):
        paths = dict(config.paths) or {Path(p).name: p for p in (config.gpgpusim_config,
                                                                 config.trace_config)}
        return paths, list(CONFIG_FILES)
    return folder_of_files([str(c) for c in config])
