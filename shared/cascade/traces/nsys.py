"""Nsight Systems SQLite exports (``nsys export --type sqlite``): kernels, copies, launches,
NVTX ranges and the GPU's name (:func:`read_nsys_sqlite`)."""

from __future__ import annotations

import bisect
import math
import sqlite3
from pathlib import Path
from typing import Any

from cascade.errors import TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.traces.timelinecore import (
    StepRange,
    Timeline,
    assign_steps,
    finish_rows,
    integer,
    is_sync,
    mark_syncs,
    number,
    parse_step_name,
)


def nsys_device(con: sqlite3.Connection, tables: set[str],
                 device_ids: list[int]) -> tuple[str, int]:
    """(name, sm) of the GPU the kernels ran on, from TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE."""
    want = max(set(device_ids), key=device_ids.count) if device_ids else None
    for table, id_cols, major_cols, minor_cols in (
        ("TARGET_INFO_GPU", ("id", "cuDevice"), ("computeMajor", "computeCapabilityMajor"),
         ("computeMinor", "computeCapabilityMinor")),
        ("TARGET_INFO_CUDA_DEVICE", ("cudaId", "gpuId", "id"),
         ("computeCapabilityMajor", "computeMajor"), ("computeCapabilityMinor", "computeMinor")),
    ):
        if table not in tables:
            continue
        cols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        if "name" not in cols:
            continue
        id_col = next((c for c in id_cols if c in cols), None)
        major = next((c for c in major_cols if c in cols), None)
        minor = next((c for c in minor_cols if c in cols), None)
        select = ", ".join(c or "NULL" for c in (id_col, major, minor))
        rows = con.execute(f"SELECT name, {select} FROM {table}").fetchall()
        rows = [r for r in rows if isinstance(r[0], str) and r[0].strip()]
        if not rows:
            continue
        chosen = next((r for r in rows if want is not None and r[1] == want), rows[0])
        sm = (chosen[2] * 10 + chosen[3]) if isinstance(chosen[2], int) and \
            isinstance(chosen[3], int) else -1
        return chosen[0].strip(), sm
    return "", -1


