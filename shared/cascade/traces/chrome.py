"""PyTorch profiler (Kineto) Chrome traces: kernels, their launches and the ops that launched
them, streamed with bounded memory (:func:`read_chrome_trace`)."""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from cascade import opfamilies
from cascade.errors import TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.llm.names import classify
from cascade.traces.jsonstream import iter_chrome_json
from cascade.traces.opshapes import OpWork, is_helper_kernel, op_work, pass_of_kernel
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

_TORCH_DTYPES = {
    "float": "fp32", "c10::Float": "fp32", "double": "fp64", "c10::Half": "fp16",
    "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8",
    "signed char": "int8", "c10::qint8": "int8",
}


def _ident(v: Any) -> Any:
    """A pid/tid as a hashable value (the format allows numbers or strings)."""
    return v if v is None or isinstance(v, int | float | str) else repr(v)


def _dim3(v: Any) -> tuple[int, int, int]:
    if not isinstance(v, list):
        return (-1, -1, -1)
    d = [integer(x) for x in v[:3]] + [-1] * (3 - min(len(v), 3))
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
    ranks = integer(args.get("Group size"))
    width = _COMM_ELEMENT_BYTES.get(str(args.get("dtype", "")).removeprefix("c10::"))
    if coll is None or ranks < 1 or width is None:
        return None
    # nccl-tests' convention: the whole buffer (the gathered output, the full input to scatter)
    nelems = integer(args.get("Out msg nelems" if coll == "all_gather" else "In msg nelems"))
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
_MAIN_FAMILIES = (opfamilies.GEMM, opfamilies.ATTENTION)


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
        ts = number(ev.get("ts"))
        if ts is None:
            raise self._bad(line, cat, "ts", "a numeric", ev.get("ts"))
        raw = ev.get("dur", 0.0)
        dur = number(raw)
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
            if v is not None and number(v) is None:
                raise self._bad(line, cat, f"args.{key}", "a finite number", v)
        for key in _LIST_ARGS:
            v = args.get(key)
            if v is not None and not isinstance(v, list):
                raise self._bad(line, cat, f"args.{key}", "a JSON array", v)
        for key in ("grid", "block"):
            v = args.get(key)
            if isinstance(v, list) and any(number(x) is None for x in v[:3]):
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
            fid = integer(ev.get("id"))
            ts = number(ev.get("ts"))
            if fid >= 0 and ts is not None:
                if ph == "s":
                    self.flow_start[fid] = (ts * 1000.0, _ident(ev.get("tid")))
                else:
                    self.flow_end[(_ident(ev.get("pid")), _ident(ev.get("tid")), ts * 1000.0)] = fid
            return
        if ph != "X" or cat not in _READ_CATS:
            if ph == "X":
                ts_ = number(ev.get("ts"))
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
                integer(args.get("registers per thread")), integer(args.get("shared memory")),
                integer(args.get("stream")), integer(args.get("device")), integer(args.get("correlation")),
                integer(args.get("External id")), number(args.get("bytes"))))
        elif cat in ("cuda_runtime", "cuda_driver"):
            ts, dur = self._ts(ev, line, cat)
            self.t0 = min(self.t0, ts)
            corr = integer(args.get("correlation"))
            if corr >= 0:
                self.runtime[corr] = (ts, _ident(ev.get("tid")), integer(args.get("External id")))
            if is_sync(name):
                self.syncs.append(ts)
        elif cat == "cpu_op":
            ts, dur = self._ts(ev, line, cat)
            self.t0 = min(self.t0, ts)
            ext = integer(args.get("External id"))
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
                                       number(args.get("flops")), _comm_of(args)))
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
            if isinstance(p, dict) and (want is None or integer(p.get("id")) == want):
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
        major, minor = integer(chosen.get("computeMajor")), integer(chosen.get("computeMinor"))
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
        assign_steps(rows, self.steps)
        mark_syncs(rows, self.syncs)
        table = finish_rows(rows, self.t0 if math.isfinite(self.t0) else 0.0)
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
    return not is_helper_kernel(name) and opfamilies.family_of("", name) in _MAIN_FAMILIES


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


def chrome_device(path: Path) -> tuple[str, int]:
    """(device name, sm) a Chrome trace's ``deviceProperties`` name ('' and -1 when none), read
    without building its kernel table (``deviceProperties`` may follow the events)."""
    reader = _ChromeReader(str(path))
    for key, value, _line in iter_chrome_json(path):
        if key == "deviceProperties":
            reader.device_props = value
            return reader.device([])
    return "", -1
