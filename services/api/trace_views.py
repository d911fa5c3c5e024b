"""What ``/api/traces`` shows of a trace: its details with per-file and per-kernel progress, a
page of kernel summaries (from the preparation progress until the bundle is ready) and the
chart totals of a ready bundle's kernel table."""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec
import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import ExpectedSet, FileRecord
from services.api.schemas.traces import (
    KernelPage,
    KernelRow,
    TraceDetails,
    TraceProgress,
    TraceTotals,
)
from services.api.trace_index import UnitStatus

#: Columns of the per-kernel summaries (GET /api/traces/{id}/kernels).
SUMMARY_COLUMNS: tuple[str, ...] = (
    "kernel_id", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "regs", "smem_bytes", "stream", "warps", "warp_insts", "gmem_requests", "gmem_sectors",
    "footprint_lines", "smem_accesses", "tensor_flops", "duration_ns",
)
#: Bundle columns listed besides the summary ones (the step a kernel belongs to, its op).
BUNDLE_EXTRA_COLUMNS: tuple[str, ...] = ("step", "step_kind", "op")
#: Columns the kernel list sorts by (progress rows, bundle rows and their family).
KERNEL_SORT_COLUMNS: tuple[str, ...] = (*SUMMARY_COLUMNS, *BUNDLE_EXTRA_COLUMNS, "family",
                                        "state", "unit", "error")
#: Columns of a kernel page built from the preparation progress.
PROGRESS_COLUMNS: tuple[str, ...] = (*SUMMARY_COLUMNS, "state", "unit", "error")

#: Instruction-count columns summed into a trace's instruction mix.
INSTRUCTION_COLUMNS: tuple[str, ...] = (
    "insts_int", "insts_fp32", "insts_fp64", "insts_fp16", "insts_sfu", "insts_tensor",
    "insts_ld_global", "insts_st_global", "insts_ld_shared", "insts_st_shared", "insts_local",
    "insts_atomic", "insts_barrier", "insts_branch", "insts_other", "insts_const", "insts_tex",
)


def trace_details(record: TraceRecord, files: list[FileRecord], units: list[UnitStatus],
                  expected: ExpectedSet | None) -> TraceDetails:
    """The record with its files, a row per unit (the kernel's summary columns beside its
    progress) and the counts; per-kernel counts come from the unit records themselves (the
    record's counters are kept by workers and reconciled periodically; the units are the truth)."""
    fields = msgspec.structs.asdict(record)
    fields["kernels_prepared"] = sum(1 for u in units if u.kernel_id is not None and u.state == "prepared")
    fields["kernels_failed"] = sum(1 for u in units if u.kernel_id is not None and u.state == "failed")
    kernels: list[KernelRow] = [
        {"unit": u.unit, "kind": u.kind, "file": u.file, "state": u.state, "kernel_id": u.kernel_id,
         "name": u.name, "etag": u.etag, "attempts": u.attempts, "error": u.error, "warnings": u.warnings,
         "rows": u.rows, **u.summary}
        for u in units
    ]
    progress = TraceProgress(
        files=len(files), units=len(units), prepared=sum(1 for u in units if u.state == "prepared"),
        failed=sum(1 for u in units if u.state == "failed"),
        queued=sum(1 for u in units if u.state in ("queued", "preparing")))
    return TraceDetails(**fields, files=files, kernels=kernels, progress=progress, expected=expected)


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def progress_page(record: TraceRecord, units: list[UnitStatus], *, offset: int, limit: int, sort: str,
                  order: Literal["asc", "desc"], needle: str) -> KernelPage:
    """A page of a trace's kernels from their preparation progress (before the bundle is ready),
    those whose name (or family) contains ``needle``, sorted by ``sort`` with unknown values last."""
    if sort not in PROGRESS_COLUMNS and sort not in KERNEL_SORT_COLUMNS:
        raise ValidationError(f"unknown column {sort!r}; known: {', '.join(PROGRESS_COLUMNS)}", field="sort")
    rows: list[KernelRow] = [
        {"kernel_id": u.kernel_id, "name": u.name, **u.summary, "state": u.state, "unit": u.unit, "error": u.error}
        for u in units if u.kind == "kernel"
    ]
    if needle:
        rows = [r for r in rows if needle in str(r.get("name") or "").lower()
                or needle in str(r.get("family") or "").lower()]
    present = [r for r in rows if not _absent(r.get(sort))]
    absent = [r for r in rows if _absent(r.get(sort))]
    present.sort(key=lambda r: r[sort], reverse=order == "desc")  # type: ignore[arg-type,return-value]
    ordered = present + absent
    return KernelPage(trace_id=record.id, state=record.state, source="progress", total=len(ordered), offset=offset,
                      limit=limit, sort=sort, order=order, columns=list(PROGRESS_COLUMNS),
                      kernels=ordered[offset:offset + limit])


