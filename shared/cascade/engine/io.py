"""Loading kernel tables for ``cascade predict`` (one hook, easy to extend)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from cascade import tableio
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


def _is_table_file(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(tableio.SUFFIXES)


def _table_loader(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    return tableio.read_table(path), None


def _npz_loader(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    return KernelTable.load_npz(path), None


register_loader(_is_table_file, _table_loader, first=False)
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
    raise TraceFormatError(str(p), None, "a Cascade kernel-table CSV (.csv, .csv.gz), Parquet (.parquet) or .npz file")


def stream_kernel_table(path: str | Path, batch_rows: int = tableio.BATCH_ROWS,
                        ) -> tuple[Iterator[tableio.Batch], GPUSpec | None]:
    """Like :func:`load_kernel_table`, but kernel-table files (CSV, Parquet) come in batches
    of ``batch_rows`` (bounded memory); every other input is one batch."""
    p = Path(path)
    if _is_table_file(p):
        return tableio.iter_batches(p, batch_rows), None
    table, traced_on = load_kernel_table(p)
    return iter([tableio.Batch(table)]), traced_on
