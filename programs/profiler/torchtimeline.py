"""The timeline pass's PyTorch profiler and what it writes.

:func:`profiled` wraps code in ``torch.profiler.profile`` (CPU and, when present, CUDA
activities; ``record_shapes=True``, ``with_flops=True``), advances step markers at every
:func:`programs.profiler.step` and writes the Chrome trace. On a machine without a GPU
the trace has no kernel events; :func:`cpu_op_rows` then turns its innermost CPU ops into
Cascade timeline rows (``timeline.jsonl``, op names prefixed ``cpu:``), so a CPU run can
still be imported and simulated end to end. Imports torch only when called.
"""

from __future__ import annotations

import bisect
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import programs.profiler as api

_DTYPES = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64",
           "signed char": "int8"}
_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")


@contextlib.contextmanager
def profiled(out: Path, *, step_markers: bool = True) -> Iterator[Any]:
    """Profile the body; the Chrome trace goes to ``out`` (and ``timeline.jsonl`` beside it
    when the trace holds no GPU kernels)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities, record_shapes=True, with_flops=True)
    prof.start()
    if step_markers:
        api.set_step_hook(prof.step)
    try:
        yield prof
    finally:
        api.set_step_hook(None)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        prof.stop()
        out.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(out))
        write_cpu_timeline_if_needed(out)


def write_cpu_timeline_if_needed(chrome: Path) -> Path | None:
    """``timeline.jsonl`` beside ``chrome`` when the Chrome trace has no kernel events."""
    doc = json.loads(chrome.read_text())
    rows = cpu_op_rows(doc)
    if rows is None:
        return None
    target = chrome.with_name("timeline.jsonl")
    with target.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return target


def _step_of(name: str) -> tuple[str, int, int] | None:
    if name.startswith("ProfilerStep#"):
        return ("", -1, -1)
    if not name.startswith("step:"):
        return None
    parts = name.split(":")
    kind, tokens, context = parts[1] if len(parts) > 1 else "", -1, -1
    for p in parts[2:]:
        key, _, value = p.partition("=")
        if key == "tokens" and value.isdigit():
            tokens = int(value)
        if key == "context" and value.isdigit():
            context = int(value)
    return (kind, tokens, context)


def cpu_op_rows(doc: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Timeline rows of the innermost ``cpu_op`` events (None when there are GPU kernels)."""
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    if any(str(e.get("cat", "")).lower() == "kernel" for e in events):
        return None
    ops = sorted((e for e in events if str(e.get("cat", "")).lower() == "cpu_op"),
                 key=lambda e: (e.get("tid"), float(e["ts"]), -float(e.get("dur", 0))))
    steps = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), s)
        for e in events if str(e.get("cat", "")).lower() == "user_annotation"
        and (s := _step_of(str(e.get("name", "")))) is not None
    )
    starts = [s[0] for s in steps]
    leaves = []
    for i, op in enumerate(ops):
        ts, end = float(op["ts"]), float(op["ts"]) + float(op.get("dur", 0))
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        if nxt is not None and nxt.get("tid") == op.get("tid") and float(nxt["ts"]) < end:
            continue  # it contains another op: not innermost
        leaves.append((ts, end, op))
    leaves.sort(key=lambda x: x[0])
    rows = []
    for ts, end, op in leaves:
        args = op.get("args", {}) or {}
        name = str(op.get("name", ""))
        row: dict[str, Any] = {
            "name": f"cpu:{name}", "grid": [1, 1, 1], "block": [1, 1, 1], "stream": 0,
            "host_launch_ns": ts * 1000.0, "start_ns": ts * 1000.0,
            "duration_ns": max(0.0, end - ts) * 1000.0,
            "op": name.removeprefix("aten::"),
        }
        types = args.get("Input type") or []
        dtype = next((_DTYPES[t] for t in types if t in _DTYPES), None)
        if dtype:
            row["dtype"] = dtype
        if args.get("flops"):
            row["flops"] = float(args["flops"])
        j = bisect.bisect_right(starts, ts) - 1
        while j >= 0:
            s0, s1, (kind, tokens, context) = steps[j]
            if s0 <= ts <= s1:
                row.update(step=j, step_kind=kind)
                if tokens >= 0:
                    row["step_tokens"] = tokens
                if context >= 0:
                    row["step_context"] = context
                break
            j -= 1
        rows.append(row)
    return rows
