"""The careful kernel-table CSV reader: line by line, in pure Python.

It reads small files (no Arrow import for them: services stay light) and takes over from
Arrow's fast path when Arrow refuses a block, so every error names the exact line. Values
are those of the fast path: an empty cell is NaN / -1 / "", integers may be written as
floats (truncated toward zero), blanks around a cell are ignored, rows whose every cell is
empty are skipped, ``dtype`` is lower-cased and must be one of
:data:`cascade.kerneltable.DTYPES`.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from cascade.errors import TraceFormatError
from cascade.kerneltable import COLUMNS, DTYPES, KernelTable

STR = np.dtype(object)
I64 = np.dtype(np.int64)
F64 = np.dtype(np.float64)


def kind_of(column: str) -> np.dtype[Any] | None:
    """numpy dtype of a known column, None for unknown ones (kept as text)."""
    spec = COLUMNS.get(column)
    return spec[0] if spec else None


def is_text(column: str) -> bool:
    """True for text columns (known string columns and unknown ones)."""
    kind = kind_of(column)
    return kind is None or kind == STR  # (np.dtype == None is True: float64 is the default)


def open_text(path: Path) -> IO[str]:
    """A text stream of a CSV file, gunzipped on the fly for ``.gz``."""
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


def csv_header(path: Path) -> list[str]:
    """The stripped column names of a kernel-table CSV (checked: a name column, no repeats)."""
    with open_text(path) as fh:
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


def iter_careful(path: Path, header: list[str], *, skip: int = 0,
                 batch_rows: int | None = None) -> Iterator[KernelTable]:
    """Tables of ``batch_rows`` rows (None: one), after the first ``skip`` non-empty rows."""
    file = str(path)
    kinds = [kind_of(h) for h in header]
    raw: dict[str, list[Any]] = {h: [] for h in header}
    rows = 0
    seen = 0
    yielded = False
    try:
        with open_text(path) as fh:
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
                    raw[h].append(parse_cell(h, kind, cell.strip(), file, lineno))
                rows += 1
                if batch_rows is not None and rows >= batch_rows:
                    yield KernelTable(raw, n=rows)
                    raw, rows, yielded = {h: [] for h in header}, 0, True
    except (UnicodeDecodeError, csv.Error, OSError, EOFError) as exc:
        raise TraceFormatError(file, None, "a readable UTF-8 (gzip) CSV file", str(exc)) from None
    if rows or (not yielded and skip == 0):
        yield KernelTable(raw, n=rows)


def parse_cell(column: str, kind: np.dtype[Any] | None, cell: str, file: str, line: int) -> Any:
    """One stripped CSV cell as its column's value (errors name file, line and column)."""
    if kind is None or kind == STR:
        if column == "dtype":
            low = cell.lower()
            if low and low not in DTYPES:
                raise TraceFormatError(file, line, f"dtype one of {', '.join(DTYPES)}", cell)
            return low
        return cell
    if cell == "":
        return -1 if kind == I64 else math.nan
    try:
        value = float(cell)
        return int(value) if kind == I64 else value
    except (ValueError, OverflowError):
        expected = "an integer" if kind == I64 else "a number"
        raise TraceFormatError(file, line, f"{expected} in column {column!r}", cell) from None
