"""Kernel timeline importers: PyTorch profiler Chrome traces, Nsight Systems SQLite, Cascade CSV/JSONL.

Every importer returns a :class:`KernelTable` (columns documented in
``README.md`` next to this file), one row per kernel launch in launch order,
``kernel_id`` 1-based, timestamps in ns since the first event of the file.

Step markers are ranges (``record_function`` / NVTX) named
``step:<kind>[:tokens=<n>][:context=<n>]`` (e.g. ``step:prefill:tokens=6``)
or PyTorch's ``ProfilerStep#N``; a kernel belongs to the innermost step range
that contains its host launch time (its device start when there is none).
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.errors import TraceFormatError
from cascade.kerneltable import COLUMNS, DTYPES, KernelTable
from cascade.tableio import read_table

_STEP_RE = re.compile(r"^step:(?P<kind>[A-Za-z_]+)(?P<rest>(?::[a-z_]+=\d+)*)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
               "cudaMemcpy", "cuCtxSynchronize", "cuStreamSynchronize")
_TORCH_DTYPES = {
    "float": "fp32", "c10::Float": "fp32", "double": "fp64", "c10::Half": "fp16",
    "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8",
    "signed char": "int8", "c10::qint8": "int8",
}


class StepRange(msgspec.Struct, frozen=True):
    """A step marker range: [start, end) in ns, with its parsed name."""

    start: float
    end: float
    name: str


def parse_step_name(name: str) -> tuple[str, int, int] | None:
    """(kind, tokens, context) of a step marker name, None if it is not one.

    ``step:prefill:tokens=6:context=6`` -> ('prefill', 6, 6);
    ``ProfilerStep#3`` -> ('', -1, -1).
    """
    m = _STEP_RE.match(name)
    if m:
        fields = dict(p.split("=") for p in m.group("rest").split(":") if p)
        return m.group("kind"), int(fields.get("tokens", -1)), int(fields.get("context", -1))
    if _PROFILER_STEP.match(name):
        return "", -1, -1
    return None


def _assign_steps(rows: list[dict[str, Any]], steps: list[StepRange]) -> None:
    steps = sorted(steps, key=lambda s: (s.start, -s.end))
    for row in rows:
        t = row.get("host_launch_ns")
        if t is None or (isinstance(t, float) and math.isnan(t)):
            t = row.get("start_ns")
        if t is None or (isinstance(t, float) and math.isnan(t)):
            continue
        best = -1
        for i, s in enumerate(steps):
            if s.start <= t < s.end and (best < 0 or s.start >= steps[best].start):
                best = i
        if best >= 0:
            parsed = parse_step_name(steps[best].name)
            assert parsed is not None
            row["step"] = best
            row["step_kind"], row["step_tokens"], row["step_context"] = parsed


def _finish(rows: list[dict[str, Any]], t0: float) -> KernelTable:
    for row in rows:
        for key in ("host_launch_ns", "start_ns"):
            if key in row and row[key] is not None and not math.isnan(row[key]):
                row[key] = row[key] - t0
    def order(r: dict[str, Any]) -> tuple[float, float]:
        host = r.get("host_launch_ns", math.nan)
        start = r.get("start_ns", math.nan)
        return (start if math.isnan(host) else host, 0.0 if math.isnan(start) else start)

    rows.sort(key=order)
    for i, row in enumerate(rows, start=1):
        row["kernel_id"] = i
    return KernelTable.from_rows(rows)


def _mark_syncs(rows: list[dict[str, Any]], sync_times: list[float]) -> None:
    launches = sorted((r["host_launch_ns"], i) for i, r in enumerate(rows)
                      if not math.isnan(r.get("host_launch_ns", math.nan)))
    for r in rows:
        r.setdefault("sync_after", 0)
    times = [t for t, _ in launches]
    for s in sync_times:
        j = bisect.bisect_right(times, s) - 1
        if j >= 0:
            rows[launches[j][1]]["sync_after"] = 1


# ---- PyTorch profiler Chrome trace -----------------------------------------------------------
def _gemm_shape(op: str, dims: Any) -> dict[str, int]:
    """batch/m/n/k from the input dims of a GEMM-like aten op (empty if not one)."""
    try:
        if op in ("mm", "matmul") and len(dims[0]) == 2:
            (m, k), (_, n) = dims[0], dims[1]
            return {"batch": 1, "m": m, "n": n, "k": k}
        if op == "addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return {"batch": 1, "m": m, "n": n, "k": k}
        if op == "linear":
            x, w = dims[0], dims[1]
            return {"batch": 1, "m": int(np.prod(x[:-1])), "n": w[0], "k": x[-1]}
        if op in ("bmm", "baddbmm"):
            a, b = (dims[0], dims[1]) if op == "bmm" else (dims[1], dims[2])
            return {"batch": a[0], "m": a[1], "n": b[2], "k": a[2]}
    except (IndexError, TypeError, ValueError):
        return {}
    return {}


def _op_fields(ev: Mapping[str, Any]) -> dict[str, Any]:
    args = ev.get("args", {}) or {}
    name = str(ev.get("name", ""))
    op = name.split("::", 1)[1] if name.startswith("aten::") else name
    out: dict[str, Any] = {"op": op}
    types = args.get("Input type") or []
    for t in types if isinstance(types, list) else [types]:
        if t in _TORCH_DTYPES:
            out["dtype"] = _TORCH_DTYPES[t]
            break
    if "flops" in args:
        out["flops"] = float(args["flops"])
    dims = args.get("Input Dims")
    if dims:
        out.update(_gemm_shape(op, dims))
    return out


def import_chrome_trace(source: str | Path | Mapping[str, Any]) -> KernelTable:
    """Kernels of a PyTorch profiler ``export_chrome_trace`` file (``.json`` or ``.json.gz``)."""
    if isinstance(source, Mapping):
        doc: Any = source
        fname = "<chrome trace>"
    else:
        path = Path(source)
        fname = str(path)
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rb") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise TraceFormatError(fname, None, "a JSON Chrome trace", str(exc)) from None
    events = doc.get("traceEvents") if isinstance(doc, Mapping) else doc
    if not isinstance(events, list):
        raise TraceFormatError(fname, None, "a 'traceEvents' list", type(events).__name__)
    kernels, runtime, cpu_ops, steps, syncs = [], {}, [], [], []
    t0 = math.inf
    for ev in events:
        if not isinstance(ev, Mapping) or ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        try:
            ts = float(ev["ts"]) * 1000.0
            dur = float(ev.get("dur", 0.0)) * 1000.0
        except (KeyError, TypeError, ValueError):
            raise TraceFormatError(fname, None, "numeric 'ts' and 'dur' on complete events",
                                   str(ev)[:120]) from None
        t0 = min(t0, ts)
        args = ev.get("args", {}) or {}
        name = str(ev.get("name", ""))
        if cat == "kernel":
            kernels.append((ts, dur, name, args))
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            if "correlation" in args:
                runtime[args["correlation"]] = (ts, dur, ev.get("tid"), name)
            if name.startswith(_SYNC_CALLS):
                syncs.append(ts)
        elif cat == "cpu_op":
            cpu_ops.append((ts, ts + dur, ev.get("tid"), ev))
        elif cat == "user_annotation" and parse_step_name(name) is not None:
            steps.append(StepRange(ts, ts + dur, name))
    cpu_ops.sort(key=lambda e: (e[0], -e[1]))
    starts = [c[0] for c in cpu_ops]
    rows: list[dict[str, Any]] = []
    for ts, dur, name, args in kernels:
        grid = list(args.get("grid", [-1, -1, -1])) + [-1, -1, -1]
        block = list(args.get("block", [-1, -1, -1])) + [-1, -1, -1]
        row: dict[str, Any] = {
            "name": name, "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
            "block_x": block[0], "block_y": block[1], "block_z": block[2],
            "regs": int(args.get("registers per thread", -1)),
            "smem_bytes": int(args.get("shared memory", -1)),
            "stream": int(args.get("stream", -1)),
            "start_ns": ts, "duration_ns": dur, "host_launch_ns": math.nan,
        }
        rt = runtime.get(args.get("correlation"))
        if rt is not None:
            row["host_launch_ns"] = rt[0]
            # innermost cpu_op on the launching thread that contains the launch
            j = bisect.bisect_right(starts, rt[0]) - 1
            best = None
            while j >= 0:
                s, e, tid, ev = cpu_ops[j]
                if s <= rt[0] <= e and tid == rt[2] and (best is None or s >= best[0]):
                    best = cpu_ops[j]
                    break
                j -= 1
            if best is not None:
                row.update(_op_fields(best[3]))
        rows.append(row)
    _assign_steps(rows, steps)
    _mark_syncs(rows, syncs)
    return _finish(rows, t0 if math.isfinite(t0) else 0.0)


# ---- Nsight Systems SQLite export ------------------------------------------------------------
def import_nsys_sqlite(path: str | Path) -> KernelTable:
    """Kernels of an ``nsys export --type sqlite`` database.

    Reads ``CUPTI_ACTIVITY_KIND_KERNEL`` (names through ``StringIds``),
    ``CUPTI_ACTIVITY_KIND_RUNTIME`` (host launch time by ``correlationId``,
    synchronisation calls) and ``NVTX_EVENTS`` (step ranges; the innermost
    other range around a launch becomes the op name).
    """
    path = Path(path)
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceFormatError(str(path), None, "an Nsight Systems SQLite export", str(exc)) from None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise TraceFormatError(str(path), None, "a CUPTI_ACTIVITY_KIND_KERNEL table",
                                   ", ".join(sorted(tables)) or "no tables")
        strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables \
            else {}
        kcols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        name_col = "demangledName" if "demangledName" in kcols else "shortName"
        q = (f"SELECT start, end, {name_col}, gridX, gridY, gridZ, blockX, blockY, blockZ, "
             "registersPerThread, staticSharedMemory, dynamicSharedMemory, streamId, "
             "correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
        krows = con.execute(q).fetchall()
        launch: dict[int, float] = {}
        syncs: list[float] = []
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            for start, corr, name_id in con.execute(
                "SELECT start, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            ):
                rname = str(strings.get(name_id, ""))
                if rname.startswith(_SYNC_CALLS):
                    syncs.append(float(start))
                launch.setdefault(corr, float(start))
        ranges: list[tuple[float, float, str]] = []
        if "NVTX_EVENTS" in tables:
            for start, end, text, text_id in con.execute(
                "SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL"
            ):
                label = text if text is not None else strings.get(text_id, "")
                if label:
                    ranges.append((float(start), float(end), str(label)))
    except sqlite3.Error as exc:
        raise TraceFormatError(str(path), None, "the Nsight Systems export schema", str(exc)) \
            from None
    finally:
        con.close()
    steps = [StepRange(s, e, n) for s, e, n in ranges if parse_step_name(n) is not None]
    ops = [(s, e, n) for s, e, n in ranges if parse_step_name(n) is None]
    rows: list[dict[str, Any]] = []
    t0 = math.inf
    for (start, end, name_id, gx, gy, gz, bx, by, bz, regs, ssm, dsm, stream, corr) in krows:
        host = launch.get(corr, math.nan)
        row: dict[str, Any] = {
            "name": str(strings.get(name_id, name_id)), "grid_x": gx, "grid_y": gy, "grid_z": gz,
            "block_x": bx, "block_y": by, "block_z": bz, "regs": regs,
            "smem_bytes": int(ssm) + int(dsm), "stream": stream, "start_ns": float(start),
            "duration_ns": float(end - start), "host_launch_ns": host,
        }
        t0 = min(t0, float(start), host if not math.isnan(host) else math.inf)
        t = host if not math.isnan(host) else float(start)
        inner = [r for r in ops if r[0] <= t < r[1]]
        if inner:
            label = max(inner, key=lambda r: r[0])[2].split(",", 1)[0]
            row["op"] = label.split("::", 1)[1] if label.startswith("aten::") else label
        rows.append(row)
    for s in steps:
        t0 = min(t0, s.start)
    _assign_steps(rows, steps)
    _mark_syncs(rows, syncs)
    return _finish(rows, t0 if math.isfinite(t0) else 0.0)


# ---- Cascade CSV / JSONL ----------------------------------------------------------------------
def import_cascade_csv(path: str | Path) -> KernelTable:
    """A Cascade kernel-table CSV or Parquet file, timestamps re-based to the first."""
    table = read_table(path)
    return _rebase(table)


def import_cascade_jsonl(path: str | Path | Iterable[str]) -> KernelTable:
    """One JSON object per line with KernelTable column names (``name`` required)."""
    fname = str(path) if isinstance(path, str | Path) else "<jsonl>"
    lines: Iterable[str] = (
        Path(path).open() if isinstance(path, str | Path) else path  # noqa: SIM115 (closed below)
    )
    rows: list[dict[str, Any]] = []
    dec = msgspec.json.Decoder(dict[str, Any])
    try:
        for lineno, line in enumerate(lines, start=1):
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
            dt = obj.get("dtype")
            if dt is not None and dt not in DTYPES:
                raise TraceFormatError(fname, lineno, f"dtype one of {', '.join(DTYPES)}", str(dt))
            rows.append(obj)
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            close()
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


def import_timeline(path: str | Path) -> KernelTable:
    """Import any supported timeline file, chosen by its name."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".json", ".json.gz")):
        return import_chrome_trace(p)
    if name.endswith((".sqlite", ".db", ".sqlite3")):
        return import_nsys_sqlite(p)
    if name.endswith(".jsonl"):
        return import_cascade_jsonl(p)
    if name.endswith(".csv"):
        return import_cascade_csv(p)
    raise TraceFormatError(str(p), None, "a .json[.gz] Chrome trace, .sqlite Nsight export, "
                           ".csv or .jsonl Cascade timeline", p.name)
