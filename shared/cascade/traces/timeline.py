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
import contextlib
import functools
import gc
import math
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cascade.engine import ops
from cascade.errors import TraceFormatError
from cascade.kerneltable import COLUMNS, DTYPES, KernelTable
from cascade.llm.names import classify
from cascade.tableio import read_table
from cascade.traces.jsonstream import current_limits, iter_chrome_json
from cascade.traces.opshapes import OpWork, is_helper_kernel, op_work, pass_of_kernel

_STEP_RE = re.compile(r"^step:(?P<kind>[A-Za-z_]+)(?P<rest>(?::[a-z_]+=\d+)*)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
               "cudaMemcpy", "cuCtxSynchronize", "cuStreamSynchronize")
_TORCH_DTYPES = {
    "float": "fp32", "c10::Float": "fp32", "double": "fp64", "c10::Half": "fp16",
    "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8",
    "signed char": "int8", "c10::qint8": "int8",
}


def _is_sync(call: str) -> bool:
    """A runtime/driver call that waits for the device (``cudaMemcpyAsync`` does not)."""
    return call.startswith(_SYNC_CALLS) and "Async" not in call


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
    starts = [s.start for s in steps]
    reach: list[float] = []  # reach[j]: the latest end among steps[0..j]
    for s in steps:
        reach.append(max(s.end, reach[-1]) if reach else s.end)
    parsed_names = [parse_step_name(s.name) for s in steps]
    for row in rows:
        t = row.get("host_launch_ns")
        if t is None or (isinstance(t, float) and math.isnan(t)):
            t = row.get("start_ns")
        if t is None or (isinstance(t, float) and math.isnan(t)):
            continue
        # innermost = the latest-starting range that contains t; ranges before j whose
        # reach ends at or before t cannot contain it, which bounds the backward scan
        j = bisect.bisect_right(starts, t) - 1
        best = -1
        while j >= 0 and reach[j] > t:
            if steps[j].start <= t < steps[j].end:
                best = j
                break
            j -= 1
        if best >= 0:
            parsed = parsed_names[best]
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
@dataclass(frozen=True, slots=True)
class Timeline:
    """An imported timeline: its kernel table and what the file says besides."""

    table: KernelTable
    device: str = ""
    """Name of the GPU the trace was recorded on (``deviceProperties`` in PyTorch traces,
    ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE`` in Nsight exports); '' if not named."""
    device_sm: int = -1
    """Its compute capability as ``major * 10 + minor`` (-1: unknown)."""
    warnings: tuple[str, ...] = ()
    """Things the importer skipped or could not link, one sentence each."""
    origin_ns: float = 0.0
    """The file's own timestamp (ns) that the table's times count from (its first event), so
    timelines of the same clock (the ranks of one server) can be put on one time axis."""


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _int(v: Any, default: int = -1) -> int:
    f = _num(v)
    if f is None or abs(f) > 2**62:
        return default
    return int(f)


def _ident(v: Any) -> Any:
    """A pid/tid as a hashable value (the format allows numbers or strings)."""
    return v if v is None or isinstance(v, int | float | str) else repr(v)


def _dim3(v: Any) -> tuple[int, int, int]:
    if not isinstance(v, list):
        return (-1, -1, -1)
    d = [_int(x) for x in v[:3]] + [-1] * (3 - min(len(v), 3))
    return (d[0], d[1], d[2])


class _CpuOp(msgspec.Struct, array_like=True, gc=False):
    start: float
    end: float
    tid: Any
    name: str
    work: OpWork | None
    dtype: str
    flops: float | None
    comm: tuple[str, int, float] | None = None
    """A collective's (name, ranks, bytes) from the profiler's ``record_param_comms`` args."""


#: The bytes of one element of a collective's ``dtype`` arg (the profiler's c10 names).
_COMM_ELEMENT_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Byte": 1, "Char": 1, "Int": 4,
                       "Long": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Bool": 1}
#: The profiler's collective names -> Cascade's (:data:`cascade.llm.work.COLLECTIVES`).
_COMM_NAMES = {"allreduce": "all_reduce", "all_reduce": "all_reduce", "allgather": "all_gather",
               "all_gather": "all_gather", "_allgather_base": "all_gather", "allgather_into_tensor_coalesced":
               "all_gather", "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
               "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all": "all_to_all",
               "alltoall": "all_to_all", "alltoall_base": "all_to_all", "send": "send_recv", "recv": "send_recv"}


