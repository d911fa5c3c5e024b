"""`cascade trace inspect PATH [--json]`: per-kernel summaries of a local trace."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cascade.errors import CascadeError

if TYPE_CHECKING:
    from cascade.kerneltable import KernelTable

_MIX = (
    ("int", "insts_int"), ("fp32", "insts_fp32"), ("fp16", "insts_fp16"),
    ("fp64", "insts_fp64"), ("sfu", "insts_sfu"), ("tensor", "insts_tensor"),
    ("ldg", "insts_ld_global"), ("stg", "insts_st_global"), ("lds", "insts_ld_shared"),
    ("sts", "insts_st_shared"), ("local", "insts_local"), ("atom", "insts_atomic"),
    ("bar", "insts_barrier"), ("br", "insts_branch"), ("other", "insts_other"),
)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("trace", help="work with local trace files")
    sub = parser.add_subparsers(dest="trace_command", metavar="COMMAND")
    p = sub.add_parser("inspect", help="parse a trace folder or file and print per-kernel summaries")
    p.add_argument("path", type=Path, help="trace folder, kernel file, or timeline file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--source-sm", type=int, default=None,
                   help="sm version of the capture GPU (fallback for bad headers)")
    p.set_defaults(func=inspect)
    parser.set_defaults(func=lambda _a: parser.print_help() or 2)


def load_any(path: Path, source_sm: int | None = None) -> tuple[KernelTable, list[str], dict[str, str]]:
    """(table, warnings, failures) for a trace folder, a kernel file or a timeline file (JSON
    timelines read under the ``CASCADE_TRACE_JSON_*`` limits)."""
    from cascade.platform.settings import load_settings
    from cascade.traces.jsonstream import JsonLimits, use_limits

    with use_limits(JsonLimits.from_settings(load_settings())):
        return _load_any(path, source_sm)


def _load_any(path: Path, source_sm: int | None) -> tuple[KernelTable, list[str], dict[str, str]]:
    from cascade.traces.folder import KERNEL_FILE_RE, parse_trace_folder
    from cascade.traces.parse import parse_kernel_file
    from cascade.traces.timeline import import_timeline

    if path.is_dir():
        res = parse_trace_folder(path, source_sm=source_sm)
        warnings = [w for k in res.kernels for w in k.warnings]
        return res.table(), warnings, res.failures
    if KERNEL_FILE_RE.match(path.name) or path.suffix in (".trace", ".traceg"):
        k = parse_kernel_file(path, source_sm=source_sm)
        return k.table(), k.warnings, {}
    return import_timeline(path), [], {}


def _num(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def inspect(args: argparse.Namespace) -> int:
    """Print per-kernel summaries of a trace."""
    path: Path = args.path
    if not path.exists():
        raise CascadeError(f"{path} does not exist")
    table, warnings, failures = load_any(path, args.source_sm)
    rows = []
    for r in table.rows():
        rows.append({k: _num(v) for k, v in r.items()})
    if args.json:
        json.dump({"kernels": rows, "warnings": warnings, "failures": failures}, sys.stdout,
                  indent=1)
        sys.stdout.write("\n")
        return 1 if failures else 0
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=220)
    t = Table(title=f"{path} - {len(rows)} kernels")
    for col in ("id", "kernel", "grid", "block", "CTAs", "warps", "warp insts", "mix",
                "sectors", "footprint", "time (us)"):
        t.add_column(col, overflow="fold")
    for r in rows:
        g = (r.get("grid_x"), r.get("grid_y"), r.get("grid_z"))
        b = (r.get("block_x"), r.get("block_y"), r.get("block_z"))
        dims = [x for x in g if isinstance(x, int) and x > 0]
        ctas = dims[0] * dims[1] * dims[2] if len(dims) == 3 else None
        total = r.get("warp_insts") or 0
        mix = " ".join(f"{lbl} {100 * r[c] / total:.0f}%" for lbl, c in _MIX
                       if total and r.get(c)) if total else ""
        t.add_row(
            str(r.get("kernel_id", "")), str(r.get("name", ""))[:60], "x".join(map(str, g)),
            "x".join(map(str, b)), _fmt(ctas), _fmt(r.get("warps")), _fmt(r.get("warp_insts")),
            mix, _fmt(r.get("gmem_sectors")), _fmt(r.get("footprint_lines")),
            _fmt(r["duration_ns"] / 1000 if r.get("duration_ns") is not None else None),
        )
    console.print(t)
    for w in warnings:
        console.print(f"[yellow]warning[/]: {w}")
    for name, err in failures.items():
        console.print(f"[red]failed[/] {name}: {err}")
    return 1 if failures else 0


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.0f}" if v >= 100 or v.is_integer() else f"{v:.2f}"
    return str(v)
