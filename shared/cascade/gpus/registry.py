"""GPU spec registry: lookup by id or driver-reported device name, user-added specs."""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from cascade.errors import ConfigError, DuplicateNameError, UnknownGPUError
from cascade.gpus.spec import ARCHES, GPUSpec, plausibility_error


def normalize_name(name: str) -> str:
    """Canonical lookup key: case-insensitive, ``_``/``-``/spaces treated alike."""
    return re.sub(r"[\s_\-]+", " ", name.strip().lower())


def spec_from_mapping(data: dict[str, Any], source: str = "<mapping>", *,
                      strict: bool = False) -> GPUSpec:
    """Validate a decoded TOML/JSON mapping into a :class:`GPUSpec` (errors name the source).

    ``strict`` refuses strings for numbers (JSON from clients); files are lenient.
    """
    data = {k: v for k, v in data.items() if k != "notes"}
    try:
        spec = msgspec.convert(data, GPUSpec, strict=strict)
    except msgspec.ValidationError as exc:
        bounds = plausibility_error(str(exc), data)
        if bounds is not None:
            field, expected, value = bounds
            raise ConfigError(f"GPU spec {source} ({data.get('id', '?')}): {field}",
                              value, expected) from None
        raise ConfigError(f"GPU spec {source}", data.get("id", "?"), str(exc)) from None
    if spec.arch not in ARCHES:
        raise ConfigError(f"GPU spec {source}: arch", spec.arch, f"one of {', '.join(ARCHES)}")
    return spec


def load_spec_file(path: str | Path) -> GPUSpec:
    """Load one spec from a ``.toml`` or ``.json`` file."""
    path = Path(path)
    try:
        text = path.read_text()
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError("GPU spec file", str(path), "a .toml or .json file")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError("GPU spec file", str(path), f"valid {path.suffix[1:].upper()} ({exc})") from None
    return spec_from_mapping(data, str(path))


class GPURegistry:
    """GPU specs by id, with case-insensitive lookup by id or alias."""

    def __init__(self, specs: Iterable[GPUSpec] = ()) -> None:
        self._specs: dict[str, GPUSpec] = {}
        self._keys: dict[str, str] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: GPUSpec, *, replace: bool = False) -> GPUSpec:
        """Register a spec; an id or alias already taken by another spec is an error."""
        keys = [normalize_name(spec.id), *(normalize_name(a) for a in spec.aliases)]
        for key in keys:
            owner = self._keys.get(key)
            if owner is not None and owner != spec.id and not replace:
                raise DuplicateNameError(f"GPU name {key!r} of {spec.id} is already used by {owner}")
        if spec.id in self._specs and not replace:
            raise DuplicateNameError(f"GPU spec {spec.id} is already registered")
        if spec.id in self._specs:
            self.remove(spec.id)
        self._specs[spec.id] = spec
        for key in keys:
            self._keys[key] = spec.id
        return spec

    def remove(self, spec_id: str) -> None:
        """Drop a spec and its aliases."""
        spec = self.get(spec_id)
        del self._specs[spec.id]
        self._keys = {k: v for k, v in self._keys.items() if v != spec.id}

    def get(self, name: str | GPUSpec) -> GPUSpec:
        """Spec by id or alias (case-insensitive); :class:`UnknownGPUError` lists known ids."""
        if isinstance(name, GPUSpec):
            return name
        spec_id = self._keys.get(normalize_name(name))
        if spec_id is None:
            raise UnknownGPUError(name, self._specs, suggestions=suggest_gpus(self, name),
                                  hint=mig_hint(self, name) or accelsim_config_hint(name))
        return self._specs[spec_id]

    __getitem__ = get

    def names(self) -> dict[str, str]:
        """Every lookup key (normalised id or alias) -> spec id."""
        return dict(self._keys)

    def resolve(self, name: str) -> GPUSpec | None:
        """Like :meth:`get` but ``None`` for unknown names."""
        spec_id = self._keys.get(normalize_name(name))
        return self._specs[spec_id] if spec_id else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_name(name) in self._keys

    def __iter__(self) -> Iterator[GPUSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: (s.sm_version, s.id)))

    def __len__(self) -> int:
        return len(self._specs)

    def ids(self) -> list[str]:
        """Known spec ids, sorted."""
        return sorted(self._specs)

    def load_dir(self, directory: str | Path, *, replace: bool = False) -> list[GPUSpec]:
        """Load every ``*.toml`` / ``*.json`` spec in a directory; returns them."""
        directory = Path(directory)
        if not directory.is_dir():
            raise ConfigError("GPU spec directory", str(directory), "an existing directory")
        loaded = []
        for path in sorted([*directory.glob("*.toml"), *directory.glob("*.json")]):
            loaded.append(self.add(load_spec_file(path), replace=replace))
        return loaded


_VENDOR_WORDS = re.compile(r"\b(nvidia|geforce|tesla|quadro|rtx|gtx)\b")


def _bare(key: str) -> str:
    return re.sub(r"\s+", " ", _VENDOR_WORDS.sub(" ", key)).strip()