def _comm_of(args: dict[str, Any]) -> tuple[str, int, float] | None:
    """(collective, ranks, bytes) of a cpu_op carrying PyTorch's communication args
    (``Collective name``, ``In msg nelems`` / ``Out msg nelems``, ``Group size``, ``dtype``);
    None where it carries none or they are not usable."""
    name = args.get("Collective name")
    if not isinstance(name, str):
        return None
    coll = _COMM_NAMES.get(name.strip().lower())
    ranks = _int(args.get("Group size"))
    width = _COMM_ELEMENT_BYTES.get(str(args.get("dtype", "")).removeprefix("c10::"))
    if coll is None or ranks < 1 or width is None:
        return None
    # nccl-tests' convention: the whole buffer (the gathered output, the full input to scatter)
    nelems = _int(args.get("Out msg nelems" if coll == "all_gather" else "In msg nelems"))
    if nelems <= 0:
        return None
    return coll, ranks, float(nelems * width)


class _Kernel(msgspec.Struct, array_like=True, gc=False):
    start: float
    dur: float
    name: str
    pid: Any
    tid: Any
    cat: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    regs: int
    smem: int
    stream: int
    device: int
    corr: int
    ext: int
    nbytes: float | None


_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: Categories of complete ('X') events whose fields are read (and so type-checked).
_READ_CATS = frozenset((*_KERNEL_CATS, "cuda_runtime", "cuda_driver", "cpu_op", "user_annotation"))
#: ``args`` fields read as numbers.
_NUMERIC_ARGS = ("registers per thread", "shared memory", "stream", "device", "correlation",
                 "External id", "bytes", "flops")
#: ``args`` fields read as arrays.
_LIST_ARGS = ("grid", "block", "Input Dims", "Input type", "Concrete Inputs")
#: Longest GPU name taken from ``deviceProperties``.
MAX_DEVICE_NAME = 256
_MAIN_FAMILIES = (ops.GEMM, ops.ATTENTION)


