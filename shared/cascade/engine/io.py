"""Loading kernel tables for ``cascade predict`` (one hook, easy to extend)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cascade.errors import TraceFormatError
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

#: A loader returns the table and, when the input says so, the GPU it was captured on.
Loader = Callable[[Path], tuple[KernelTable, GPUSpec | None]]
#: (predicate on the path, loader) in priority order; extend with :func:`register_loader`.
_LOADERS: list[tuple[Callable[[Path], bool], Loader]] = []


def register_loader(accepts: Callable[[Path], bool], loader: Loader, *, first: bool = True) -> None:
    """Add a loader (bundle, trace folder, ...) tried before (or after) the built-in CSV one."""
    if first:
        _LOADERS.insert(0, (accepts, loader))
    else:
        _LOADERS.append((accepts, loader))


def _csv_loader(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    return KernelTable.read_csv(path), None


def _npz_loader(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    return KernelTable.load_npz(path), None


register_loader(lambda p: p.is_file() and p.name.lower().endswith((".csv", ".csv.gz")), _csv_loader, first=False)
register_loader(lambda p: p.is_file() and p.suffix.lower() == ".npz", _npz_loader, first=False)


def load_kernel_table(path: str | Path) -> tuple[KernelTable, GPUSpec | None]:
    """Load a kernel table from ``path`` with the first loader that accepts it."""
    from cascade.traces.inputs import register as register_trace_loaders

    register_trace_loaders()  # bundles, trace folders, kernel files, timelines
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(str(p), None, "an existing kernel-table CSV, .npz, bundle or trace folder")
    for accepts, loader in _LOADERS:
        if accepts(p):
            return loader(p)
    raise TraceFormatError(str(p), None, "a Cascade kernel-table CSV (.csv, .csv.gz) or .npz kernel table")
