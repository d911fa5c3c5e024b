"""Loading kernel tables for ``cascade predict`` (one hook, easy to extend)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cascade import tableio
from cascade.errors import TraceFormatError, UnknownGPUError, ValidationError
from cascade.gpus.registry import GPURegistry, suggest_gpus
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable


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


#: A loader returns the table and, when the input says so, the GPU it was captured on
#: (as a ``(table, spec)`` pair or a :class:`LoadedTrace`).
Loader = Callable[[Path], "tuple[KernelTable, GPUSpec | None] | LoadedTrace"]
#: (predicate on the path, loader) in priority order; extend with :func:`register_loader`.
_LOADERS: list[tuple[Callable[[Path], bool], Loader]] = []


def register_loader(accepts: Callable[[Path], bool], loader: Loader, *, first: bool = True) -> None:
    """Add a loader (bundle, trace folder, ...) tried before (or after) the built-in CSV one."""
    if first:
        _LOADERS.insert(0, (accepts, loader))
    else:
        _LOADERS.append((accepts, loader))


def _is_table_file(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(tableio.SUFFIXES)


def _table_loader(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    return tableio.read_table(path), None


def _npz_loader(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    return KernelTable.load_npz(path), None


register_loader(_is_table_file, _table_loader, first=False)
register_loader(lambda p: p.is_file() and p.suffix.lower() == ".npz", _npz_loader, first=False)


def load_trace(path: str | Path) -> LoadedTrace:
    """Load a kernel table from ``path`` with the first loader that accepts it."""
    from cascade.traces.inputs import register as register_trace_loaders

    register_trace_loaders()  # bundles, trace folders, kernel files, timelines
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(str(p), None, "an existing kernel-table CSV, .npz, bundle or trace folder")
    for accepts, loader in _LOADERS:
        if accepts(p):
            got = loader(p)
            return got if isinstance(got, LoadedTrace) else LoadedTrace(got[0], got[1])
    raise TraceFormatError(str(p), None, "a Cascade kernel-table CSV (.csv, .csv.gz), Parquet "
                                         "(.parquet) or .npz file")


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
    if _is_table_file(p):
        return StreamedTrace(tableio.iter_batches(p, batch_rows))
    loaded = load_trace(p)
    return StreamedTrace(iter([tableio.Batch(loaded.table)]), loaded.source, loaded.device,
                         loaded.warnings)


def load_kernel_table(path: str | Path, registry: GPURegistry | None = None
                      ) -> tuple[KernelTable, GPUSpec | None]:
    """Load a kernel table and the GPU the input says it was captured on (None if it names
    none, or names one ``registry`` does not know)."""
    from cascade.gpus.registry import default_registry

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
        return spec
    if named is None and loaded.device:
        raise UnknownGPUError(loaded.device, registry.ids(),
                              suggestions=suggest_gpus(registry, loaded.device),
                              hint=f"the trace names this GPU; pass {what} SPEC, or add its spec "
                                   "(--specs DIR / POST /api/configs) with the name as an alias")
    return named
