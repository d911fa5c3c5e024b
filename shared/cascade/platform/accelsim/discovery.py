"""What the settings configure (:func:`discover`): the binary (started once to see that its
libraries load: :func:`probe_binary`), the config folders found and which one serves each GPU
(:mod:`cascade.gpus.accelsim_names`: by chip, then architecture; ``CASCADE_ACCELSIM_CONFIG_MAP``),
and why a folder serves none; :func:`require` refuses a run that cannot be made."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cascade.engine.accelsim import core_clock_of_config
from cascade.errors import ConfigError, ValidationError
from cascade.gpus.accelsim_names import (
    CONFIG_CHIPS,
    ConfigPairing,
    pairings_for,
    parse_overrides,
    unpaired_reason,
)
from cascade.platform.accelsim.configs import (
    BIN_VAR,
    BUILD_DOCS,
    CONFIG_FILES,
    CONFIGS_VAR,
    MAP_VAR,
    AccelSimGPUConfig,
    AccelSimSetup,
    config_folders,
)
from cascade.platform.accelsim.failures import library_fix, loader_failure
from cascade.platform.accelsim.library import library_path, run_env
from cascade.platform.accelsim.process import kill_group

#: Seconds the start-up probe lets the binary run before taking it as started.
PROBE_TIMEOUT_S = 10.0
#: Seconds a failed probe is remembered (a library installed meanwhile is seen after this).
PROBE_RETRY_S = 30.0
_PROBED: dict[tuple[str, int, int, str], tuple[float, str]] = {}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