_SM_PREFIX = re.compile(r"^sm\s?(\d+)\b")


#: A MIG instance's device name, as the driver reports it: the whole GPU's name, then
#: ``MIG <compute slices>g.<memory>gb`` (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``).
_MIG = re.compile(r"^(?P<gpu>.+?)\s+MIG\s+(?P<g>\d+)g\.(?P<mem>\d+)gb\b", re.IGNORECASE)


def mig_hint(registry: GPURegistry, name: str) -> str:
    """For a MIG instance's device name: the GPU it is a slice of, and why its times are not that
    GPU's ('' for any other name)."""
    hit = _MIG.match(name.strip())
    if hit is None:
        return ""
    parent = registry.resolve(hit["gpu"])
    whole = parent.id if parent is not None else repr(hit["gpu"])
    return (f"a MIG instance of {whole}: {hit['g']} of its 7 compute slices and {hit['mem']} GB of its memory, with "
            "the matching share of its L2 and DRAM bandwidth, so its kernels' times are not the whole GPU's and "
            "no spec models a slice; capture the trace on a whole GPU (MIG off), or add the instance as a custom "
            "spec (its SMs, memory and bandwidth) and name that")


def accelsim_config_hint(name: str) -> str:
    """For an Accel-Sim config name given where a GPU is wanted: what it models and that runs
    name the GPU ('' for any other name)."""
    from cascade.gpus.accelsim_names import CONFIG_CHIPS, describe_config

    key = next((c for c in CONFIG_CHIPS if normalize_name(c) == normalize_name(name)), None)
    if key is None:
        return ""
    return (f"{describe_config(key)}: it is an Accel-Sim config name, not a Cascade GPU; name the "
            "GPU to run (cascade gpus lists which Accel-Sim config serves each)")


def _accelsim_suggestions(registry: GPURegistry, name: str) -> list[str] | None:
    """The GPUs an Accel-Sim config name serves, same chip first (None: not such a name)."""
    from cascade.gpus.accelsim_names import CONFIG_CHIPS, candidates_for

    key = next((c for c in CONFIG_CHIPS if normalize_name(c) == normalize_name(name)), None)
    if key is None:
        return None
    ranked: list[tuple[int, int, str]] = []
    for spec in registry:
        for rank, p in enumerate(candidates_for(spec)):
            if p.config == key:
                ranked.append((p.relation != "same chip", rank, spec.id))
    return [gpu for *_, gpu in sorted(ranked)]


def suggest_gpus(registry: GPURegistry, name: str, n: int = 3,
                 extra: Iterable[str] = ()) -> list[str]:
    """Spec ids (and ``extra`` names, e.g. custom specs) closest to an unknown GPU name,
    best first: for an Accel-Sim config name (``SM7_TITANV``) the GPUs it serves, same chip
    first; else difflib over ids and aliases, with and without vendor words, among the specs of
    the compute capability an ``SM<N>_`` prefix names when any has it (``SM6_...``: Pascal)."""
    served = _accelsim_suggestions(registry, name)
    if served is not None:
        return served[:n]
    want = normalize_name(name)
    keys = registry.names()
    for e in extra:
        keys.setdefault(normalize_name(e), e)
    candidates: dict[str, str] = {}
    for key, owner in keys.items():
        candidates.setdefault(key, owner)
        candidates.setdefault(_bare(key), owner)
    m = _SM_PREFIX.match(want)
    if m:
        digits = m.group(1)
        same_sm = {sid for sid in set(candidates.values())
                   if (spec := registry.resolve(sid)) is not None and str(spec.sm_version).startswith(digits)}
        if same_sm:
            candidates = {k: v for k, v in candidates.items() if v in same_sm}
    scored: dict[str, float] = {}
    for probe in {want, _bare(want)} - {""}:
        for key in difflib.get_close_matches(probe, list(candidates), n=12, cutoff=0.5):
            score = difflib.SequenceMatcher(None, probe, key).ratio()
            owner = candidates[key]
            scored[owner] = max(scored.get(owner, 0.0), score)
    return [k for k, _ in sorted(scored.items(), key=lambda kv: -kv[1])[:n]]


def builtin_specs() -> list[GPUSpec]:
    """The specs shipped in ``cascade/gpus/specs/*.toml``."""
    out = []
    for entry in sorted(resources.files("cascade.gpus").joinpath("specs").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            out.append(spec_from_mapping(tomllib.loads(entry.read_text()), f"specs/{entry.name}"))
    return out


_DEFAULT: GPURegistry | None = None


def default_registry() -> GPURegistry:
    """The process-wide registry holding the built-in specs (built on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = GPURegistry(builtin_specs())
    return _DEFAULT


def get_gpu(name: str | GPUSpec) -> GPUSpec:
    """Shortcut for ``default_registry().get(name)``."""
    return default_registry().get(name)


def known_gpu_names() -> list[str]:
    """Every built-in spec id and alias (what ``get_gpu`` resolves), sorted."""
    names = {n for s in default_registry() for n in (s.id, *s.aliases)}
    return sorted(names)