class _ChromeReader:
    """Collects what the importer needs from a stream of Chrome-trace events (bounded: only
    kernels, launches, cpu ops with their shape arguments and step ranges are kept)."""

    def __init__(self, fname: str) -> None:
        self.fname = fname
        self.kernels: list[_Kernel] = []
        self._work: dict[tuple[str, str], OpWork | None] = {}
        self.runtime: dict[int, tuple[float, Any, int]] = {}
        self.flow_start: dict[int, tuple[float, Any]] = {}
        self.flow_end: dict[tuple[Any, Any, float], int] = {}
        self.cpu_ops: list[_CpuOp] = []
        self.by_ext: dict[int, int] = {}
        self.steps: list[StepRange] = []
        self.syncs: list[float] = []
        self.t0 = math.inf
        self.device_props: Any = None
        self.skipped = 0
        self.events = 0
        self.keys: list[str] = []
        """The document's first top-level keys other than its events (for errors)."""
        self.names: dict[str, str] = {}

    def _bad(self, line: int, cat: str, field: str, expected: str, value: Any) -> TraceFormatError:
        """The error for a field of the current event that is not of the expected type."""
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:80] + "..."
        return TraceFormatError(self.fname, line,
                                f"{expected} {field!r} on the {cat!r} event #{self.events}",
                                f"{type(value).__name__} {shown}")

    def _ts(self, ev: Mapping[str, Any], line: int, cat: str) -> tuple[float, float]:
        ts = _num(ev.get("ts"))
        if ts is None:
            raise self._bad(line, cat, "ts", "a numeric", ev.get("ts"))
        raw = ev.get("dur", 0.0)
        dur = _num(raw)
        if dur is None or dur < 0:
            raise self._bad(line, cat, "dur", "a non-negative numeric", raw)
        return ts * 1000.0, dur * 1000.0

    def _args(self, ev: Mapping[str, Any], line: int, cat: str) -> dict[str, Any]:
        """The event's ``args`` object ({} when absent), its numeric and list fields checked."""
        args = ev.get("args")
        if args is None:
            return {}
        if not isinstance(args, dict):
            raise self._bad(line, cat, "args", "a JSON object", args)
        for key in _NUMERIC_ARGS:
            v = args.get(key)
            if v is not None and _num(v) is None:
                raise self._bad(line, cat, f"args.{key}", "a finite number", v)
        for key in _LIST_ARGS:
            v = args.get(key)
            if v is not None and not isinstance(v, list):
                raise self._bad(line, cat, f"args.{key}", "a JSON array", v)
        for key in ("grid", "block"):
            v = args.get(key)
            if isinstance(v, list) and any(_num(x) is None for x in v[:3]):
                raise self._bad(line, cat, f"args.{key}", "an array of numbers", v)
        return args

    def add(self, key: str, ev: Any, line: int) -> None:
        if key != "event":
            if len(self.keys) < 8:
                self.keys.append(key)
            if key == "deviceProperties":
                self.device_props = ev
            return
        self.events += 1
        if not isinstance(ev, dict):
            self.skipped += 1
            return
        cat = ev.get("cat")
        if cat == "python_function":
            return
        ph = ev.get("ph")
        cat = cat.lower() if isinstance(cat, str) else ""
        if ph in ("s", "f") and cat == "ac2g":
            fid = _int(ev.get("id"))
            ts = _num(ev.get("ts"))
            if fid >= 0 and ts is not None:
                if ph == "s":
                    self.flow_start[fid] = (ts * 1000.0, _ident(ev.get("tid")))
                else:
                    self.flow_end[(_ident(ev.get("pid")), _ident(ev.get("tid")), ts * 1000.0)] = fid
            return
        if ph != "X" or cat not in _READ_CATS:
            if ph == "X":
                ts_ = _num(ev.get("ts"))
                if ts_ is not None and cat not in ("trace", "gpu_user_annotation"):
                    self.t0 = min(self.t0, ts_ * 1000.0)
            return
        args = self._args(ev, line, cat)
        raw_name = ev.get("name", "")
        if not isinstance(raw_name, str):
            raise self._bad(line, cat, "name", "a string", raw_name)
        name = self.names.setdefault(raw_name, raw_name)
        if cat in _KERNEL_CATS:
            ts, dur = self._ts(ev, line, cat)
            self.t0 = min(self.t0, ts)
            self.kernels.append(_Kernel(
                ts, dur, name, _ident(ev.get("pid")), _ident(ev.get("tid")), cat,
                _dim3(args.get("grid")), _dim3(args.get("block")),
                _int(args.get("registers per thread")), _int(args.get("shared memory")),
                _int(args.get("stream")), _int(args.get("device")), _int(args.get("correlation")),
                _int(args.get("External id")), _num(args.get("bytes"))))
        elif cat in ("cuda_runtime", "cuda_driver"):
            ts, dur = self._ts(ev, line, cat)
            self.t0 = min(self.t0, ts)
            corr = _int(args.get("correlation"))
            if corr >= 0:
                self.runtime[corr] = (ts, _ident(ev.get("tid")), _int(args.get("External id")))
            if _is_sync(name):
                self.syncs.append(ts)
        elif cat == "cpu_op":
            ts, dur = self._ts(ev, line, cat)
            self.t0 = min(self.t0, ts)
            ext = _int(args.get("External id"))
            if ext >= 0:
                self.by_ext.setdefault(ext, len(self.cpu_ops))
            dims, types, concrete = (args.get("Input Dims"), args.get("Input type"),
                                     args.get("Concrete Inputs"))
            work = None
            if dims is not None:  # shapes repeat (layers, steps): one op_work per distinct record
                wkey = (name, repr((dims, types, concrete)))
                if wkey in self._work:
                    work = self._work[wkey]
                else:
                    work = self._work[wkey] = op_work(name, dims, types, concrete)
            self.cpu_ops.append(_CpuOp(ts, ts + dur, _ident(ev.get("tid")), name, work,
                                       work.dtype if work is not None else _first_dtype(types),
                                       _num(args.get("flops")), _comm_of(args)))
        else:  # user_annotation
            ts, dur = self._ts(ev, line, cat)
            self.t0 = min(self.t0, ts)
            if parse_step_name(name) is not None:
                self.steps.append(StepRange(ts, ts + dur, name))

    def device(self, kernel_devices: list[int]) -> tuple[str, int]:
        props = self.device_props
        if not isinstance(props, list) or not props:
            return "", -1
        want = max(set(kernel_devices), key=kernel_devices.count) if kernel_devices else None
        chosen = None
        for p in props:
            if isinstance(p, dict) and (want is None or _int(p.get("id")) == want):
                chosen = p
                break
        if chosen is None:
            chosen = next((p for p in props if isinstance(p, dict)), None)
        if chosen is None or not isinstance(chosen.get("name"), str):
            return "", -1
        if len(chosen["name"]) > MAX_DEVICE_NAME:
            raise TraceFormatError(self.fname, None,
                                   f"a GPU name of at most {MAX_DEVICE_NAME} characters in "
                                   "'deviceProperties'",
                                   f"a name of {len(chosen['name']):,} characters")
        major, minor = _int(chosen.get("computeMajor")), _int(chosen.get("computeMinor"))
        return chosen["name"].strip(), (major * 10 + minor) if major >= 0 and minor >= 0 else -1

    def _enclosing_op(self, tid: Any, t: float, starts: list[float], order: list[int]) -> int | None:
        j = bisect.bisect_right(starts, t) - 1
        best: int | None = None
        steps = 0
        while j >= 0 and steps < 4096:
            op = self.cpu_ops[order[j]]
            if op.tid == tid and op.start <= t <= op.end:
                best = order[j]
                break
            j -= 1
            steps += 1
        return best

    def _no_kernels(self) -> TraceFormatError:
        """The error for a document with no GPU kernel in it: no trace events at all (a JSON
        file that is no trace, or an empty one: say what it holds), or none on the GPU."""
        if self.events:
            return TraceFormatError(
                self.fname, None, "GPU kernel events (cat 'kernel', 'gpu_memcpy' or 'gpu_memset'): "
                "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU",
                f"{self.events} trace events, none of them on the GPU")
        keys = self.keys
        shown = ", ".join(repr(k) for k in keys[:6]) + (", ..." if len(keys) > 6 else "")
        return TraceFormatError(
            self.fname, None, "a Chrome trace: a JSON object with a 'traceEvents' array of events "
            "(torch.profiler's export_chrome_trace) or a JSON array of events",
            f"an object with the keys {shown} and no trace events" if keys else "no trace events")

    def finish(self) -> Timeline:
        if not self.kernels:
            raise self._no_kernels()
        warnings: list[str] = []
        if self.skipped:
            warnings.append(f"{self.fname}: {self.skipped} trace events were not JSON objects "
                            "and were skipped")
        order = sorted(range(len(self.cpu_ops)), key=lambda i: (self.cpu_ops[i].start,
                                                                 -self.cpu_ops[i].end))
        starts = [self.cpu_ops[i].start for i in order]
        rows: list[dict[str, Any]] = []
        op_of_row: list[int | None] = []
        unlinked = 0
        devices: list[int] = []
        for kr in self.kernels:
            ts, grid, block = kr.start, kr.grid, kr.block
            row: dict[str, Any] = {
                "name": kr.name, "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
                "block_x": block[0], "block_y": block[1], "block_z": block[2],
                "regs": kr.regs, "smem_bytes": kr.smem, "stream": kr.stream, "start_ns": ts,
                "duration_ns": kr.dur, "host_launch_ns": math.nan,
            }
            if kr.device >= 0 and kr.cat == "kernel":
                devices.append(kr.device)
            corr = kr.corr
            if corr < 0:
                corr = self.flow_end.get((kr.pid, kr.tid, ts), -1)
            rt = self.runtime.get(corr)
            launch_tid: Any = None
            if rt is not None:
                row["host_launch_ns"] = rt[0]
                launch_tid = rt[1]
            elif corr in self.flow_start:
                row["host_launch_ns"], launch_tid = self.flow_start[corr]
            ext = kr.ext
            if ext < 0 and rt is not None:
                ext = rt[2]
            op_idx = self.by_ext.get(ext) if ext >= 0 else None
            if op_idx is None and not math.isnan(row["host_launch_ns"]):
                op_idx = self._enclosing_op(launch_tid, row["host_launch_ns"], starts, order)
            if kr.cat != "kernel":
                row["op"] = "memcpy" if kr.cat == "gpu_memcpy" else "memset"
                if kr.nbytes is not None:
                    row["bytes"] = kr.nbytes
                op_idx = None
            elif op_idx is None:
                unlinked += 1
            rows.append(row)
            op_of_row.append(op_idx)
        if unlinked:
            warnings.append(f"{self.fname}: {unlinked} of {len(self.kernels)} kernels could not be "
                            "linked to the op that launched them (no External id, correlation "
                            "or enclosing cpu_op)")
        _attribute_ops(rows, op_of_row, self.cpu_ops)
        _assign_steps(rows, self.steps)
        _mark_syncs(rows, self.syncs)
        table = _finish(rows, self.t0 if math.isfinite(self.t0) else 0.0)
        device, sm = self.device(devices)
        return Timeline(table=table, device=device, device_sm=sm, warnings=tuple(warnings),
                        origin_ns=self.t0 if math.isfinite(self.t0) else 0.0)