def family_names(table: KernelTable) -> np.ndarray:
    """Each kernel's op family name."""
    from cascade.opfamilies import FAMILIES, families

    n = len(table)
    op = table["op"] if table.has("op") else np.full(n, "", dtype=object)
    codes = families(op, table["name"])
    return np.asarray(FAMILIES, dtype=object)[codes.astype(np.int64)] if n else np.zeros(0, object)


def trace_summary(table: KernelTable) -> dict[str, Any]:
    """Totals of a kernel table for charts: time by family, per step, instruction mix."""
    n = len(table)
    duration = np.nan_to_num(np.asarray(table["duration_ns"], dtype=np.float64), nan=0.0) \
        if table.has("duration_ns") else np.zeros(n)
    fams = family_names(table)
    by_family: dict[str, dict[str, float]] = {}
    for fam in sorted(set(fams.tolist())):
        mask = fams == fam
        by_family[str(fam)] = {"count": int(mask.sum()), "time_ns": float(duration[mask].sum())}
    steps: list[dict[str, Any]] = []
    if table.has("step") and n:
        step = np.asarray(table["step"], dtype=np.int64)
        kinds = table["step_kind"] if table.has("step_kind") else np.full(n, "", dtype=object)
        start = np.asarray(table["start_ns"], dtype=np.float64) if table.has("start_ns") else None
        for value in np.unique(step[step >= 0]).tolist():
            mask = step == value
            first = int(np.argmax(mask))
            entry: dict[str, Any] = {"step": int(value), "kind": str(kinds[first]),
                                     "kernels": int(mask.sum()), "time_ns": float(duration[mask].sum())}
            if start is not None:
                s = start[mask]
                ends = s + duration[mask]
                entry["start_ns"] = float(np.nanmin(s)) if np.any(~np.isnan(s)) else None
                entry["end_ns"] = float(np.nanmax(ends)) if np.any(~np.isnan(ends)) else None
            steps.append(entry)
    mix = {c: float(np.nansum(table[c])) for c in INSTRUCTION_COLUMNS if table.has(c)}
    mix = {c: v for c, v in mix.items() if v > 0}
    return {"kernels": n, "time_ns": float(duration.sum()), "families": by_family, "steps": steps,
            "instruction_mix": mix}


def view_extras(table: KernelTable) -> tuple[np.ndarray, TraceTotals]:
    """Each kernel's family and the chart totals of a bundle's kernel table (a kernel view's
    ``build``; the totals' ``trace_id`` is filled in per answer)."""
    totals = msgspec.convert({"trace_id": "", "ready": True, **trace_summary(table)}, TraceTotals)
    return family_names(table), totals


def no_totals(trace_id: str) -> TraceTotals:
    """The chart totals of a trace that is not ready yet (all empty)."""
    return TraceTotals(trace_id=trace_id, ready=False, kernels=0, time_ns=0.0, families={}, steps=[],
                       instruction_mix={})