def read_nsys_sqlite(path: str | Path) -> Timeline:  # noqa: C901 - one pass per optional table
    """An ``nsys export --type sqlite`` database as a :class:`Timeline`.

    Reads ``CUPTI_ACTIVITY_KIND_KERNEL`` (names through ``StringIds``; launch
    configuration, registers, static + dynamic shared memory, stream),
    ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` (rows with ``op`` memcpy / memset and
    their ``bytes``), ``CUPTI_ACTIVITY_KIND_RUNTIME`` (host launch time by
    ``correlationId``, synchronisation calls), ``NVTX_EVENTS`` (step ranges; the
    innermost other range around a launch becomes the op name) and the GPU's name from
    ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE``.
    """
    path = Path(path)
    fname = str(path)
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceFormatError(fname, None, "an Nsight Systems SQLite export", str(exc)) from None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise TraceFormatError(fname, None, "a CUPTI_ACTIVITY_KIND_KERNEL table",
                                   ", ".join(sorted(tables)) or "no tables")
        strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables \
            else {}
        kcols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        name_col = "demangledName" if "demangledName" in kcols else "shortName"
        missing = [c for c in ("start", "end", name_col) if c not in kcols]
        if missing:
            raise TraceFormatError(fname, None, "CUPTI_ACTIVITY_KIND_KERNEL columns start, end "
                                   "and demangledName or shortName", ", ".join(sorted(kcols)))

        def col(c: str, default: str = "-1") -> str:
            return c if c in kcols else default

        q = (f"SELECT start, end, {name_col}, {col('gridX')}, {col('gridY')}, {col('gridZ')}, "
             f"{col('blockX')}, {col('blockY')}, {col('blockZ')}, {col('registersPerThread')}, "
             f"{col('staticSharedMemory', '0')}, {col('dynamicSharedMemory', '0')}, "
             f"{col('streamId')}, {col('correlationId')}, {col('deviceId')} "
             "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
        krows = con.execute(q).fetchall()
        copies: list[tuple[Any, ...]] = []
        for table, label in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                             ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
            if table in tables:
                ccols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
                if {"start", "end"} <= ccols:
                    sel = ", ".join(c if c in ccols else "-1"
                                    for c in ("bytes", "streamId", "correlationId"))
                    copies += [(label, *r) for r in con.execute(
                        f"SELECT start, end, {sel} FROM {table}")]
        launch: dict[int, float] = {}
        launch_tid: dict[int, Any] = {}
        syncs: list[float] = []
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            rcols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")}
            tid_col = "globalTid" if "globalTid" in rcols else "NULL"
            for start, corr, name_id, gtid in con.execute(
                f"SELECT start, correlationId, nameId, {tid_col} FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            ):
                rname = str(strings.get(name_id, ""))
                if is_sync(rname):
                    syncs.append(float(start))
                launch.setdefault(corr, float(start))
                launch_tid.setdefault(corr, gtid)
        ranges: list[tuple[float, float, str, Any]] = []
        if "NVTX_EVENTS" in tables:
            ncols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
            tid_col = "globalTid" if "globalTid" in ncols else "NULL"
            for start, end, text, text_id, gtid in con.execute(
                f"SELECT start, end, text, textId, {tid_col} FROM NVTX_EVENTS WHERE end IS NOT NULL"
            ):
                label = text if text is not None else strings.get(text_id, "")
                if label and number(start) is not None and number(end) is not None:
                    ranges.append((float(start), float(end), str(label), gtid))
        device, sm = nsys_device(con, tables, [r[14] for r in krows if isinstance(r[14], int)])
    except sqlite3.Error as exc:
        raise TraceFormatError(fname, None, "the Nsight Systems export schema", str(exc)) \
            from None
    finally:
        con.close()
    if not krows and not copies:
        raise TraceFormatError(
            fname, None, "at least one row in CUPTI_ACTIVITY_KIND_KERNEL (or a memcpy / memset): "
            "profile the region where the GPU works with CUDA tracing on (nsys profile "
            "--trace=cuda,nvtx ...), then nsys export --type sqlite",
            "an export with no GPU activity rows")
    steps = [StepRange(s, e, n) for s, e, n, _t in ranges if parse_step_name(n) is not None]
    # op ranges per thread (NVTX ranges are per thread: an op on another thread never
    # encloses a launch), plus all threads together for kernels without a launch record
    by_thread: dict[Any, list[tuple[float, float, str]]] = {None: []}
    for s_, e_, n_, t_ in ranges:
        if parse_step_name(n_) is None:
            by_thread[None].append((s_, e_, n_))
            if t_ is not None:
                by_thread.setdefault(t_, []).append((s_, e_, n_))
    index: dict[Any, tuple[list[tuple[float, float, str]], list[float], list[float]]] = {}
    for key, items in by_thread.items():
        items.sort(key=lambda r: (r[0], -r[1]))
        reach: list[float] = []
        for r in items:
            reach.append(max(r[1], reach[-1]) if reach else r[1])
        index[key] = (items, [r[0] for r in items], reach)
    rows: list[dict[str, Any]] = []
    t0 = math.inf

    def enclosing(t: float, thread: Any) -> str | None:
        items, starts, reach = index[thread] if thread in index else index[None]
        j = bisect.bisect_right(starts, t) - 1
        while j >= 0 and reach[j] > t:
            if items[j][0] <= t < items[j][1]:
                return items[j][2]
            j -= 1
        return None

    bad = 0
    for (start, end, name_id, gx, gy, gz, bx, by, bz, regs, ssm, dsm, stream, corr,
         _dev) in krows:
        if not isinstance(start, int | float) or not isinstance(end, int | float):
            bad += 1
            continue
        host = launch.get(corr, math.nan)
        row: dict[str, Any] = {
            "name": str(strings.get(name_id, name_id)), "grid_x": integer(gx), "grid_y": integer(gy),
            "grid_z": integer(gz), "block_x": integer(bx), "block_y": integer(by), "block_z": integer(bz),
            "regs": integer(regs), "smem_bytes": max(integer(ssm, 0), 0) + max(integer(dsm, 0), 0),
            "stream": integer(stream), "start_ns": float(start), "duration_ns": float(end - start),
            "host_launch_ns": host,
        }
        t0 = min(t0, float(start), host if not math.isnan(host) else math.inf)
        around = enclosing(host if not math.isnan(host) else float(start),
                           launch_tid.get(corr) if not math.isnan(host) else None)
        if around:
            label = around.split(",", 1)[0]
            row["op"] = label.split("::", 1)[1] if label.startswith("aten::") else label
        rows.append(row)
    for label, start, end, nbytes, stream, corr in copies:
        if not isinstance(start, int | float) or not isinstance(end, int | float):
            bad += 1
            continue
        host = launch.get(corr, math.nan)
        rows.append({"name": "Memcpy" if label == "memcpy" else "Memset", "op": label,
                     "bytes": float(nbytes) if number(nbytes) is not None and nbytes >= 0 else
                     math.nan, "stream": integer(stream), "start_ns": float(start),
                     "duration_ns": float(end - start), "host_launch_ns": host})
        t0 = min(t0, float(start), host if not math.isnan(host) else math.inf)
    for step in steps:
        t0 = min(t0, step.start)
    assign_steps(rows, steps)
    mark_syncs(rows, syncs)
    warnings = (f"{fname}: {bad} activity rows without numeric start/end were skipped",) \
        if bad else ()
    return Timeline(table=finish_rows(rows, t0 if math.isfinite(t0) else 0.0), device=device,
                    device_sm=sm, warnings=warnings)


def import_nsys_sqlite(path: str | Path) -> KernelTable:
    """Kernels of an ``nsys export --type sqlite`` database (see :func:`read_nsys_sqlite`)."""
    return read_nsys_sqlite(path).table


def nsys_file_device(path: Path) -> tuple[str, int]:
    """(device name, sm) an Nsight export names ('' and -1 when none), without reading its
    kernels."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            return nsys_device(con, tables, [])
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceFormatError(str(path), None, "an Nsight Systems SQLite export",
                               str(exc)) from None