def _attribute_ops(rows: list[dict[str, Any]], op_of_row: list[int | None],
                   cpu_ops: list[_CpuOp]) -> None:
    """Give each kernel its launching op's name, dtype and its share of the op's work."""
    groups: dict[int, list[int]] = {}
    for i, idx in enumerate(op_of_row):
        if idx is not None:
            groups.setdefault(idx, []).append(i)
    for idx, members in groups.items():
        cop = cpu_ops[idx]
        work = cop.work
        label = cop.name.split("::", 1)[1] if cop.name.startswith("aten::") else cop.name
        dtype = cop.dtype
        for i in members:
            rows[i]["op"] = label
            if dtype:
                rows[i]["dtype"] = dtype
        if cop.comm is not None:  # a collective with its size: an LLM-model row (cascade.llm.work)
            coll, ranks, nbytes = cop.comm
            nccl = [i for i in members if classify(rows[i]["name"]).kind == "collective"]
            for i in nccl:
                rows[i].update(op="collective", collective=coll, ranks=ranks, comm_bytes=nbytes / len(nccl),
                               impl=classify(rows[i]["name"]).impl or "nccl")
            if nccl:
                continue
        if work is None:
            if cop.flops is not None:
                for i in members:
                    rows[i]["flops"] = cop.flops / len(members)
            continue
        if work.kind not in ("gemm", "conv", "attention"):
            for i in members:
                if not math.isnan(work.flops):
                    rows[i]["flops"] = work.flops / len(members)
                if not math.isnan(work.bytes):
                    rows[i]["bytes"] = work.bytes / len(members)
            continue
        main = [i for i in members if _is_main_kernel(rows[i]["name"])]
        if not main:
            main = [max(members, key=lambda i: rows[i]["duration_ns"])]
        by_pass: dict[str, list[int]] = {p.name: [] for p in work.passes}
        loose: list[int] = []
        for i in main:
            named = pass_of_kernel(rows[i]["name"]) if len(work.passes) > 1 else ""
            by_pass.get(named, loose).append(i)
        empty = [p for p in by_pass if not by_pass[p]] or list(by_pass)
        for j, i in enumerate(loose):
            by_pass[empty[j % len(empty)]].append(i)
        for p in work.passes:
            ks = by_pass[p.name]
            for i in ks:
                rows[i].update(batch=p.batch, m=p.m, n=p.n, k=p.k, flops=p.flops / len(ks),
                               bytes=p.bytes / len(ks))


