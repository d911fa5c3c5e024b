"""An outside check: predicted versus publicly reported matmul throughput on many GPUs.

``external/torch_matmul.csv`` holds the best FP32 and FP16 throughput of square ``torch.mm``
over sizes 1024-10240 that people reported for their GPUs in a public community benchmark
(sources per row). None of it is fitted: it checks predictions into GPUs the calibration
never saw (H100 FP32, H200, B200, L40S, L4, P100, P4, A40, V100 SXM2) against hardware,
drivers and libraries other than the calibration data's.

Prediction, per dtype and calibrated source GPU: the source's reported best throughput x
(the model's best throughput on the target / on the source) over the same five sizes -- the
``scaled`` model's ratio (transfer exponent 1) at each GPU's best size, with the packaged
calibration. ``python -m cascade.fitting.external [--json]`` prints every (source, target)
cell with its error and the MAPE over the targets the calibration did not fit.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np

from cascade.calibration import Calibration, load_calibration
from cascade.errors import TraceFormatError, UnknownGPUError
from cascade.gpus.registry import GPURegistry, default_registry

DATA = Path(__file__).with_name("external") / "torch_matmul.csv"
#: The benchmark's square sizes.
SIZES: tuple[int, ...] = (1024, 2048, 4096, 8192, 10240)
#: Calibrated sources the check predicts from, per dtype (each GPU's own fit in ``default.json``).
SOURCES: dict[str, tuple[str, ...]] = {
    "fp32": ("SM80_A100_PCIE_40GB", "SM75_T4", "SM70_V100_PCIE_32GB"),
    "fp16": ("SM80_A100", "SM90_H100"),
}


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """One reported best throughput."""

    device: str
    spec: str
    dtype: str
    tflops: float
    source: str


class Cell(msgspec.Struct, frozen=True, kw_only=True):
    """One (source GPU, target GPU, dtype) prediction against the reports."""

    dtype: str
    source: str
    target: str
    target_calibrated: bool
    reports: int
    reported_tflops: float
    """Mean of the target's reports."""
    predicted_tflops: float
    error_pct: float


def load_reports(path: Path = DATA, registry: GPURegistry | None = None) -> list[Report]:
    """Read the reports CSV (``#`` comment lines allowed); errors name file, line and what
    was expected; every spec id must be known."""
    reg = registry or default_registry()
    out: list[Report] = []
    with path.open(newline="") as fh:
        lines = [(n, line) for n, line in enumerate(fh, start=1) if line.strip() and not line.startswith("#")]
    if not lines:
        raise TraceFormatError(str(path), None, "a header device,spec,dtype,tflops,source and rows")
    reader = csv.reader([line for _, line in lines])
    header = next(reader)
    want = ["device", "spec", "dtype", "tflops", "source"]
    if [h.strip() for h in header] != want:
        raise TraceFormatError(str(path), lines[0][0], "the header " + ",".join(want), ",".join(header))
    for (lineno, _), row in zip(lines[1:], reader, strict=True):
        if len(row) != len(want):
            raise TraceFormatError(str(path), lineno, f"{len(want)} fields", ",".join(row))
        device, spec, dtype, value, source = (c.strip() for c in row)
        if dtype not in SOURCES:
            raise TraceFormatError(str(path), lineno, "dtype fp32 or fp16", dtype)
        try:
            tflops = float(value)
        except ValueError:
            raise TraceFormatError(str(path), lineno, "a number of TFLOP/s", value) from None
        if not tflops > 0:
            raise TraceFormatError(str(path), lineno, "a positive number of TFLOP/s", value)
        if reg.resolve(spec) is None:
            raise UnknownGPUError(f"{spec} ({path.name} line {lineno})", reg.ids())
        out.append(Report(device=device, spec=reg.get(spec).id, dtype=dtype, tflops=tflops, source=source))
    return out


