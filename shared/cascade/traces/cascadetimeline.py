"""Cascade's own timeline files: one JSON object per kernel a line (JSONL), and kernel-table
CSV (plain or gzip) / Parquet files; timestamps re-based to the first."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.errors import TraceFormatError
from cascade.kerneltable import COLUMNS, DTYPES, KernelTable
from cascade.tableio import read_table
from cascade.traces.jsonstream import current_limits


def import_cascade_csv(path: str | Path) -> KernelTable:
    """A Cascade kernel-table CSV or Parquet file, timestamps re-based to the first."""
    table = read_table(path)
    return _rebase(table)


def _bounded_lines(path: Path, limit: int) -> Iterator[str]:
    """Lines of ``path``, each read at most ``limit + 1`` characters at a time (a longer one is
    yielded cut there, for the caller to refuse, never read whole)."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        while line := fh.readline(limit + 1):
            yield line


def import_cascade_jsonl(path: str | Path | Iterable[str]) -> KernelTable:
    """One JSON object per line with KernelTable column names (``name`` required)."""
    fname = str(path) if isinstance(path, str | Path) else "<jsonl>"
    limit = current_limits().max_value_bytes
    lines: Iterable[str] = (
        _bounded_lines(Path(path), limit) if isinstance(path, str | Path) else path
    )
    rows: list[dict[str, Any]] = []
    dec = msgspec.json.Decoder(dict[str, Any])
    try:
        for lineno, line in enumerate(lines, start=1):
            if len(line) > limit:
                raise TraceFormatError(fname, lineno, f"lines of at most {limit:,} characters "
                                       "(CASCADE_TRACE_JSON_MAX_VALUE_BYTES)",
                                       f"a longer line starting {line[:40]}...")
            if not line.strip():
                continue
            try:
                obj = dec.decode(line)
            except msgspec.DecodeError as exc:
                raise TraceFormatError(fname, lineno, "a JSON object", str(exc)) from None
            if not isinstance(obj.get("name"), str):
                raise TraceFormatError(fname, lineno, "a string 'name' field", line.strip())
            for key in ("grid", "block"):
                if key in obj:
                    dims = obj.pop(key)
                    if not (isinstance(dims, list) and len(dims) == 3):
                        raise TraceFormatError(fname, lineno, f"'{key}' as [x, y, z]", str(dims))
                    obj.update({f"{key}_{a}": v for a, v in zip("xyz", dims, strict=True)})
            unknown = [k for k in obj if k not in COLUMNS]
            if unknown:
                raise TraceFormatError(fname, lineno, "only KernelTable column names",
                                       ", ".join(unknown))
            for key, value in obj.items():
                text_column = COLUMNS[key][0].kind == "O"
                if value is None or (isinstance(value, str) if text_column else (
                        isinstance(value, int | float) and not isinstance(value, bool))):
                    continue
                raise TraceFormatError(fname, lineno, f"'{key}' as a "
                                       f"{'string' if text_column else 'number'}",
                                       f"{type(value).__name__} {value!r}"[:80])
            dt = obj.get("dtype")
            if dt is not None and dt not in DTYPES:
                raise TraceFormatError(fname, lineno, f"dtype one of {', '.join(DTYPES)}", str(dt))
            rows.append(obj)
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()
    if not rows:
        raise TraceFormatError(fname, None, "at least one kernel line: one JSON object per line "
                               "with KernelTable column names ('name' required)",
                               "no lines with a kernel (an empty file or blank lines only)")
    return _rebase(KernelTable.from_rows(rows))


def _rebase(table: KernelTable) -> KernelTable:
    if len(table) == 0:
        return table
    cands = [table[c] for c in ("host_launch_ns", "start_ns") if table.has(c)]
    if cands:
        t0 = float(np.nanmin(np.concatenate(cands)))
        for c in ("host_launch_ns", "start_ns"):
            if table.has(c):
                table[c] = table[c] - t0
    if not table.has("kernel_id"):
        table["kernel_id"] = np.arange(1, len(table) + 1)
    return table
