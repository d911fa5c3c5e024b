"""Kernel timeline files, the importer chosen by the file's name: PyTorch profiler Chrome traces
(:mod:`cascade.traces.chrome`), Nsight Systems SQLite (:mod:`cascade.traces.nsys`), Cascade
CSV / Parquet / JSONL (:mod:`cascade.traces.cascadetimeline`); what they share (the
:class:`~cascade.traces.timelinecore.Timeline`, step markers) is in
:mod:`cascade.traces.timelinecore`.
"""

from __future__ import annotations

from pathlib import Path

from cascade.errors import TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.traces.cascadetimeline import import_cascade_csv, import_cascade_jsonl
from cascade.traces.chrome import chrome_device, read_chrome_trace
from cascade.traces.nsys import nsys_file_device, read_nsys_sqlite
from cascade.traces.timelinecore import Timeline


def read_timeline(path: str | Path) -> Timeline:
    """Read any supported timeline file, chosen by its name, as a :class:`Timeline`."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".json", ".json.gz")):
        return read_chrome_trace(p)
    if name.endswith((".sqlite", ".db", ".sqlite3")):
        return read_nsys_sqlite(p)
    if name.endswith(".jsonl"):
        return Timeline(table=import_cascade_jsonl(p))
    if name.endswith((".csv", ".csv.gz", ".parquet")):
        return Timeline(table=import_cascade_csv(p))
    raise TraceFormatError(str(p), None, "a .json[.gz] Chrome trace, .sqlite Nsight export, "
                           ".csv[.gz], .parquet or .jsonl Cascade timeline", p.name)


def timeline_device(path: str | Path) -> tuple[str, int]:
    """(device name, sm) a timeline file records ('' and -1 when it names none), without
    building its kernel table (Chrome traces are streamed; ``deviceProperties`` may follow
    the events)."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".json", ".json.gz")):
        return chrome_device(p)
    if name.endswith((".sqlite", ".db", ".sqlite3")):
        return nsys_file_device(p)
    return "", -1


def import_timeline(path: str | Path) -> KernelTable:
    """Import any supported timeline file, chosen by its name."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".json", ".json.gz", ".sqlite", ".db", ".sqlite3", ".jsonl", ".csv",
                      ".csv.gz", ".parquet")):
        return read_timeline(p).table
    raise TraceFormatError(str(p), None, "a .json[.gz] Chrome trace, .sqlite Nsight export, "
                           ".csv[.gz], .parquet or .jsonl Cascade timeline", p.name)
