"""Running Accel-Sim for real: what is configured, the trace on disk, the subprocess.

- :func:`discover` reads ``CASCADE_ACCELSIM_BIN`` (``accel-sim.out``) and
  ``CASCADE_ACCELSIM_CONFIGS`` (an Accel-Sim checkout, whose
  ``gpu-simulator/gpgpu-sim/configs/tested-cfgs`` and ``gpu-simulator/configs/tested-cfgs``
  are merged per config name as Accel-Sim's run scripts merge them, or any folder of config
  folders) into an :class:`AccelSimSetup`: which Accel-Sim config serves which Cascade GPU
  (:mod:`cascade.gpus.accelsim_names`: by chip, then architecture; ``CASCADE_ACCELSIM_CONFIG_MAP``),
  and why not: config folders that serve no GPU are listed once with why. The binary counts as
  available once it has started (:func:`probe_binary`) with GPGPU-Sim's ``libcudart.so`` folder
  first on LD_LIBRARY_PATH (``CASCADE_ACCELSIM_LD_LIBRARY_PATH``, else found in the checkout as
  ``setup_environment.sh`` would put it: :func:`library_path`); every run gets that path too.
  :func:`require` refuses a run that cannot (``ValidationError`` naming the setting).
- :func:`fetch_instruction_trace` puts a trace's instruction files (``kernel-N.traceg``,
  decompressed, and ``kernelslist.g``) into a per-node cache, once per trace (a file lock
  serialises simulators on one node; a marker says the copy is complete).
- :func:`run_accelsim` links every file of the config folder into a fresh working directory
  (:func:`stage_config`: ``-inter_config_file config_*_islip.icnt`` and other includes are
  opened relative to it) and runs ``accel-sim.out -trace .../kernelslist.g -config
  gpgpusim.config -config trace.config`` there in its own process group, reads stdout as it
  is written and calls ``on_kernel`` for every finished kernel; cancellation (of the awaiting
  task) and the timeout kill the whole process group; a non-zero exit, a binary that could not
  start and an exit 0 that simulated nothing (``unsupported binary version: 0``) raise
  :class:`AccelSimError` with Accel-Sim's last lines (:func:`failure_message`).

Accel-Sim itself is built outside this repository
(https://github.com/accel-sim/accel-sim-framework#accel-sim-framework).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import hashlib
import lzma
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from cascade.engine.accelsim import (
    AccelSimConfig,
    AccelSimOutputParser,
    SimulatedKernel,
    core_clock_of_config,
)
from cascade.errors import AccelSimError, ConfigError, JobTimeoutError, ValidationError
from cascade.gpus.accelsim_names import (
    CONFIG_CHIPS,
    ConfigPairing,
    pairings_for,
    parse_overrides,
    unpaired_reason,
)
from cascade.platform.keys import raw_prefix
from cascade.platform.log import get_logger
from cascade.platform.storage import Storage
from cascade.traces.files import check_name

log = get_logger("cascade.accelsim")

MODEL = "accel-sim"
BIN_VAR = "CASCADE_ACCELSIM_BIN"
CONFIGS_VAR = "CASCADE_ACCELSIM_CONFIGS"
MAP_VAR = "CASCADE_ACCELSIM_CONFIG_MAP"
CONFIG_FILES = ("gpgpusim.config", "trace.config")
BUILD_DOCS = "https://github.com/accel-sim/accel-sim-framework#accel-sim-framework"
#: Lines of output kept for an error message.
TAIL_LINES = 40
#: Characters of that tail kept at most.
TAIL_CHARS = 4000
#: Seconds between SIGTERM and SIGKILL when a simulation's process group is stopped.
KILL_GRACE_S = 2.0
_COMPLETE = ".complete"


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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


# --------------------------------------------------------------------------- the library path

#: The setting that puts GPGPU-Sim's libcudart.so on the library path.
LIBRARY_VAR = "CASCADE_ACCELSIM_LD_LIBRARY_PATH"
#: Where a built GPGPU-Sim keeps its libraries: ``$GPGPUSIM_ROOT/lib/$GPGPUSIM_CONFIG`` with
#: ``GPGPUSIM_CONFIG=gcc-$CC_VERSION/cuda-$CUDA_VERSION_NUMBER/{release,debug}``, the folder
#: ``source gpu-simulator/setup_environment.sh`` prepends to LD_LIBRARY_PATH.
GPGPUSIM_LIB = ("gpu-simulator", "gpgpu-sim", "lib")
_LOADER = re.compile(r"error while loading shared libraries|symbol lookup error|undefined symbol|"
                     r"cannot open shared object file|version `[^']+' not found")
#: Seconds the start-up probe lets the binary run before taking it as started.
PROBE_TIMEOUT_S = 10.0
#: Seconds a failed probe is remembered (a library installed meanwhile is seen after this).
PROBE_RETRY_S = 30.0
_PROBED: dict[tuple[str, int, int, str], tuple[float, str]] = {}


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


def loader_failure(returncode: int | None, output: str) -> str:
    """The dynamic loader's line when the binary could not start (exit 127, or its message in
    the output); '' when it started."""
    hit = next((line.strip() for line in output.splitlines() if _LOADER.search(line)), "")
    if hit or returncode in (126, 127):
        return hit or f"exit {returncode}"
    return ""


def library_fix(library: str, source: str) -> str:
    """What to do when accel-sim.out cannot load its libraries, naming the setting."""
    now = (f"it ran with {library} (from {source}) first on LD_LIBRARY_PATH" if library else
           f"no library folder was found ({source})" if source else
           "no library folder was found (neither setting points into an Accel-Sim checkout)")
    return (f"GPGPU-Sim's libcudart.so must be on the library path, as `source "
            f"gpu-simulator/setup_environment.sh` puts it: set {LIBRARY_VAR} to the folder holding "
            f"the libcudart.so that accel-sim.out was built with (gpu-simulator/gpgpu-sim/lib/"
            f"gcc-*/cuda-*/release), or rebuild Accel-Sim; {now}")


def probe_binary(binary: str, library: str, source: str = "") -> str:
    """Start ``binary`` with no arguments in an empty folder, ``library`` first on the library
    path: '' when it starts (any exit but the loader's), else why not and what to do. Cached per
    binary (path, mtime, size) and library path (a failure for :data:`PROBE_RETRY_S`)."""
    import tempfile

    try:
        st = Path(binary).stat()
    except OSError as exc:
        return f"{BIN_VAR}={binary} cannot be read: {exc}"
    key = (str(Path(binary).resolve()), st.st_mtime_ns, st.st_size, library)
    seen = _PROBED.get(key)
    if seen is not None and (not seen[1] or time.monotonic() - seen[0] < PROBE_RETRY_S):
        return seen[1]
    with tempfile.TemporaryDirectory(prefix="cascade-accelsim-probe-") as work:
        try:
            proc = subprocess.Popen([binary], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, cwd=work, start_new_session=True,
                                    env=run_env(library))
        except OSError as exc:
            why = f"{BIN_VAR}={binary} cannot be started: {exc}"
            _PROBED[key] = (time.monotonic(), why)
            return why
        try:
            out, _ = proc.communicate(timeout=PROBE_TIMEOUT_S)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:  # still running: its libraries loaded
            kill_group(proc.pid)
            out, _ = proc.communicate()
            code = None
    text = out.decode(errors="replace")
    failed = loader_failure(code, text) if code is not None else ""
    why = ""
    if failed:
        why = (f"{BIN_VAR}={binary} cannot start (exit {code}: {failed}): "
               f"{library_fix(library, source)}")
    _PROBED[key] = (time.monotonic(), why)
    return why


def _default_specs() -> list[Any]:
    from cascade.gpus import default_registry

    return list(default_registry())


def _binary_usable(binary: str, lib: str, lib_source: str, probe: bool, problems: list[str]) -> bool:
    if not binary:
        problems.append(f"{BIN_VAR} is not set (the path of a built accel-sim.out; see {BUILD_DOCS})")
    elif not Path(binary).is_file():
        problems.append(f"{BIN_VAR}={binary} does not exist")
    elif not os.access(binary, os.X_OK):
        problems.append(f"{BIN_VAR}={binary} is not executable")
    else:
        why = probe_binary(binary, lib, lib_source) if probe else ""
        if not why:
            return True
        problems.append(why)
    return False


def _usable_folders(configs_dir: str, problems: list[str], unrunnable: dict[str, str]
                    ) -> tuple[dict[str, dict[str, Path]], dict[str, list[Path]], str]:
    """Config name -> files of the folders with both config files, the folders per name and the
    layout; what is unusable goes to ``problems`` (the setting) or ``unrunnable`` (a folder)."""
    folders: dict[str, dict[str, Path]] = {}
    if not configs_dir:
        problems.append(f"{CONFIGS_VAR} is not set (an Accel-Sim checkout, or a folder of config "
                        "folders each holding gpgpusim.config and trace.config)")
        return folders, {}, ""
    if not Path(configs_dir).is_dir():
        problems.append(f"{CONFIGS_VAR}={configs_dir} is not a folder")
        return folders, {}, ""
    merged, dirs, layout = config_folders(Path(configs_dir))
    no_sim = [n for n, files in merged.items() if "gpgpusim.config" not in files]
    uncloned = bool(no_sim) and layout == "checkout" and len(no_sim) == len(merged)
    if uncloned:
        problems.append(f"{CONFIGS_VAR}={configs_dir} has no gpgpusim.config in any config "
                        "folder (is gpu-simulator/gpgpu-sim cloned? Accel-Sim's "
                        "setup_environment.sh fetches it)")
    for name, files in merged.items():
        missing = [f for f in CONFIG_FILES if f not in files]
        if not missing:
            folders[name] = files
            continue
        where = " or ".join(str(d) for d in dirs[name])
        known = CONFIG_CHIPS.get(name)
        if missing == ["trace.config"]:
            unrunnable[name] = (known.note if known is not None and known.note else
                                f"a PTX-mode config: {where} has no trace.config, which "
                                "Accel-Sim's trace-driven mode needs")
        elif not uncloned:
            unrunnable[name] = f"{where} has no {' or '.join(missing)}"
    return folders, dirs, layout


def discover(binary: str, configs_dir: str, *, hashes: bool = False,
             resolve: Callable[[str], str | None] | None = None,
             config_map: list[str] | None = None, specs: Iterable[Any] | None = None,
             library: str = "", probe: bool = True) -> AccelSimSetup:
    """Read the settings' targets (see the module docstring); never raises for bad folders.

    Each GPU of ``specs`` (default: the built-in registry) gets, in this order: the config
    ``config_map`` (``CASCADE_ACCELSIM_CONFIG_MAP``) names for it; a folder named after it (its
    id or an alias, through ``resolve``: default the built-in registry); the first of its
    candidates (:func:`cascade.gpus.accelsim_names.candidates_for`: same chip, then same
    architecture) present. A folder that serves no GPU is listed in ``unrunnable`` with why.
    The binary is started once (:func:`probe_binary`, ``probe=False`` skips it) with
    ``library`` (``CASCADE_ACCELSIM_LD_LIBRARY_PATH``, else found in the checkout) first on
    the library path.
    """
    if resolve is None:
        from cascade.gpus import default_registry

        reg = default_registry()

        def resolve(name: str) -> str | None:
            spec = reg.resolve(name)
            return spec.id if spec is not None else None
    spec_list = list(specs) if specs is not None else _default_specs()
    problems: list[str] = []
    lib, lib_source = library_path(binary, configs_dir, library)
    binary_ok = _binary_usable(binary, lib, lib_source, probe, problems)
    try:
        overrides = parse_overrides(config_map or [])
    except ConfigError as exc:
        problems.append(str(exc))
        overrides = {}
    candidates = pairings_for(spec_list, overrides)
    unrunnable: dict[str, str] = {}
    folders, dirs, layout = _usable_folders(configs_dir, problems, unrunnable)
    chosen: dict[str, ConfigPairing] = {}
    named: dict[str, str] = {}
    for name in folders:  # folders named after a GPU (id or alias)
        gpu = resolve(name)
        if gpu is not None:
            named[gpu] = name
    for gpu, pairs in candidates.items():
        if gpu in overrides:
            if pairs and pairs[0].config in folders:
                chosen[gpu] = pairs[0]
            continue
        if gpu in named:
            continue
        hit = next((p for p in pairs if p.config in folders), None)
        if hit is not None:
            chosen[gpu] = hit
    for gpu, name in named.items():
        if gpu not in overrides:
            same = next((p for p in candidates.get(gpu, []) if p.config == name), None)
            chosen[gpu] = same or ConfigPairing(
                gpu_id=gpu, config=name, relation="folder",
                reason=f"{CONFIGS_VAR} has a folder named {name} for it")
    used = {p.config for p in chosen.values()}
    paired = {p.config for pairs in candidates.values() for p in pairs}
    archs = {s.arch for s in spec_list}
    for name in folders:  # serves no GPU: say why, once
        if name in used or name in named.values():
            continue
        why = unpaired_reason(name, archs)
        if why:
            unrunnable[name] = why
        elif name not in paired and name not in CONFIG_CHIPS:
            unrunnable[name] = (f"neither a known Accel-Sim config nor a Cascade GPU id or alias: "
                                f"add a GPU spec with id {name} (cascade gpus --specs DIR, POST "
                                f"/api/configs) or pair a GPU with it in {MAP_VAR}")
    configs: dict[str, AccelSimGPUConfig] = {}
    clocks: dict[str, float | None] = {}
    hashed: dict[str, dict[str, str]] = {}
    for gpu, pairing in sorted(chosen.items()):
        name = pairing.config
        files = folders[name]
        if name not in clocks:
            try:
                clocks[name] = core_clock_of_config(files["gpgpusim.config"].read_text(errors="replace"))
            except OSError as exc:
                problems.append(f"{files['gpgpusim.config']} cannot be read: {exc}")
                continue
            if hashes:
                hashed[name] = {rel: _sha256(p) for rel, p in sorted(files.items())}
        configs[gpu] = AccelSimGPUConfig(
            config_id=gpu, folder=str(files["gpgpusim.config"].parent),
            gpgpusim_config=str(files["gpgpusim.config"]), trace_config=str(files["trace.config"]),
            core_clock_mhz=clocks[name], files=hashed.get(name, {}), name=name,
            folders=[str(d) for d in dirs[name]], paths={k: str(v) for k, v in files.items()},
            relation=pairing.relation, reason=pairing.reason, library_path=lib)
    return AccelSimSetup(binary=binary, binary_ok=binary_ok, configs_dir=configs_dir,
                         configs=configs, problems=problems, layout=layout,
                         available=sorted(folders), candidates=dict(candidates),
                         unrunnable=dict(sorted(unrunnable.items())), library_path=lib,
                         library_source=lib_source)


def discover_from(settings: Any, *, hashes: bool = False,
                  resolve: Callable[[str], str | None] | None = None,
                  specs: Iterable[Any] | None = None) -> AccelSimSetup:
    """:func:`discover` with the settings of ``settings``."""
    return discover(settings.accelsim_bin, settings.accelsim_configs, hashes=hashes, resolve=resolve,
                    config_map=list(getattr(settings, "accelsim_config_map", []) or []),
                    specs=specs, library=getattr(settings, "accelsim_ld_library_path", "") or "")


def discover_with(settings: Any, extra_specs: Iterable[Any] = (), *, hashes: bool = False) -> AccelSimSetup:
    """:func:`discover_from` over the built-in specs and ``extra_specs`` (custom specs: a folder
    named after one serves it), so what is offered and what a run accepts are the same GPUs."""
    from cascade.errors import DuplicateNameError
    from cascade.gpus import GPURegistry, default_registry

    reg = GPURegistry(default_registry())
    for spec in extra_specs:
        with contextlib.suppress(DuplicateNameError):
            reg.add(spec)

    def resolve(name: str) -> str | None:
        spec = reg.resolve(name)
        return spec.id if spec is not None else None

    return discover_from(settings, hashes=hashes, resolve=resolve, specs=list(reg))


def require(setup: AccelSimSetup, config_ids: list[str]) -> None:
    """Refuse (``ValidationError``) configs that cannot run accel-sim, naming the setting to fix
    and the configs that can."""
    can = ", ".join(setup.runnable()) or "none"
    if not setup.binary_ok:
        reason = next((p for p in setup.problems if BIN_VAR in p), f"{BIN_VAR} is not usable")
        raise ValidationError(
            f"model accel-sim cannot run: {reason}. Configs that can run accel-sim: {can}",
            field="model")
    lacking = [c for c in config_ids if c not in setup.configs]
    if lacking:
        why = "; ".join(f"{c}: {setup.serving(c).reason}" for c in lacking)
        raise ValidationError(
            f"model accel-sim has no Accel-Sim configuration for {', '.join(lacking)} ({why}): "
            f"point {CONFIGS_VAR} at an Accel-Sim checkout or add a config folder (named after "
            f"the Accel-Sim config or the GPU id, with gpgpusim.config and trace.config) to "
            f"{CONFIGS_VAR}, or pair one in {MAP_VAR}. Configs that can run accel-sim: {can}",
            field="configs")


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


def refuse_timeline_trace(trace_id: str, kind: str) -> None:
    """A timeline-only trace has no instruction files for Accel-Sim: ``ValidationError``."""
    if kind == "timeline":
        raise ValidationError(
            f"trace {trace_id} is a timeline-only trace (kernel durations, no instruction files): "
            "the accel-sim model needs Accel-Sim NVBit traces (kernel-N.traceg and kernelslist.g); "
            "use model auto, scaled or analytical for it", field="model")


# --------------------------------------------------------------------------- trace on disk


class InstructionTrace(msgspec.Struct, frozen=True, kw_only=True):
    """A trace's instruction files on local disk."""

    folder: str
    kernelslist: str
    """Path of kernelslist.g."""
    kernel_ids: list[int]
    """N of every ``kernel-N`` the kernelslist names, in launch order."""
    downloaded: bool = False
    """True when this call fetched the files (False: the node's cache had them)."""


def trace_cache_dir(data_path: Path) -> Path:
    """Instruction-trace cache under a service's data directory: ``{data_dir}/cache/traces``."""
    return Path(data_path) / "cache" / "traces"


_STEM = re.compile(r"^kernel-(\d+)")


def _kernel_stem(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    m = re.match(r"^(kernel-\d+(?:-ctx_0x[0-9a-fA-F]+)?)\.trace", base)
    return m.group(1) if m else base


def localize_kernelslist(text: str, local: dict[str, str]) -> str:
    """A kernelslist[.g] naming the local files: each kernel line becomes the local
    ``kernel-N.traceg`` (decompressed, beside the list); copies and other lines stay."""
    out = []
    for line in text.splitlines():
        entry = line.strip()
        if entry and "," not in entry and not entry.startswith("#") and ".trace" in entry:
            out.append(local.get(_kernel_stem(entry), entry.rsplit("/", 1)[-1]))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _kernel_number(name: str) -> int:
    m = _STEM.match(name)
    return int(m.group(1)) if m else 0


def _listed_ids(text: str) -> list[int]:
    from cascade.traces.files import kernel_stems

    out = []
    for stem in kernel_stems(text):
        m = _STEM.match(stem)
        if m:
            out.append(int(m.group(1)))
    return out


async def fetch_instruction_trace(storage: Storage, trace_id: str, kind: str, cache_dir: Path) -> InstructionTrace:
    """The trace's ``kernel-N.traceg`` files (xz decompressed) and ``kernelslist.g`` in
    ``{cache_dir}/{trace_id}/{listing hash}/``, downloaded once per node."""
    refuse_timeline_trace(trace_id, kind)
    prefix = raw_prefix(trace_id)
    kernels: dict[str, Any] = {}
    lists: dict[str, Any] = {}
    raw_only: list[str] = []
    async for info in storage.list(prefix):
        name = info.key[len(prefix):]
        try:
            tf = check_name(name)
        except ValidationError:
            continue
        if tf.kind == "kernel":
            if ".traceg" in name:
                kernels[name] = info
            else:
                raw_only.append(name)
        elif tf.kind == "kernelslist":
            lists[name] = info
    if not kernels:
        if raw_only:
            raise ValidationError(
                f"trace {trace_id} has only raw .trace files ({raw_only[0]}, ...): Accel-Sim reads "
                "post-processed kernel-N.traceg files; run Accel-Sim's post-traces-processing on "
                "the trace folder and upload the .traceg files and kernelslist.g", field="model")
        raise ValidationError(f"trace {trace_id} has no instruction files (kernel-N.traceg) in "
                              f"s3 {prefix}: the accel-sim model cannot simulate it", field="model")
    listing = sorted(f"{k}:{v.size}:{v.etag}" for k, v in {**kernels, **lists}.items())
    digest = hashlib.sha256("\n".join(listing).encode()).hexdigest()[:16]
    root = Path(cache_dir) / trace_id
    folder = root / digest
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    lock_path = root / ".lock"
    fd = await asyncio.to_thread(os.open, str(lock_path), os.O_CREAT | os.O_RDWR, 0o644)
    downloaded = False
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        if not (folder / _COMPLETE).is_file():
            await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
            for name, info in sorted(kernels.items()):
                local = folder / (name.removesuffix(".xz"))
                await _download(storage, info.key, local, xz=name.endswith(".xz"))
            names = {_kernel_stem(n): n.removesuffix(".xz") for n in kernels}
            listed = lists.get("kernelslist.g") or lists.get("kernelslist")
            if listed is not None:
                text = (await storage.get_bytes(listed.key)).decode(errors="replace")
                (folder / "kernelslist.g").write_text(localize_kernelslist(text, names))
            else:
                order = sorted(names.values(), key=_kernel_number)
                (folder / "kernelslist.g").write_text("".join(f"{n}\n" for n in order))
            (folder / _COMPLETE).write_text(f"{time.time()}\n")
            downloaded = True
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    klist = folder / "kernelslist.g"
    ids = _listed_ids(klist.read_text(errors="replace"))
    if not ids:
        raise ValidationError(f"{klist} names no kernel-N.traceg file", field="model")
    return InstructionTrace(folder=str(folder), kernelslist=str(klist), kernel_ids=ids,
                            downloaded=downloaded)


async def _download(storage: Storage, key: str, local: Path, *, xz: bool = False) -> None:
    tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.part")
    dec = lzma.LZMADecompressor() if xz else None
    try:
        with tmp.open("wb") as fh:
            async for chunk in storage.get_stream(key):
                if dec is None:
                    await asyncio.to_thread(fh.write, chunk)
                    continue
                pending = chunk
                while pending:  # concatenated xz streams (as `xz` writes them) are one file
                    data = dec.decompress(pending)
                    if data:
                        await asyncio.to_thread(fh.write, data)
                    pending = b""
                    if dec.eof:
                        pending = dec.unused_data
                        dec = lzma.LZMADecompressor()
        os.replace(tmp, local)
    except lzma.LZMAError as exc:
        raise ValidationError(f"{key} is not valid xz: {exc}", field="model") from None
    finally:
        if tmp.exists():
            tmp.unlink()


# --------------------------------------------------------------------------- the subprocess


class AccelSimOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One finished Accel-Sim run."""

    kernels: list[Any]
    """:class:`SimulatedKernel` per kernel reported, in output order."""
    returncode: int
    first_line_s: float | None
    """Seconds from starting the process to its first output line."""
    wall_s: float
    lines: int
    tail: str
    """Last lines of output."""
    statistics: list[Any] = []
    """:class:`~cascade.engine.accelsim.KernelStatistics` per kernel, in output order."""


def accelsim_argv(binary: str, kernelslist: str, config_files: list[str]) -> list[str]:
    """``accel-sim.out -trace kernelslist.g -config gpgpusim.config -config trace.config``."""
    args = [str(binary), "-trace", str(kernelslist)]
    for cfg in config_files:
        args += ["-config", str(cfg)]
    return args


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid: int) -> list[int]:
    """Pids of the (non-zombie) processes in process group ``pgid`` (Linux ``/proc``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, SIGKILL it after :data:`KILL_GRACE_S`, reap the leader and
    wait (briefly) until no member of the group is left running."""
    pgid = proc.pid
    if proc.returncode is None:
        kill_group(pgid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE_S)
    if kill_group(pgid, signal.SIGKILL):
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            left: list[int] = await asyncio.to_thread(group_alive, pgid)
            if not left:
                break
            await asyncio.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()


_MISSING_FILE = re.compile(r"(?:Could not open configuration file (\S+)|Cannot open config file '([^']+)')")


def missing_file_hint(tail: str, paths: dict[str, str]) -> str:
    """When Accel-Sim could not open a file a config names: which file, and what to do."""
    m = _MISSING_FILE.search(tail)
    if not m:
        return ""
    name = m.group(1) or m.group(2)
    folders = list(dict.fromkeys(str(Path(p).parent) for p in paths.values()))
    return (f" ({name}, named by the config relative to Accel-Sim's working directory, is not in "
            f"the config folder {' or '.join(folders) or '(none)'}: add it there; every file of "
            "the folder is linked into the working directory)")


_REFUSED_TRACE = re.compile(r"unsupported binary version: *(-?\d+)")


def refused_trace_hint(tail: str) -> str:
    """When Accel-Sim refused the trace (it prints ``unsupported binary version: N`` and exits
    0): what that means and what to do."""
    m = _REFUSED_TRACE.search(tail)
    if not m:
        return ""
    return (f" (Accel-Sim has no opcode table for the `-binary version = {m.group(1)}` in the "
            "kernel-N.traceg header: the trace was not taken by Accel-Sim's NVBit tracer from a GPU "
            "this Accel-Sim supports, or its header was rewritten; trace the program again with "
            "util/tracer_nvbit of this checkout and run post-traces-processing)")


def failure_message(returncode: int, kernels_done: int, tail: str, *, paths: Mapping[str, str] | None = None,
                    kernelslist: str = "", library: str = "") -> str:
    """Why an Accel-Sim run failed, with Accel-Sim's own last lines; '' when it did not (it
    exited 0 and simulated at least one kernel)."""
    listed = ""
    if kernelslist:
        try:
            n = len(_listed_ids(Path(kernelslist).read_text(errors="replace")))
            listed = f" of the {n} kernels {Path(kernelslist).name} names"
        except OSError:
            pass
    if returncode == 0:
        if kernels_done:
            return ""
        return (f"accel-sim exited with 0 having simulated none{listed}{refused_trace_hint(tail)}; "
                f"last output:\n{tail}")
    how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with {returncode}"
    loader = loader_failure(returncode, tail)
    hint = (f" (it could not start: {loader}; {library_fix(library, 'LD_LIBRARY_PATH')})"
            if loader and kernels_done == 0 else missing_file_hint(tail, dict(paths or {})))
    return f"accel-sim {how} after {kernels_done} kernels{hint}{refused_trace_hint(tail)}; last output:\n{tail}"


def _staged(config: AccelSimGPUConfig | list[str]) -> tuple[dict[str, str], list[str]]:
    if isinstance(config, AccelSimGPUConfig):
        paths = dict(config.paths) or {Path(p).name: p for p in (config.gpgpusim_config,
                                                                 config.trace_config)}
        return paths, list(CONFIG_FILES)
    return folder_of_files([str(c) for c in config])


async def run_accelsim(
    binary: str,
    kernelslist: str,
    config: AccelSimGPUConfig | list[str],
    workdir: str | Path,
    *,
    timeout_s: float = 3600.0,
    on_kernel: Callable[[SimulatedKernel], Awaitable[None]] | None = None,
    on_start: Callable[[int], None] | None = None,
    core_clock_mhz: float | None = None,
    env: dict[str, str] | None = None,
) -> AccelSimOutcome:
    """Run Accel-Sim on ``kernelslist`` (see the module docstring) and return its kernels.

    ``config``: the GPU's config folder, or config files by path (every file of their folders
    is staged too). The working directory holds every file of the folder (:func:`stage_config`)
    and Accel-Sim is given ``-config gpgpusim.config -config trace.config`` relative to it, as
    Accel-Sim's own run scripts do, so includes such as ``-inter_config_file`` resolve.
    ``on_kernel`` is awaited for each kernel as its statistics appear; ``on_start`` gets the
    process (group) id. Cancelling the awaiting task or passing ``timeout_s`` kills the
    process group (:class:`JobTimeoutError` for the timeout).
    """
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    if env is None:
        env = run_env(config.library_path if isinstance(config, AccelSimGPUConfig) else "")
    library = env.get("LD_LIBRARY_PATH", "")
    paths, names = _staged(config)
    await asyncio.to_thread(stage_config, paths, work)
    args = accelsim_argv(binary, kernelslist, names)
    t0 = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=str(work), start_new_session=True, env=env,
        )
    except OSError as exc:
        raise AccelSimError(f"cannot start accel-sim {binary} ({BIN_VAR}): {exc}") from None
    if on_start is not None:
        on_start(proc.pid)
    parser = AccelSimOutputParser(binary, core_clock_mhz=core_clock_mhz)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    first_line_s: float | None = None
    assert proc.stdout is not None
    stdout = proc.stdout

    async def pump() -> None:
        nonlocal first_line_s
        pending = b""
        while True:
            chunk = await stdout.read(1 << 16)
            if not chunk:
                break
            if first_line_s is None:
                first_line_s = time.perf_counter() - t0
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                await _line(raw)
            if len(pending) > (1 << 20):  # a runaway line: keep its start only
                await _line(pending[:4096])
                pending = b""
        if pending:
            await _line(pending)

    async def _line(raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip("\r")
        tail.append(line)
        kernel = parser.feed(line)
        if kernel is not None and on_kernel is not None:
            await on_kernel(kernel)

    try:
        async with asyncio.timeout(timeout_s):
            await pump()
            returncode = await proc.wait()
    except TimeoutError:
        await _stop_group(proc)
        raise JobTimeoutError(
            f"accel-sim ran past {timeout_s:g} s (CASCADE_SIM_TIMEOUT_S); its process group "
            f"{proc.pid} was killed after {parser.lineno} lines, "
            f"{len(parser.kernels)} kernels done") from None
    finally:
        await _stop_group(proc)
    last = parser.finish()
    if last is not None and on_kernel is not None:
        await on_kernel(last)
    text_tail = "\n".join(tail)[-TAIL_CHARS:]
    failure = failure_message(returncode, len(parser.kernels), text_tail, paths=paths,
                              kernelslist=kernelslist, library=library)
    if failure:
        raise AccelSimError(failure, returncode=returncode, tail=text_tail)
    return AccelSimOutcome(kernels=list(parser.kernels), returncode=returncode,
                           first_line_s=first_line_s, wall_s=time.perf_counter() - t0,
                           lines=parser.lineno, tail=text_tail, statistics=list(parser.statistics))


def run_accelsim_blocking(binary: str, trace_dir: str, config: list[str] | AccelSimGPUConfig, *,
                          timeout_s: float = 3600.0, env: dict[str, str] | None = None
                          ) -> list[SimulatedKernel]:
    """Run Accel-Sim to completion without an event loop (``cascade predict``, scripts): a plain
    subprocess in its own process group, killed whole on timeout. ``config``: config files by
    path, or a discovered config folder (run with its library path)."""
    import tempfile

    kernelslist = Path(trace_dir).resolve() / "kernelslist.g"
    if not kernelslist.is_file():
        raise ValidationError(f"{kernelslist} does not exist: the accel-sim model needs an Accel-Sim "
                              "trace folder (kernelslist.g and kernel-N.traceg)", field="trace")
    if env is None:
        env = run_env(config.library_path if isinstance(config, AccelSimGPUConfig) else "")
    with tempfile.TemporaryDirectory(prefix="cascade-accelsim-") as work:
        paths, names = _staged(config)
        stage_config(paths, Path(work))
        return _run_blocking(binary, str(kernelslist), names, work, trace_dir, timeout_s, env, paths,
                             config.core_clock_mhz if isinstance(config, AccelSimGPUConfig) else None)


def _run_blocking(binary: str, kernelslist: str, names: list[str], work: str, trace_dir: str,
                  timeout_s: float, env: dict[str, str], paths: dict[str, str],
                  clock: float | None) -> list[SimulatedKernel]:
    parser = AccelSimOutputParser(binary, core_clock_mhz=clock)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        proc = subprocess.Popen(accelsim_argv(binary, kernelslist, names),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, cwd=work, start_new_session=True, env=env)
    except OSError as exc:
        raise AccelSimError(f"cannot start accel-sim {binary}: {exc}") from None
    timer = threading.Timer(timeout_s, kill_group, (proc.pid,))
    timer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n")
            tail.append(line)
            parser.feed(line)
        code = proc.wait()
    finally:
        timer.cancel()
        kill_group(proc.pid)
        proc.wait()
    if timer.finished.is_set() and code == -signal.SIGKILL:
        raise JobTimeoutError(f"accel-sim ran past {timeout_s:g} s on {trace_dir}; its process "
                              "group was killed")
    parser.finish()
    text_tail = "\n".join(tail)[-TAIL_CHARS:]
    failure = failure_message(code, len(parser.kernels), text_tail, paths=paths, kernelslist=kernelslist,
                              library=env.get("LD_LIBRARY_PATH", ""))
    if failure:
        raise AccelSimError(failure, returncode=code, tail=text_tail)
    return list(parser.kernels)


def clean_workdir(path: str | Path) -> None:
    """Remove a simulation's working directory (ignoring what is already gone)."""
    shutil.rmtree(path, ignore_errors=True)


def simulate(binary: str, trace_dir: str, config_files: list[str] | AccelSimGPUConfig, *,
             timeout_s: float = 3600.0, env: dict[str, str] | None = None) -> AccelSimConfig:
    """Run Accel-Sim to completion (:func:`run_accelsim_blocking`) and return the
    :class:`~cascade.engine.accelsim.AccelSimConfig` that hands its cycles to
    ``predict(..., model="accel-sim", config=...)``: kernels by the ``kernel-N`` file Accel-Sim
    processed, else by their kernelslist order, else by launch uid."""
    sims = run_accelsim_blocking(binary, trace_dir, config_files, timeout_s=timeout_s, env=env)
    listed = _listed_ids((Path(trace_dir) / "kernelslist.g").read_text(errors="replace"))
    cycles: dict[int, int] = {}
    for k in sims:
        by_list = listed[k.uid - 1] if 0 < k.uid <= len(listed) else k.uid
        cycles[int(k.kernel_id if k.kernel_id is not None else by_list)] = k.cycles
    return AccelSimConfig(simulated_cycles={str(k): c for k, c in cycles.items()},
                          core_clock_mhz=sims[0].core_clock_mhz)
