"""Local trace inputs, read by every command that takes a trace path (``cascade predict``,
``cascade trace``, ``cascade validate``): kernel-table files (CSV, Parquet, .npz; the GPU from a
``manifest.json`` beside one that names it, as a bundled sample's), folders whose manifest names
their kernel table, prepared bundles, Accel-Sim trace folders, single kernel trace files and
timelines (PyTorch profiler, Nsight Systems SQLite, Cascade JSONL).

Each kind is a :class:`TraceLoader` in :data:`LOADERS`, tried in registration order; add one
with ``LOADERS.register(name, None, TraceLoader(accepts, load))``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from cascade import tableio
from cascade.errors import TraceFormatError, UnknownGPUError, ValidationError
from cascade.gpus import get_gpu
from cascade.gpus.registry import GPURegistry, default_registry, mig_hint, suggest_gpus
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.registry import Registry
from cascade.traces.bundle import KERNELS_NAME, MANIFEST_NAME, load_bundle
from cascade.traces.folder import parse_trace_folder
from cascade.traces.parse import kernel_id_from_name, parse_kernel_file
from cascade.traces.timeline import read_timeline


@dataclass(frozen=True, slots=True)
class LoadedTrace:
    """A kernel table loaded from a local input, with what the input says about itself."""

    table: KernelTable
    source: GPUSpec | None = None
    """The GPU spec the input names (a bundle's manifest), resolved already."""
    device: str = ""
    """The device name the trace file records (PyTorch ``deviceProperties``, Nsight
    ``TARGET_INFO_GPU``), to be resolved against the caller's registry ('' if none)."""
    warnings: tuple[str, ...] = ()
    """What the loader skipped or could not read, one sentence each."""


@dataclass(frozen=True, slots=True)
class TraceLoader:
    """One kind of local input: a predicate on the path and the function that reads it."""

    accepts: Callable[[Path], bool]
    load: Callable[[Path], LoadedTrace]


#: The loaders, tried in registration order (the kinds are disjoint).
LOADERS: Registry[TraceLoader] = Registry("trace loader")


def _is_table_file(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(tableio.SUFFIXES)


class _TableManifest(msgspec.Struct, frozen=True, kw_only=True):
    """What a ``manifest.json`` beside a kernel table may say about it (a bundled sample's
    synthetic replica: ``timeline``, the table's file name, and ``source_gpu``); other fields
    are the manifest's own."""

    timeline: str = ""
    source_gpu: str = ""


#: The largest manifest read for a table's GPU (a sample's is ~2 KB).
_MANIFEST_MAX_BYTES = 1 << 20


def _manifest_of(folder: Path) -> _TableManifest | None:
    """The folder's ``manifest.json`` as a table manifest; None where there is none, it is
    oversized, or it is not one (another tool's manifest is not this input's business)."""
    path = folder / MANIFEST_NAME
    try:
        if not path.is_file() or path.stat().st_size > _MANIFEST_MAX_BYTES:
            return None
        found = msgspec.json.decode(path.read_bytes(), type=_TableManifest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return found if found.timeline and found.source_gpu else None


def _device_beside(path: Path) -> str:
    """The GPU a ``manifest.json`` next to a kernel-table file names for it (the file is its
    ``timeline``), to be resolved like a device name a trace records; '' if none does."""
    found = _manifest_of(path.parent)
    return found.source_gpu if found is not None and found.timeline == path.name else ""


def _is_table_folder(path: Path) -> bool:
    """A folder whose ``manifest.json`` names a kernel-table file in it and the GPU it was
    captured on (a bundled sample's ``synthetic/``); a prepared bundle is not one."""
    if not path.is_dir() or (path / KERNELS_NAME).is_file():
        return False
    found = _manifest_of(path)
    return found is not None and _is_table_file(path / Path(found.timeline).name)


def _named_table(folder: Path) -> Path:
    """The kernel-table file a folder's manifest names (its ``timeline``)."""
    found = _manifest_of(folder)
    if found is None:
        raise TraceFormatError(str(folder / MANIFEST_NAME), None,
                               "a manifest naming the folder's kernel table (timeline) and its GPU (source_gpu)")
    return folder / Path(found.timeline).name


def load_table_folder(path: Path) -> LoadedTrace:
    """The kernel table a folder's manifest names, with the GPU it names."""
    return load_table_file(_named_table(path))


def load_table_file(path: Path) -> LoadedTrace:
    """A Cascade kernel table (CSV, CSV.gz, Parquet), with the GPU a ``manifest.json`` beside
    it names for it."""
    return LoadedTrace(tableio.read_table(path), device=_device_beside(path))


def load_npz_file(path: Path) -> LoadedTrace:
    """A kernel table saved as ``.npz``."""
    return LoadedTrace(KernelTable.load_npz(path))


_KERNEL_SUFFIXES = (".trace", ".traceg", ".trace.xz", ".traceg.xz")
_TIMELINE_SUFFIXES = (".json", ".json.gz", ".jsonl", ".sqlite", ".sqlite3", ".db")


def is_bundle_dir(path: Path) -> bool:
    """A folder holding a prepared bundle (manifest.json + kernels.npz)."""
    return path.is_dir() and (path / MANIFEST_NAME).is_file() and (path / KERNELS_NAME).is_file()


def is_trace_folder(path: Path) -> bool:
    """A folder of Accel-Sim traces (a kernelslist or kernel-N trace files)."""
    if not path.is_dir():
        return False
    if (path / "kernelslist.g").is_file() or (path / "kernelslist").is_file():
        return True
    return any(kernel_id_from_name(p.name) is not None for p in path.iterdir())


def load_bundle_dir(path: Path) -> LoadedTrace:
    """The bundle's kernels and the GPU its manifest says the trace was captured on."""
    bundle = load_bundle(path)
    source = bundle.manifest.source_gpu
    return LoadedTrace(bundle.kernels, get_gpu(source) if source else None)


_ACCELSIM_FILES = ("kernelslist", "kernelslist.g", "stats.csv")


def load_trace_folder(path: Path) -> LoadedTrace:
    """Parse every kernel of an Accel-Sim trace folder into per-kernel features.

    A kernel file that fails to parse fails only itself (named in the warnings, with the
    reason); every file that is not part of an Accel-Sim trace is listed as skipped."""
    result = parse_trace_folder(path)
    if not result.kernels:
        detail = (f" ({len(result.failures)} failed; first: {next(iter(result.failures.values()))})"
                  if result.failures else "")
        raise TraceFormatError(str(path), None, f"at least one parsable kernel trace file{detail}")
    warnings = []
    total = len(result.kernels) + len(result.failures)
    if result.failures:
        warnings.append(f"{path}: {len(result.kernels)} of {total} kernels; failed: "
                        + "; ".join(result.failures.values()))
    for p in sorted(path.iterdir()):
        if p.name.startswith(".") or p.name in _ACCELSIM_FILES or kernel_id_from_name(p.name) is not None:
            continue
        warnings.append(f"{p.name}: skipped (not part of an Accel-Sim trace folder)")
    return LoadedTrace(result.table(), None, warnings=tuple(warnings))


def load_kernel_file(path: Path) -> LoadedTrace:
    """One kernel trace file (.trace/.traceg, optionally .xz)."""
    return LoadedTrace(parse_kernel_file(path).table())


def load_timeline_file(path: Path) -> LoadedTrace:
    """A PyTorch profiler Chrome trace, Nsight Systems SQLite export or Cascade JSONL timeline,
    with the device name it records."""
    tl = read_timeline(path)
    return LoadedTrace(tl.table, None, device=tl.device, warnings=tl.warnings)


LOADERS.register("bundle", None, TraceLoader(is_bundle_dir, load_bundle_dir))
LOADERS.register("kernel-table folder", None, TraceLoader(_is_table_folder, load_table_folder))
LOADERS.register("accel-sim folder", None, TraceLoader(is_trace_folder, load_trace_folder))
LOADERS.register("kernel trace file", None, TraceLoader(
    lambda p: p.is_file() and p.name.lower().endswith(_KERNEL_SUFFIXES), load_kernel_file))
LOADERS.register("timeline", None, TraceLoader(
    lambda p: p.is_file() and p.name.lower().endswith(_TIMELINE_SUFFIXES), load_timeline_file))
LOADERS.register("kernel table", None, TraceLoader(_is_table_file, load_table_file))
LOADERS.register("npz kernel table", None, TraceLoader(
    lambda p: p.is_file() and p.suffix.lower() == ".npz", load_npz_file))


def load_trace(path: str | Path) -> LoadedTrace:
    """Load a kernel table from ``path`` with the first loader that accepts it."""
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(str(p), None, "an existing kernel-table CSV, .npz, bundle or trace folder")
    for _, loader in LOADERS.items():
        if loader.accepts(p):
            return loader.load(p)
    found = None
    if p.is_file() and "accelsim" in p.name.lower().replace("-", "").replace("_", ""):
        found = f"{p.name}: an Accel-Sim log (results, not a trace; give its trace folder)"
    raise TraceFormatError(str(p), None, _ACCEPTED, found)


#: What :func:`load_trace` accepts, for its error.
_ACCEPTED = ("a Cascade kernel-table CSV (.csv, .csv.gz), Parquet (.parquet) or .npz file; a "
             "PyTorch profiler Chrome trace (.json, .json.gz), Nsight Systems SQLite export "
             "(.sqlite) or Cascade JSONL timeline (.jsonl); an Accel-Sim kernel trace (.traceg, "
             ".trace, optionally .xz) or trace folder; a Cascade bundle folder; or a folder whose "
             "manifest.json names its kernel table (timeline) and GPU (source_gpu)")


@dataclass(frozen=True, slots=True)
class StreamedTrace:
    """A local input as batches: kernel-table files (CSV, Parquet) stream in batches of
    bounded size; every other input (bundles, trace folders, timelines) is one batch."""

    batches: Iterator[tableio.Batch]
    source: GPUSpec | None = None
    device: str = ""
    warnings: tuple[str, ...] = ()


def stream_trace(path: str | Path, batch_rows: int = tableio.BATCH_ROWS) -> StreamedTrace:
    """Like :func:`load_trace`, in batches of at most ``batch_rows`` rows for table files."""
    p = Path(path)
    if _is_table_folder(p):
        p = _named_table(p)
    if _is_table_file(p):
        return StreamedTrace(tableio.iter_batches(p, batch_rows), device=_device_beside(p))
    loaded = load_trace(p)
    return StreamedTrace(iter([tableio.Batch(loaded.table)]), loaded.source, loaded.device,
                         loaded.warnings)


def load_kernel_table(path: str | Path, registry: GPURegistry | None = None
                      ) -> tuple[KernelTable, GPUSpec | None]:
    """Load a kernel table and the GPU the input says it was captured on (None if it names
    none, or names one ``registry`` does not know)."""
    loaded = load_trace(path)
    if loaded.source is not None or not loaded.device:
        return loaded.table, loaded.source
    return loaded.table, (registry or default_registry()).resolve(loaded.device)


def source_of_trace(registry: GPURegistry, given: str | None,
                    loaded: LoadedTrace | StreamedTrace, *,
                    override: bool = False, what: str = "--source",
                    override_flag: str = "--force-source") -> GPUSpec | None:
    """The source GPU of a trace: the one it names by default, ``given`` when the caller
    names one. A ``given`` GPU that contradicts the trace's own is an error naming both
    (``override`` accepts it on purpose); a trace naming a GPU the registry does not know,
    with nothing given, is an error that suggests the closest known ones."""
    named = loaded.source
    if named is None and loaded.device:
        named = registry.resolve(loaded.device)
    if given:
        spec = registry.get(given)
        if named is not None and named.id != spec.id and not override:
            device = f" ({loaded.device!r})" if loaded.device else ""
            raise ValidationError(
                f"the trace was recorded on {named.id}{device} but {given!r} ({spec.id}) was "
                f"given; drop {what} to use the trace's GPU, or pass {override_flag} to "
                f"simulate it as captured on {spec.id}", field=what)
        slice_of = mig_hint(registry, loaded.device) if named is None and loaded.device else ""
        if slice_of and not override:  # a slice's times given as a whole GPU's: never silently
            raise ValidationError(f"the trace was recorded on {loaded.device!r}, {slice_of}; pass "
                                  f"{override_flag} to simulate it as captured on {spec.id} anyway", field=what)
        return spec
    if named is None and loaded.device:
        raise UnknownGPUError(loaded.device, registry.ids(),
                              suggestions=suggest_gpus(registry, loaded.device),
                              hint=mig_hint(registry, loaded.device)
                              or f"the trace names this GPU; pass {what} SPEC, or add its spec "
                                 "(--specs DIR / POST /api/configs) with the name as an alias")
    return named