@functools.lru_cache(maxsize=4096)
def _is_main_kernel(name: str) -> bool:
    """A GEMM / convolution / attention kernel that is not a split-K or layout helper."""
    return not is_helper_kernel(name) and ops.family_of("", name) in _MAIN_FAMILIES


def _first_dtype(types: Any) -> str:
    for t in types if isinstance(types, list) else [types]:
        if isinstance(t, str) and t in _TORCH_DTYPES:
            return _TORCH_DTYPES[t]
    return ""


def read_chrome_trace(source: str | Path | Mapping[str, Any] | list[Any]) -> Timeline:
    """A PyTorch profiler (Kineto) Chrome trace, streamed with bounded memory (``.json`` or
    ``.json.gz``, object or array form), as a :class:`Timeline`.

    Kernels link to the op that launched them through the kernel's ``External id`` (else the
    launch's, found by ``correlation`` or the ``ac2g`` flow events, else the innermost
    ``cpu_op`` around the launch on its thread); that op's ``Input Dims``, ``Input type`` and
    ``Concrete Inputs`` give shapes, FLOPs, bytes and dtype (:mod:`cascade.traces.opshapes`).
    ``gpu_memcpy`` / ``gpu_memset`` events are rows too (``op`` memcpy / memset, ``bytes``).
    """
    if isinstance(source, Mapping | list):
        reader = _ChromeReader("<chrome trace>")
        if isinstance(source, Mapping):
            events = source.get("traceEvents")
            if not isinstance(events, list):
                raise TraceFormatError("<chrome trace>", None, "a 'traceEvents' list",
                                       type(events).__name__)
            for key, value in source.items():
                if key != "traceEvents":
                    reader.add(str(key), value, 0)
        else:
            events = source
        for i, ev in enumerate(events, start=1):
            reader.add("event", ev, i)
        return reader.finish()
    path = Path(source)
    reader = _ChromeReader(str(path))
    with _no_gc():
        for key, value, line in iter_chrome_json(path):
            reader.add(key, value, line)
        return reader.finish()


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: the events kept are acyclic, and with hundreds of
    thousands of them alive every collection would rescan them all (4x the import time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def import_chrome_trace(source: str | Path | Mapping[str, Any]) -> KernelTable:
    """Kernels of a PyTorch profiler ``export_chrome_trace`` file (see :func:`read_chrome_trace`)."""
    return read_chrome_trace(source).table

# ---- Nsight Systems SQLite export ------------------------------------------------------------
def _nsys_device(con: sqlite3.Connection, tables: set[str],
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
                if _is_sync(rname):
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
                if label and _num(start) is not None and _num(end) is not None:
                    ranges.append((float(start), float(end), str(label), gtid))
        device, sm = _nsys_device(con, tables, [r[14] for r in krows if isinstance(r[14], int)])
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
            "name": str(strings.get(name_id, name_id)), "grid_x": _int(gx), "grid_y": _int(gy),
            "grid_z": _int(gz), "block_x": _int(bx), "block_y": _int(by), "block_z": _int(bz),
            "regs": _int(regs), "smem_bytes": max(_int(ssm, 0), 0) + max(_int(dsm, 0), 0),
            "stream": _int(stream), "start_ns": float(start), "duration_ns": float(end - start),
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
                     "bytes": float(nbytes) if _num(nbytes) is not None and nbytes >= 0 else
                     math.nan, "stream": _int(stream), "start_ns": float(start),
                     "duration_ns": float(end - start), "host_launch_ns": host})
        t0 = min(t0, float(start), host if not math.isnan(host) else math.inf)
    for step in steps:
        t0 = min(t0, step.start)
    _assign_steps(rows, steps)
    _mark_syncs(rows, syncs)
    warnings = (f"{fname}: {bad} activity rows without numeric start/end were skipped",) \
        if bad else ()
    return Timeline(table=_finish(rows, t0 if math.isfinite(t0) else 0.0), device=device,
                    device_sm=sm, warnings=warnings)


def import_nsys_sqlite(path: str | Path) -> KernelTable:
    """Kernels of an ``nsys export --type sqlite`` database (see :func:`read_nsys_sqlite`)."""
    return read_nsys_sqlite(path).table


# ---- Cascade CSV / JSONL ----------------------------------------------------------------------
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
        reader = _ChromeReader(str(p))
        for key, value, _line in iter_chrome_json(p):
            if key == "deviceProperties":
                reader.device_props = value
                return reader.device([])
        return "", -1
    if name.endswith((".sqlite", ".db", ".sqlite3")):
        try:
            con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
            try:
                tables = {r[0] for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type='table'")}
                return _nsys_device(con, tables, [])
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise TraceFormatError(str(p), None, "an Nsight Systems SQLite export",
                                   str(exc)) from None
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
