"""Kernel tables on disk: CSV (plain or gzip) and Parquet, read and written columnar.

Both formats go through Apache Arrow (``pyarrow``): a CSV is parsed by Arrow's
multi-threaded reader straight into typed columns, a Parquet file is read column by
column, and both are written from whole numpy columns, never cell by cell.

Unknown values follow :mod:`cascade.kerneltable`: an empty CSV cell (or a Parquet
null) reads as NaN / -1 / ""; on output NaN and -1 are written as empty cells (CSV) or
nulls (Parquet). Row order is always preserved.

Error discipline is that of every Cascade reader: a bad value is a
:class:`~cascade.errors.TraceFormatError` naming the file, the line and the column and
what was expected. Arrow's fast path does not know CSV line numbers, so when it rejects a
block of rows the careful line-by-line reader below takes over from the first row of
that block: it finds the exact line (or accepts what Arrow was strict about, such as
blanks around a number). Valid input never pays for that.

Tables larger than memory stream: :func:`iter_tables` yields :class:`KernelTable` batches
and :class:`TableWriter` appends them to one CSV or Parquet file.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cascade.errors import TraceFormatError
from cascade.kerneltable import COLUMNS, DTYPES, KernelTable

#: File name endings read and written (``.csv.gz`` is gzip-compressed CSV).
SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet", ".pq")
#: Rows per streamed batch (bounded memory: about 250 MB per batch with the models).
BATCH_ROWS = 250_000

_STR = np.dtype(object)
_I64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)
_ARROW_BLOCK = 1 << 24  # 16 MiB CSV blocks: large enough for threads, small for memory


def table_format(path: str | Path) -> str:
    """``csv`` or ``parquet`` from a file name (a TraceFormatError for anything else)."""
    name = str(path).lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    raise TraceFormatError(str(path), None, "a kernel table named *.csv, *.csv.gz or *.parquet")


def _kind(column: str) -> np.dtype[Any] | None:
    """numpy dtype of a known column, None for unknown ones (kept as text)."""
    spec = COLUMNS.get(column)
    return spec[0] if spec else None


def _is_text(column: str) -> bool:
    kind = _kind(column)
    return kind is None or kind == _STR  # (np.dtype == None is True: float64 is the default)


# ---- reading ------------------------------------------------------------------------------
def read_table(path: str | Path) -> KernelTable:
    """The whole table at ``path`` (CSV, gzip CSV or Parquet), row order preserved."""
    batches = list(iter_tables(path, batch_rows=None))
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return KernelTable({})
    return KernelTable.concat(batches)


def iter_tables(path: str | Path, batch_rows: int | None = BATCH_ROWS) -> Iterator[KernelTable]:
    """The table at ``path`` in batches of ``batch_rows`` rows (None: one batch)."""
    for batch in iter_batches(path, batch_rows):
        yield batch.table


def iter_batches(path: str | Path, batch_rows: int | None = BATCH_ROWS) -> Iterator[Batch]:
    """Like :func:`iter_tables`, each batch also as Arrow columns (to write out again)."""
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise TraceFormatError(str(path), None, "an existing kernel-table file")
    if fmt == "parquet":
        yield from _iter_parquet(path, batch_rows)
    else:
        yield from _iter_csv(path, batch_rows)


def _open_text(path: Path) -> IO[str]:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


def _csv_header(path: Path) -> list[str]:
    with _open_text(path) as fh:
        try:
            header = next(csv.reader(fh))
        except StopIteration:
            raise TraceFormatError(str(path), 1, "a header line starting with 'name'") from None
        except (UnicodeDecodeError, csv.Error, OSError, EOFError) as exc:
            raise TraceFormatError(str(path), 1, "a UTF-8 CSV header line", str(exc)) from None
    header = [h.strip() for h in header]
    if "name" not in header:
        raise TraceFormatError(str(path), 1, "a header with a 'name' column", ",".join(header))
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise TraceFormatError(str(path), 1, "each column once", f"repeated: {', '.join(dupes)}")
    return header


def _iter_csv(path: Path, batch_rows: int | None) -> Iterator[Batch]:
    header = _csv_header(path)
    types = {h: (pa.string() if _is_text(h) else pa.float64()) for h in header}
    read = pacsv.ReadOptions(column_names=header, skip_rows=1, block_size=_ARROW_BLOCK)
    convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=False,
                                   quoted_strings_can_be_null=False)
    consumed = 0  # data rows Arrow parsed and this generator has yielded
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    try:
        reader = pacsv.open_csv(str(path), read_options=read, convert_options=convert)
        for batch in reader:
            pending.append(batch)
            pending_rows += batch.num_rows
            while batch_rows is not None and pending_rows >= batch_rows:
                whole = pa.Table.from_batches(pending)
                table = _from_arrow(whole.slice(0, batch_rows), str(path), csv_rows=True)
                rest = whole.slice(batch_rows)
                pending, pending_rows = rest.to_batches(), rest.num_rows
                consumed += batch_rows
                yield table
        if pending_rows or consumed == 0:
            arrow = (pa.Table.from_batches(pending) if pending_rows
                     else pa.table({h: pa.array([], type=t) for h, t in types.items()}))
            table = _from_arrow(arrow, str(path), csv_rows=True)
            consumed += pending_rows
            yield table
    except (pa.ArrowInvalid, _Rejected, UnicodeDecodeError):
        # Arrow refused a block (or a value failed a check): the careful reader finds the
        # exact line, or reads what Arrow was too strict for, from the first unread row.
        yield from _careful_csv(path, header, skip=consumed, batch_rows=batch_rows)
    except OSError as exc:  # truncated or corrupt gzip
        raise TraceFormatError(str(path), None, "a readable (gzip) CSV file", str(exc)) from None


class _Rejected(Exception):
    """A column failed a check the careful reader reports with its line number."""


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows of a kernel table twice: numpy columns for the models, Arrow columns for output
    (text exactly as read, numbers as the table holds them, unknowns as nulls)."""

    table: KernelTable
    arrow: pa.Table


