"""A whole Accel-Sim trace folder: kernelslist[.g], stats.csv and the kernel files."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from cascade.errors import CascadeError, TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.traces.parse import DEFAULT_CHUNK_BYTES, KernelFeatures, parse_kernel_file

#: Names of kernel trace files the tracer and its post-processing write.
KERNEL_FILE_RE = re.compile(r"^kernel-(\d+)(?:-ctx_0x[0-9a-fA-F]+)?\.trace(g)?(\.xz)?\Z")


class ListEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One command of a kernelslist: a kernel file or a host-to-device copy."""

    kind: str
    """'kernel' or 'memcpy'"""
    file: str = ""
    """kernel trace file name, relative to the folder"""
    address: int = -1
    """device address of a MemcpyHtoD"""
    nbytes: int = -1
    """bytes copied by a MemcpyHtoD"""


class TraceParseResult(msgspec.Struct, frozen=True, kw_only=True):
    """Every kernel of a folder, in kernelslist order, plus failures."""

    kernels: list[KernelFeatures]
    """parsed kernels"""
    failures: dict[str, str] = {}
    """kernel file -> error message (malformed or missing files)"""
    memcpys: list[ListEntry] = []
    """host-to-device copies in program order"""

    def table(self) -> KernelTable:
        """All parsed kernels as one KernelTable."""
        return KernelTable.from_rows([k.row for k in self.kernels])


def read_kernelslist(path: str | Path) -> list[ListEntry]:
    """Parse a ``kernelslist`` / ``kernelslist.g`` file."""
    path = Path(path)
    out: list[ListEntry] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("Memcpy"):
            parts = s.split(",")
            try:
                out.append(ListEntry(kind="memcpy", address=int(parts[1], 16), nbytes=int(parts[2])))
            except (IndexError, ValueError):
                raise TraceFormatError(
                    str(path), lineno, "'MemcpyHtoD,0x<address>,<bytes>'", s
                ) from None
            continue
        if "/" in s or "\\" in s or not KERNEL_FILE_RE.match(s):
            raise TraceFormatError(
                str(path), lineno, "a kernel file name kernel-N[-ctx_0x..].trace[g][.xz]", s
            )
        out.append(ListEntry(kind="kernel", file=s))
    return out


def read_stats_csv(path: str | Path) -> list[dict[str, str]]:
    """Rows of a tracer ``stats.csv`` (keys are the stripped header names)."""
    path = Path(path)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if not lines:
        raise TraceFormatError(str(path), 1, "a stats.csv header", "an empty file")
    header = [h.strip() for h in lines[0].split(",")]
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(header):
            raise TraceFormatError(str(path), lineno, f"{len(header)} comma-separated fields", line)
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def kernel_files(folder: str | Path) -> tuple[list[str], list[ListEntry]]:
    """Kernel file names in program order (from kernelslist.g, kernelslist, or the directory)."""
    folder = Path(folder)
    for name in ("kernelslist.g", "kernelslist"):
        if (folder / name).exists():
            entries = read_kernelslist(folder / name)
            return ([e.file for e in entries if e.kind == "kernel"],
                    [e for e in entries if e.kind == "memcpy"])
    found = []
    for p in folder.iterdir():
        m = KERNEL_FILE_RE.match(p.name)
        if m:
            found.append((int(m.group(1)), p.name))
    return [n for _, n in sorted(found)], []


def parse_trace_folder(
    folder: str | Path,
    *,
    source_sm: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> TraceParseResult:
    """Parse every kernel of a trace folder; a bad kernel is a failure, not an exception."""
    folder = Path(folder)
    names, memcpys = kernel_files(folder)
    kernels: list[KernelFeatures] = []
    failures: dict[str, str] = {}
    for name in names:
        path = folder / name
        if not path.exists():
            failures[name] = f"{path}: listed in the kernelslist but missing"
            continue
        try:
            kernels.append(parse_kernel_file(path, source_sm=source_sm, chunk_bytes=chunk_bytes))
        except CascadeError as exc:
            failures[name] = str(exc)
    return TraceParseResult(kernels=kernels, failures=failures, memcpys=memcpys)
