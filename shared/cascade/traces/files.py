"""Names of the raw files a trace is made of (their S3 keys: :mod:`cascade.platform.keys`).

Accepted names:

- ``kernel-N[-ctx_0x<hex>].trace[g][.xz]``: one kernel's instruction trace;
- ``kernelslist`` / ``kernelslist.g``: the tracer's command list;
- ``stats.csv``: the tracer's per-kernel statistics;
- ``baseline.json``: the profiler's unprofiled timings (:mod:`cascade.traces.baseline`);
- timeline files: PyTorch Chrome traces ``*.json[.gz]``, Cascade ``*.csv`` /
  ``*.jsonl`` and Nsight Systems SQLite exports ``*.sqlite``. ``.nsys-rep`` reports are refused
  (export them with ``nsys export --type sqlite``).

Everything else, and every path trick (``..``, ``/``, ``\\``, NUL, leading dot,
absolute paths), is refused with a :class:`ValidationError` naming the field.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Literal

import msgspec

from cascade.errors import NotFoundError, ValidationError

FileKind = Literal["kernel", "kernelslist", "stats", "timeline", "baseline"]

MAX_NAME_LENGTH = 255
#: The profiler's baseline file (stored, not prepared; ingest copies it into the record).
BASELINE_NAME = "baseline.json"

_KERNEL = re.compile(r"^(kernel-(\d+)(?:-ctx_0x[0-9a-fA-F]+)?)\.trace(g)?(\.xz)?\Z")
_KERNELSLIST = re.compile(r"^kernelslist(\.g)?\Z")
_TIMELINE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._\-]*\.(json|json\.gz|jsonl|csv|csv\.gz|parquet|sqlite)\Z")
_SAFE = re.compile(r"^[A-Za-z0-9._\-]+\Z")

#: JSON Schema pattern of the names :func:`check_name` accepts (for the OpenAPI document).
NAME_PATTERN = (r"^(kernel-[0-9]+(-ctx_0x[0-9a-fA-F]+)?\.trace(g)?(\.xz)?|kernelslist(\.g)?|stats\.csv"
                r"|[A-Za-z0-9]([A-Za-z0-9_-]|\.(?!\.))*\.(json|json\.gz|jsonl|csv|sqlite))$")

ACCEPTED_FORMS = (
    "kernel-N[-ctx_0x...].trace[g][.xz], kernelslist[.g], stats.csv, or a timeline file "
    "(*.json[.gz] Chrome trace, *.csv[.gz] / *.parquet / *.jsonl Cascade timeline, *.sqlite "
    "Nsight Systems export)"
)


class TraceFile(msgspec.Struct, frozen=True, kw_only=True):
    """A validated raw file name and what it is."""

    name: str
    """The file name (relative to the trace's raw/ prefix)."""
    kind: FileKind
    """kernel trace, kernelslist, stats.csv, timeline or baseline."""
    unit: str
    """Unit of preparation: the kernel stem ``kernel-N[-ctx_0x..]`` or the timeline file name;
    empty for kernelslist/stats.csv (stored, not prepared)."""
    kernel_id: int | None = None
    """N of ``kernel-N`` for kernel traces."""
    compressed: bool = False
    """xz (kernel traces) or gzip (timelines) compressed."""


def check_name(name: object, field: str = "name") -> TraceFile:
    """Validate one raw file name; :class:`ValidationError` names ``field`` and the accepted forms."""
    if not isinstance(name, str) or not name:
        raise ValidationError("expected a non-empty file name", field=field)
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationError(f"file name longer than {MAX_NAME_LENGTH} characters", field=field)
    if "\x00" in name:
        raise ValidationError("file name contains a NUL byte", field=field)
    if "/" in name or "\\" in name or name.startswith("~"):
        raise ValidationError(
            f"{name!r} is a path: expected a plain file name (no '/', '\\\\' or '~')", field=field
        )
    if name in (".", "..") or ".." in name or name.startswith("."):
        raise ValidationError(f"{name!r}: '..' and leading dots are not allowed", field=field)
    if not _SAFE.match(name):
        raise ValidationError(
            f"{name!r} contains characters outside letters, digits, '.', '_' and '-'", field=field
        )
    if name.endswith((".nsys-rep", ".qdrep")):
        raise ValidationError(
            f"{name!r} is an Nsight Systems report: export it first "
            "(nsys export --type sqlite REPORT) and upload the .sqlite file",
            field=field,
        )
    m = _KERNEL.match(name)
    if m:
        return TraceFile(name=name, kind="kernel", unit=m.group(1), kernel_id=int(m.group(2)),
                         compressed=bool(m.group(4)))
    if _KERNELSLIST.match(name):
        return TraceFile(name=name, kind="kernelslist", unit="")
    if name == "stats.csv":
        return TraceFile(name=name, kind="stats", unit="")
    if name == BASELINE_NAME:
        return TraceFile(name=name, kind="baseline", unit="")
    if _TIMELINE.match(name):
        return TraceFile(name=name, kind="timeline", unit=name, compressed=name.endswith(".gz"))
    raise ValidationError(f"{name!r} is not a trace file: expected {ACCEPTED_FORMS}", field=field)


def kernel_stems(listing: str) -> list[str]:
    """Kernel units named by a kernelslist[.g] text, in order (copies like MemcpyHtoD skipped)."""
    stems: list[str] = []
    for line in listing.splitlines():
        entry = line.strip()
        if not entry or "," in entry or entry.startswith("#"):
            continue
        base = entry.rsplit("/", 1)[-1]
        m = _KERNEL.match(base)
        if m:
            stems.append(m.group(1))
    return stems




def sniff(path: Path) -> str:
    """Why a file with a trace-file name is not one ('' when its content looks right): a JSON
    that is no Chrome trace (nvprof / Nsight Compute output), a CSV that is no Cascade kernel
    table (an Accel-Sim log), a JSONL without kernel rows, an SQLite that is no database."""
    tf = check_name(path.name)
    if tf.kind != "timeline":
        return ""
    name = path.name.lower()
    try:
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                head = fh.read(1 << 16)
        else:
            with path.open("rb") as fh:
                head = fh.read(1 << 16)
    except (OSError, EOFError) as exc:
        return f"unreadable: {exc}"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if name.endswith((".json", ".json.gz")):
        if '"traceEvents"' in text or (text.startswith("[") and '"ph"' in text):
            return ""
        return "JSON but not a Chrome trace (no traceEvents): e.g. nvprof or Nsight Compute output"
    if name.endswith(".parquet"):
        return "" if head.startswith(b"PAR1") else "not a Parquet file (no PAR1 magic)"
    if name.endswith((".csv", ".csv.gz")):
        header = [h.strip().strip('"') for h in text.splitlines()[0].split(",")] if text else []
        if "name" in header:
            return ""
        return "CSV without a 'name' column: not a Cascade kernel table (e.g. an Accel-Sim log)"
    if name.endswith(".jsonl"):
        first = text.splitlines()[0] if text else ""
        try:
            row = json.loads(first)
        except ValueError:
            return "not JSON lines (the first line is not a JSON object)"
        return "" if isinstance(row, dict) and "name" in row else \
            "JSON lines without a 'name' field: not a Cascade timeline"
    if name.endswith(".sqlite"):
        return "" if head.startswith(b"SQLite format 3\x00") else "not an SQLite database"
    return ""


def classify_files(path: Path) -> tuple[list[Path], dict[str, str]]:
    """The trace files under ``path`` and every other file with the reason it is skipped."""
    if path.is_file():
        check_name(path.name, field=str(path))
        why = sniff(path)
        if why:
            raise ValidationError(f"{path.name}: {why}", field=str(path))
        return [path], {}
    if not path.is_dir():
        raise NotFoundError(f"{path}: no such file or folder")
    files: list[Path] = []
    skipped: dict[str, str] = {}
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.is_file():
            skipped[entry.name] = "a folder or special file, not a trace file"
            continue
        try:
            check_name(entry.name)
        except ValidationError:
            skipped[entry.name] = ("not a trace file name (kernel-N.trace[g][.xz], kernelslist[.g], "
                                   "stats.csv, *.json[.gz] / *.csv / *.jsonl / *.sqlite timelines)")
            continue
        why = sniff(entry)
        if why:
            skipped[entry.name] = why
            continue
        files.append(entry)
    if not files:
        raise ValidationError(f"{path} holds no trace files (kernel-N.trace[g][.xz], kernelslist, "
                              "stats.csv or timeline files)"
                              + (f"; skipped: {', '.join(sorted(skipped))}" if skipped else ""),
                              field="path")
    return files, skipped


def collect_files(path: Path) -> list[Path]:
    """The trace files under ``path`` (a folder: its accepted files; a file: itself)."""
    return classify_files(path)[0]