def _from_arrow(arrow: pa.Table, file: str, *, csv_rows: bool = False) -> Batch:
    """Typed numpy columns from an Arrow table; unknowns per :mod:`cascade.kerneltable`."""
    cols: dict[str, np.ndarray] = {}
    out: dict[str, pa.Array] = {}
    for name in arrow.column_names:
        col = arrow.column(name)
        kind = _kind(name)
        if kind is None and (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            cols[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)  # Parquet
            out[name] = column_to_arrow(name, cols[name])
        elif kind is None or kind == _STR:
            text, out[name] = _text(col, file, name, csv_rows)
            cols[name] = text.astype(str) if kind is None else text
        else:
            cols[name] = _number(col, kind, file, name, csv_rows)
            out[name] = column_to_arrow(name, cols[name])
    table = KernelTable(cols, n=arrow.num_rows)
    result = pa.table(out) if out else pa.table({})
    if csv_rows and table.columns and len(table):
        keep = _not_blank(table)
        if keep is not None:
            return Batch(table.take(keep), result.filter(pa.array(keep)))
    return Batch(table, result)


def _text(col: pa.ChunkedArray, file: str, name: str, csv_rows: bool,
          ) -> tuple[np.ndarray, pa.Array]:
    """(object array, Arrow string column) of a text column. Names repeat: each distinct
    value becomes one Python string shared by its rows (fast, and little memory)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        try:
            col = col.cast(pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise TraceFormatError(file, None, f"text in column {name!r}", str(col.type)) from None
    flat = col.combine_chunks().fill_null("") if len(col) else pa.array([], type=pa.string())
    if name == "dtype":
        flat = pc.utf8_lower(flat)
    encoded = flat.dictionary_encode()
    distinct = encoded.dictionary.to_numpy(zero_copy_only=False).astype(object)
    if name == "dtype":
        bad = [d for d in distinct if d and d not in DTYPES]
        if bad:
            if csv_rows:
                raise _Rejected
            raise TraceFormatError(file, None, f"dtype one of {', '.join(DTYPES)}", bad[0])
    return distinct[encoded.indices.to_numpy(zero_copy_only=False)], flat


def _number(col: pa.ChunkedArray, kind: np.dtype[Any], file: str, name: str,
            csv_rows: bool) -> np.ndarray:
    typ = col.type
    if pa.types.is_null(typ):
        return np.full(len(col), -1 if kind == _I64 else math.nan, dtype=kind)
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)):
        expected = "an integer" if kind == _I64 else "a number"
        raise TraceFormatError(file, None, f"{expected} column {name!r}", str(typ))
    if kind == _I64 and pa.types.is_integer(typ):
        return col.cast(pa.int64()).fill_null(-1).to_numpy()
    values = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if kind == _F64:
        return values
    known = ~np.isnan(values)
    if not np.isfinite(values[known]).all():
        if csv_rows:
            raise _Rejected
        raise TraceFormatError(file, None, f"finite integers in column {name!r}", "inf")
    out = np.full(len(values), -1, dtype=np.int64)
    out[known] = values[known].astype(np.int64)  # truncates toward zero, like int(float(cell))
    return out


def _not_blank(table: KernelTable) -> np.ndarray | None:
    """Rows to keep: rows whose every cell is empty are not kernels (the careful reader
    skips them too); None when every row is kept."""
    blank = table["name"] == ""
    if not blank.any():
        return None
    for name in table.columns:
        col = table[name]
        if col.dtype.kind == "f":
            blank &= np.isnan(col)
        elif col.dtype.kind == "i":
            blank &= col == -1
        else:
            blank &= col == ""
        if not blank.any():
            return None
    return ~blank


def _careful_csv(path: Path, header: list[str], *, skip: int,
                 batch_rows: int | None) -> Iterator[Batch]:
    """Line-by-line reader: exact line numbers in errors; same values as the fast path."""
    file = str(path)
    kinds = [_kind(h) for h in header]
    raw: dict[str, list[Any]] = {h: [] for h in header}
    rows = 0
    seen = 0
    try:
        with _open_text(path) as fh:
            reader = csv.reader(fh)
            next(reader, None)
            for row in reader:
                lineno = reader.line_num
                if not row:
                    continue
                seen += 1
                if seen <= skip:
                    continue
                if all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise TraceFormatError(file, lineno, f"{len(header)} comma-separated fields",
                                           ",".join(row))
                for h, kind, cell in zip(header, kinds, row, strict=True):
                    raw[h].append(_parse_cell(h, kind, cell.strip(), file, lineno))
                rows += 1
                if batch_rows is not None and rows >= batch_rows:
                    yield _batch(KernelTable(raw, n=rows))
                    raw, rows = {h: [] for h in header}, 0
    except (UnicodeDecodeError, csv.Error, OSError, EOFError) as exc:
        raise TraceFormatError(file, None, "a readable UTF-8 (gzip) CSV file", str(exc)) from None
    if rows or skip == 0:
        yield _batch(KernelTable(raw, n=rows))


def _batch(table: KernelTable) -> Batch:
    return Batch(table, to_arrow(table))


def _parse_cell(column: str, kind: np.dtype[Any] | None, cell: str, file: str, line: int) -> Any:
    if kind is None or kind == _STR:
        if column == "dtype":
            low = cell.lower()
            if low and low not in DTYPES:
                raise TraceFormatError(file, line, f"dtype one of {', '.join(DTYPES)}", cell)
            return low
        return cell
    if cell == "":
        return -1 if kind == _I64 else math.nan
    try:
        value = float(cell)
        return int(value) if kind == _I64 else value
    except (ValueError, OverflowError):
        expected = "an integer" if kind == _I64 else "a number"
        raise TraceFormatError(file, line, f"{expected} in column {column!r}", cell) from None


def _iter_parquet(path: Path, batch_rows: int | None) -> Iterator[Batch]:
    file = str(path)
    try:
        pf = pq.ParquetFile(path)
        if "name" not in pf.schema_arrow.names:
            raise TraceFormatError(file, None, "a 'name' column", ",".join(pf.schema_arrow.names))
        if batch_rows is None:
            yield _from_arrow(pf.read(), file)
            return
        for batch in pf.iter_batches(batch_size=batch_rows):
            yield _from_arrow(pa.Table.from_batches([batch]), file)
    except (pa.ArrowException, OSError) as exc:
        raise TraceFormatError(file, None, "a readable Parquet file", str(exc)) from None


# ---- writing ------------------------------------------------------------------------------
def to_arrow(table: KernelTable, columns: Sequence[str] | None = None) -> pa.Table:
    """An Arrow table of ``columns`` (default: all), unknown values as nulls."""
    names = list(columns) if columns is not None else table.columns
    return pa.table({c: column_to_arrow(c, table[c]) for c in names})


def column_to_arrow(name: str, values: np.ndarray) -> pa.Array:
    """One column as Arrow: NaN and -1 become nulls, text stays text."""
    kind = _kind(name)
    if values.dtype.kind == "f":
        return pa.array(values, mask=np.isnan(values))
    if values.dtype.kind in "iu":
        if kind == _I64 or kind is None:
            return pa.array(values.astype(np.int64, copy=False), mask=values == -1)
        return pa.array(values)
    if values.dtype.kind == "b":
        return pa.array(values)
    return pa.array(values.astype(object, copy=False), type=pa.string(), from_pandas=True)


class TableWriter:
    """Append Arrow tables of one schema to a CSV (a path, or a binary stream such as
    stdout) or Parquet file.

    CSV cells are quoted only where a batch holds text that needs it (a comma, a quote,
    a line break), so plain tables read back with any tool, and names with commas stay
    one cell.
    """

    def __init__(self, out: str | Path | IO[bytes], fmt: str | None = None) -> None:
        self._fmt = fmt or (table_format(out) if isinstance(out, str | Path) else "csv")
        self._out = out
        self._sink: Any = None
        self._parquet: Any = None
        self._schema: pa.Schema | None = None
        self.rows = 0

    def write(self, arrow: pa.Table) -> None:
        """Append ``arrow`` (the first call fixes the columns and their types)."""
        if self._schema is None:
            self._open(arrow.schema)
        elif arrow.schema != self._schema:
            arrow = arrow.cast(self._schema)
        if self._parquet is not None:
            self._parquet.write_table(arrow)
        else:
            style = "needed" if _needs_quotes(arrow) else "none"
            pacsv.write_csv(arrow, self._sink,
                            pacsv.WriteOptions(include_header=False, quoting_style=style))
        self.rows += arrow.num_rows

    def _open(self, schema: pa.Schema) -> None:
        self._schema = schema
        if self._fmt == "parquet":
            target = str(self._out) if isinstance(self._out, Path) else self._out
            self._parquet = pq.ParquetWriter(target, schema, compression="snappy")
            return
        if isinstance(self._out, str | Path):
            name = str(self._out)
            self._sink = (pa.CompressedOutputStream(name, "gzip") if name.endswith(".gz")
                          else pa.OSFile(name, "wb"))
        else:
            self._sink = self._out
        self._sink.write((",".join(_quote(n) for n in schema.names) + "\n").encode())

    def close(self) -> None:
        """Finish the file (a CSV writer never written to writes nothing)."""
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
        if self._sink is not None:
            if isinstance(self._out, str | Path):
                self._sink.close()
            else:
                self._sink.flush()
            self._sink = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SPECIAL = r'[,"\r\n]'


def _needs_quotes(arrow: pa.Table) -> bool:
    for col in arrow.columns:
        if (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) and \
                pc.any(pc.match_substring_regex(col, _SPECIAL)).as_py():
            return True
    return False


def _quote(name: str) -> str:
    return f'"{name.replace(chr(34), chr(34) * 2)}"' if any(c in name for c in ',"\n\r') else name


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
