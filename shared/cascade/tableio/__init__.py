"""Kernel tables on disk: CSV (plain or gzip) and Parquet, read and written columnar.

One owner for every kernel-table file Cascade reads or writes (``cascade predict``,
timelines in the Cascade CSV form, the bundled sample, result downloads):

- **Big files and Parquet** go through Apache Arrow (:mod:`cascade.tableio.arrow`):
  multi-threaded parsing straight into typed columns, whole-column writes.
- **Small CSV files** (under :data:`SMALL_CSV_BYTES` on disk) are read by the careful
  line-by-line reader (:mod:`cascade.tableio.careful`), so a service that reads one small
  table never loads Arrow (about 60 MB of RSS per process). Both readers give the same
  values; the careful one also takes over whenever Arrow refuses a block, so every error
  names the file, the line and the column and what was expected.

Unknown values follow :mod:`cascade.kerneltable`: an empty CSV cell (or a Parquet null)
reads as NaN / -1 / ""; on output NaN and -1 are written as empty cells (CSV) or nulls
(Parquet). Row order is always preserved. Tables larger than memory stream:
:func:`iter_batches` yields batches of :data:`BATCH_ROWS` rows and :class:`TableWriter`
appends them to one file.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Self

from cascade.errors import TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.tableio.careful import csv_header, iter_careful

if TYPE_CHECKING:
    import pyarrow as pa

#: File name endings read and written (``.csv.gz`` is gzip-compressed CSV).
SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet", ".pq")
#: Rows per streamed batch (bounded memory: about 250 MB per batch with the models).
BATCH_ROWS = 250_000
#: CSV files smaller than this on disk are read without Arrow.
SMALL_CSV_BYTES = 2 << 20


def table_format(path: str | Path) -> str:
    """``csv`` or ``parquet`` from a file name (a TraceFormatError for anything else)."""
    name = str(path).lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    raise TraceFormatError(str(path), None, "a kernel table named *.csv, *.csv.gz or *.parquet")


class Batch:
    """Rows of a kernel table: numpy columns for the models and, on demand, Arrow columns
    to write out again (text exactly as read, numbers as the table holds them)."""

    __slots__ = ("_arrow", "table")

    def __init__(self, table: KernelTable, arrow: pa.Table | None = None) -> None:
        self.table = table
        self._arrow = arrow

    @property
    def arrow(self) -> pa.Table:
        """The batch as an Arrow table (unknown values as nulls)."""
        if self._arrow is None:
            self._arrow = to_arrow(self.table)
        return self._arrow


def read_table(path: str | Path) -> KernelTable:
    """The whole table at ``path`` (CSV, gzip CSV or Parquet), row order preserved."""
    tables = list(iter_tables(path, batch_rows=None))
    return tables[0] if len(tables) == 1 else KernelTable.concat(tables)


def iter_tables(path: str | Path, batch_rows: int | None = BATCH_ROWS) -> Iterator[KernelTable]:
    """The table at ``path`` in batches of ``batch_rows`` rows (None: one batch)."""
    for batch in iter_batches(path, batch_rows):
        yield batch.table


def iter_batches(path: str | Path, batch_rows: int | None = BATCH_ROWS) -> Iterator[Batch]:
    """Like :func:`iter_tables`, each batch with its Arrow columns (to write out again)."""
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise TraceFormatError(str(path), None, "an existing kernel-table file")
    if fmt == "csv" and path.stat().st_size < SMALL_CSV_BYTES:
        for table in iter_careful(path, csv_header(path), batch_rows=batch_rows):
            yield Batch(table)
        return
    from cascade.tableio import arrow  # Arrow only for what needs it (module docstring)

    reader = arrow.iter_parquet if fmt == "parquet" else arrow.iter_csv
    for table, columns in reader(path, batch_rows):
        yield Batch(table, columns)


def to_arrow(table: KernelTable, columns: Sequence[str] | None = None) -> pa.Table:
    """An Arrow table of ``columns`` (default: all), unknown values as nulls."""
    from cascade.tableio import arrow

    return arrow.to_arrow(table, columns)


class TableWriter:
    """Append batches to one CSV (a path, or a binary stream such as stdout) or Parquet
    file; CSV cells are quoted only where a batch holds text that needs it."""

    def __init__(self, out: str | Path | IO[bytes], fmt: str | None = None) -> None:
        from cascade.tableio import arrow

        self._writer = arrow.TableWriter(out, fmt or (table_format(out) if isinstance(
            out, str | Path) else "csv"))

    @property
    def rows(self) -> int:
        """Rows written so far."""
        return int(self._writer.rows)

    def write(self, columns: pa.Table | KernelTable) -> None:
        """Append an Arrow table or a kernel table (the first call fixes the columns)."""
        self._writer.write(to_arrow(columns) if isinstance(columns, KernelTable) else columns)

    def close(self) -> None:
        """Finish the file."""
        self._writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_table(table: KernelTable, out: str | Path | IO[bytes],
                columns: Sequence[str] | None = None, fmt: str | None = None) -> None:
    """Write ``table`` (``columns`` in that order) as CSV or Parquet."""
    with TableWriter(out, fmt) as writer:
        writer.write(to_arrow(table, columns))


def write_csv_text(table: KernelTable, out: IO[str], columns: Sequence[str] | None = None) -> None:
    """Write CSV to a text stream (an HTTP body, ``io.StringIO``)."""
    buf = io.BytesIO()
    write_table(table, buf, columns, fmt="csv")
    out.write(buf.getvalue().decode())


