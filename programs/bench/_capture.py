"""Shapes of a whole PyTorch workload without a GPU: every aten op it dispatches, recorded on the
``meta`` device in the profiler's own record form and turned into a kernel table's work by the
trace importer's :func:`cascade.traces.opshapes.op_work` (what a ``record_shapes=True`` trace of
the same workload gives). Used by ``cascade bench resnet50`` and ``cascade bench wholemodels``;
recording needs PyTorch (its CPU build will do), reading the tables does not."""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from cascade.kerneltable import KernelTable

#: One recorded call: (``aten::<op>``, ``Input Dims``, ``Input type``, ``Concrete Inputs``).
Call = tuple[str, list[Any], list[str], list[str]]
#: aten ops that launch no kernel (views, metadata, allocation, autograd bookkeeping; ``clone`` and
#: ``_to_copy`` copy, and the importer counts them as copies).
NO_KERNEL = ("detach", "view", "t", "expand", "empty", "empty_like", "alias", "as_strided",
             "lift_fresh", "unsqueeze", "squeeze", "reshape", "_reshape_alias", "_unsafe_view",
             "transpose", "permute", "slice", "select", "split", "split_with_sizes", "unbind", "chunk",
             "_local_scalar_dense", "new_empty", "empty_strided", "set_", "resolve_conj", "resolve_neg")
COLUMNS = ["kernel_id", "name", "op", "dtype", "flops", "bytes", "batch", "m", "n", "k"]


def record_args(args: tuple[Any, ...]) -> tuple[list[Any], list[str], list[str]]:
    """A call's arguments as the profiler records them: ``Input Dims``, ``Input type``,
    ``Concrete Inputs``."""
    import torch

    names = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
             torch.int64: "long int", torch.int32: "int", torch.bool: "bool", torch.float64: "double"}
    dims: list[Any] = []
    types: list[str] = []
    concrete: list[str] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            dims.append(list(a.shape))
            types.append(names.get(a.dtype, str(a.dtype)))
            concrete.append("")
        elif isinstance(a, (list, tuple)) and a and all(isinstance(x, torch.Tensor) for x in a):
            dims.append([list(x.shape) for x in a])
            types.append("TensorList")
            concrete.append("")
        elif isinstance(a, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in a):
            dims.append([])
            types.append("int[]")
            concrete.append("[" + ", ".join(str(x) for x in a) + "]")
        elif isinstance(a, bool):
            dims.append([])
            types.append("bool")
            concrete.append(str(a))
        elif isinstance(a, (int, float)):
            dims.append([])
            types.append("Scalar")
            concrete.append(str(a))
        elif isinstance(a, (list, tuple)) and all(isinstance(x, bool) for x in a):
            dims.append([])
            types.append("bool[]")
            concrete.append("[" + ", ".join(str(x) for x in a) + "]")
        else:
            dims.append([])
            types.append("")
            concrete.append("")
    return dims, types, concrete


@contextmanager
def recording() -> Iterator[list[Call]]:
    """Record every kernel-launching aten call made inside the block, as CUDA would run it:
    dropout is PyTorch's one fused ``native_dropout`` kernel there (off CUDA it decomposes into a
    mask, a scale and a multiply)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[Call] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            op = func._overloadpacket.__name__
            if op not in NO_KERNEL:
                calls.append((f"aten::{op}", *record_args(tuple(args) + tuple((kwargs or {}).values()))))
            return func(*args, **(kwargs or {}))

    class CudaDropout(TorchFunctionMode):
        def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func is torch.nn.functional.dropout:
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                training = kwargs.get("training", args[2] if len(args) > 2 else True)
                return torch.ops.aten.native_dropout(args[0], p, True)[0] if training and p > 0 else args[0]
            return func(*args, **kwargs)

    dropout: Any = CudaDropout  # (torch's modes have no annotations)
    record: Any = Record
    with dropout(), record():
        yield calls


def table_of(calls: list[Call]) -> KernelTable:
    """The calls' work as a kernel table (:func:`cascade.traces.opshapes.op_work`): a row per
    op, a convolution backward's passes each their own row."""
    from cascade.traces.opshapes import op_work

    rows: list[dict[str, Any]] = []
    for name, dims, types, concrete in calls:
        work = op_work(name, dims, types, concrete)
        if work is None or not (np.isfinite(work.bytes) and work.bytes > 0):
            continue
        base = {"op": work.op, "dtype": work.dtype or "fp32"}
        if work.kind in ("gemm", "conv") and work.passes:
            for p in work.passes:
                label = name if p.name == "fwd" else f"{name} ({p.name})"
                rows.append({**base, "name": label, "flops": p.flops, "bytes": p.bytes, "batch": p.batch,
                             "m": p.m, "n": p.n, "k": p.k})
        else:
            rows.append({**base, "name": name, "flops": work.flops if np.isfinite(work.flops) else 0.0,
                         "bytes": work.bytes})
    table = KernelTable.from_rows(rows)
    table["kernel_id"] = np.arange(1, len(table) + 1)
    return table


def write_gz(table: KernelTable, path: Path) -> None:
    """``table`` as gzip CSV with a fixed header (no name, mtime 0): the same bytes each time."""
    from cascade.tableio import write_csv_text

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        text = io.TextIOWrapper(gz, encoding="utf-8", newline="")
        write_csv_text(table, text, columns=COLUMNS)
        text.flush()
        text.detach()
