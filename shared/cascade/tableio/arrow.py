"""The Arrow fast path of :mod:`cascade.tableio` (imported only when a table is big enough
to need it, or is Parquet, or is written out).

A CSV is parsed by Arrow's multi-threaded reader straight into typed columns, a Parquet
file is read column by column, and both are written from whole columns, never cell by
cell. Text columns are decoded through Arrow dictionaries: a name repeated by 100,000
launches becomes one Python string shared by its rows. When Arrow refuses a CSV block,
:mod:`cascade.tableio.careful` takes over from that block's first row and finds the
exact line (or reads what Arrow was too strict for, such as blanks around a number).
Arrow allocates from the system allocator and returns what it freed after each read, so
a long-running service keeps no pools.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cascade.errors import TraceFormatError
from cascade.kerneltable import DTYPES, KernelTable
from cascade.tableio.careful import I64, STR, csv_header, is_text, iter_careful, kind_of

pa.set_memory_pool(pa.system_memory_pool())
_ARROW_BLOCK = 1 << 24  # 16 MiB CSV blocks: large enough for threads, small for memory


def iter_csv(path: Path, batch_rows: int | None) -> Iterator[tuple[KernelTable, pa.Table]]:
    """(table, Arrow columns) batches of a CSV (plain or gzip) file."""
    try:
        yield from _iter_csv(path, batch_rows)
    finally:
        pa.default_memory_pool().release_unused()


def _iter_csv(path: Path, batch_rows: int | None) -> Iterator[tuple[KernelTable, pa.Table]]:
    header = csv_header(path)
    types = {h: (pa.string() if is_text(h) else pa.float64()) for h in header}
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
        for rest in iter_careful(path, header, skip=consumed, batch_rows=batch_rows):
            yield rest, to_arrow(rest)
    except OSError as exc:  # truncated or corrupt gzip
        raise TraceFormatError(str(path), None, "a readable (gzip) CSV file", str(exc)) from None


class _Rejected(Exception):
    """A column failed a check the careful reader reports with its line number."""


def _from_arrow(arrow: pa.Table, file: str, *, csv_rows: bool = False,
                ) -> tuple[KernelTable, pa.Table]:
    """Typed numpy columns from an Arrow table; unknowns per :mod:`cascade.kerneltable`."""
    cols: dict[str, np.ndarray] = {}
    out: dict[str, pa.Array] = {}
    for name in arrow.column_names:
        col = arrow.column(name)
        kind = kind_of(name)
        if kind is None and (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            cols[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)  # Parquet
            out[name] = column_to_arrow(name, cols[name])
        elif kind is None or kind == STR:
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
            return table.take(keep), result.filter(pa.array(keep))
    return table, result


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
        return np.full(len(col), -1 if kind == I64 else math.nan, dtype=kind)
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)):
        expected = "an integer" if kind == I64 else "a number"
        raise TraceFormatError(file, None, f"{expected} column {name!r}", str(typ))
    if kind == I64 and pa.types.is_integer(typ):
        return col.cast(pa.int64()).fill_null(-1).to_numpy()
    values = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if kind != I64:
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




def iter_parquet(path: Path, batch_rows: int | None) -> Iterator[tuple[KernelTable, pa.Table]]:
    """(table, Arrow columns) batches of a Parquet file."""
    file = str(path)
    try:
        pf = pq.ParquetFile(path)
        if "name" not in pf.schema_arrow.names:
            raise TraceFormatError(file, None, "a 'name' column", ",".join(pf.schema_arrow.names))
        if batch_rows is None or pf.metadata.num_rows == 0:  # an empty file is one empty batch
            yield _from_arrow(pf.read(), file)
            return
        for batch in pf.iter_batches(batch_size=batch_rows):
            yield _from_arrow(pa.Table.from_batches([batch]), file)
    except (pa.ArrowException, OSError) as exc:
        raise TraceFormatError(file, None, "a readable Parquet file", str(exc)) from None
    finally:
        pa.default_memory_pool().release_unused()


# ---- writing ------------------------------------------------------------------------------
def to_arrow(table: KernelTable, columns: Sequence[str] | None = None) -> pa.Table:
    """An Arrow table of ``columns`` (default: all), unknown values as nulls."""
    names = list(columns) if columns is not None else table.columns
    return pa.table({c: column_to_arrow(c, table[c]) for c in names})


def column_to_arrow(name: str, values: np.ndarray) -> pa.Array:
    """One column as Arrow: NaN and -1 become nulls, text stays text."""
    kind = kind_of(name)
    if values.dtype.kind == "f":
        return pa.array(values, mask=np.isnan(values))
    if values.dtype.kind in "iu":
        if kind == I64 or kind is None:
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

    def __init__(self, out: str | Path | IO[bytes], fmt: str) -> None:
        self._fmt = fmt
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