def model_best_tflops(spec_id: str, dtype: str, cal: Calibration, registry: GPURegistry) -> float:
    """The model's best throughput (TFLOP/s) on a GPU over :data:`SIZES` (kernel times)."""
    from cascade.engine.analytical import AnalyticalConfig
    from cascade.engine.predict import predict
    from cascade.kerneltable import KernelTable

    table = KernelTable.from_rows([{"name": "torch.mm", "op": "matmul", "dtype": dtype, "m": n, "n": n, "k": n}
                                   for n in SIZES])
    pred = predict(table, spec_id, model="analytical", calibration=cal, registry=registry,
                   config=AnalyticalConfig(measurement="kernel"))
    return max(2.0 * n**3 / float(ns) * 1e-3 for n, ns in zip(SIZES, pred.predicted_ns, strict=True))


def check(reports: Sequence[Report], cal: Calibration | None = None,
          registry: GPURegistry | None = None) -> list[Cell]:
    """Every (calibrated source, other target) cell of every dtype."""
    from cascade.calibration.accuracy import calibrated_in

    reg = registry or default_registry()
    cal = cal or load_calibration()
    cells: list[Cell] = []
    for dtype, sources in SOURCES.items():
        by_spec: dict[str, list[float]] = {}
        for r in reports:
            if r.dtype == dtype:
                by_spec.setdefault(r.spec, []).append(r.tflops)
        best = {s: model_best_tflops(s, dtype, cal, reg) for s in by_spec}
        for src in sources:
            if src not in by_spec:
                continue
            measured = statistics.fmean(by_spec[src])
            for tgt, values in by_spec.items():
                if tgt == src:
                    continue
                reported = statistics.fmean(values)
                predicted = measured * best[tgt] / best[src]
                cells.append(Cell(dtype=dtype, source=src, target=tgt,
                                  target_calibrated=calibrated_in(cal, tgt, "kernel" if dtype == "fp16" else "neusight"),
                                  reports=len(values), reported_tflops=round(reported, 2),
                                  predicted_tflops=round(predicted, 2),
                                  error_pct=round((predicted / reported - 1.0) * 100.0, 1)))
    return cells


def summary(cells: Sequence[Cell]) -> dict[str, dict[str, float]]:
    """MAPE per dtype over cells into uncalibrated targets, and over all cells."""
    out: dict[str, dict[str, float]] = {}
    for dtype in SOURCES:
        mine = [c for c in cells if c.dtype == dtype]
        unseen = [abs(c.error_pct) for c in mine if not c.target_calibrated]
        every = [abs(c.error_pct) for c in mine]
        if every:
            out[dtype] = {"cells": len(every), "mape": round(float(np.mean(every)), 1),
                          "uncalibrated_cells": len(unseen),
                          "uncalibrated_mape": round(float(np.mean(unseen)), 1) if unseen else float("nan")}
    return out


def markdown(cells: Sequence[Cell]) -> str:
    """The cells and the summary as markdown."""
    lines = ["| dtype | source -> target | target calibrated | reports | reported TFLOP/s | predicted | error |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        lines.append(f"| {c.dtype} | {c.source} -> {c.target} | {'yes' if c.target_calibrated else 'no'} | "
                     f"{c.reports} | {c.reported_tflops:.2f} | {c.predicted_tflops:.2f} | {c.error_pct:+.1f}% |")
    lines.append("")
    for dtype, s in summary(cells).items():
        lines.append(f"- {dtype}: MAPE {s['mape']:.1f} over {int(s['cells'])} cells; into GPUs the "
                     f"calibration never fitted: {s['uncalibrated_mape']:.1f} over {int(s['uncalibrated_cells'])} cells")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cascade.fitting.external",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="reports CSV (device,spec,dtype,tflops,source)")
    ap.add_argument("--calibration", metavar="FILE", help="calibration JSON (default: packaged)")
    ap.add_argument("--json", action="store_true", help="cells and summary as JSON")
    args = ap.parse_args(argv)
    cal = load_calibration(args.calibration) if args.calibration else load_calibration()
    cells = check(load_reports(args.data), cal)
    if args.json:
        sys.stdout.write(json.dumps({"calibration": {"id": cal.id, "digest": cal.digest()},
                                     "cells": msgspec.to_builtins(cells), "summary": summary(cells)}, indent=1) + "\n")
    else:
        sys.stdout.write(f"calibration `{cal.id}` (digest {cal.digest()}), reports: {args.data.name}\n\n"
                         + markdown(cells) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
