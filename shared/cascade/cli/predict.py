"""`cascade predict --trace FILE [--source SPEC] --target SPEC[,SPEC...]`: per-kernel predictions.

The source GPU defaults to the one the trace names (PyTorch ``deviceProperties``, Nsight
``TARGET_INFO_GPU``, a bundle's manifest); a ``--source`` that contradicts it is an error
unless ``--force-source`` is given."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cascade.engine.predict import Prediction


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("predict", help="predict a traced kernel table on other GPUs")
    p.add_argument("--trace", required=True, metavar="FILE", help="kernel-table CSV (or a loader-supported input)")
    p.add_argument("--source", metavar="SPEC",
                   help="GPU the trace was captured on (id or device name; default: the GPU the "
                        "trace names)")
    p.add_argument("--force-source", action="store_true",
                   help="use --source even where the trace names another GPU")
    p.add_argument("--target", required=True, metavar="SPEC[,SPEC...]", help="target GPU(s)")
    p.add_argument("--model", default="auto", help="kernel model (auto, scaled, analytical, roofline, accel-sim)")
    p.add_argument("--measurement", default="kernel",
                   help="how duration_ns was measured: kernel (default) or a harness name (neusight)")
    p.add_argument("--calibration", metavar="FILE", help="calibration JSON (default: packaged)")
    p.add_argument("--no-residuals", action="store_true",
                   help="scaled: leave out the calibration's per-target GEMM shape-residual grids")
    p.add_argument("--specs", metavar="DIR", help="also load user GPU spec files from DIR")
    p.add_argument("--out", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Predict and write input columns + target,predicted_ns,regime,model."""
    from cascade.calibration import load_calibration
    from cascade.engine.analytical import AnalyticalConfig
    from cascade.engine.io import load_trace, source_of_trace
    from cascade.engine.models import AutoConfig, ScaledConfig
    from cascade.engine.predict import predict_many
    from cascade.errors import ValidationError
    from cascade.gpus import GPURegistry, builtin_specs
    from cascade.kerneltable import _fmt

    reg = GPURegistry(builtin_specs())
    if args.specs:
        reg.load_dir(args.specs)
    loaded = load_trace(args.trace)
    table = loaded.table
    source = source_of_trace(reg, args.source, loaded, override=args.force_source)
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    targets = [reg.get(t.strip()) for t in args.target.split(",") if t.strip()]
    if not targets:
        raise ValidationError("give at least one target GPU", field="target")
    if args.model == "scaled" and source is None:
        raise ValidationError("--model scaled needs --source", field="source")
    config: object = None
    scaled = ScaledConfig(measurement=args.measurement, residuals=not args.no_residuals)
    if args.model == "scaled":
        config = scaled
    elif args.model == "auto":
        config = AutoConfig(scaled=scaled)
    elif args.model == "analytical":
        config = AnalyticalConfig(measurement=args.measurement)
    cal = load_calibration(args.calibration) if args.calibration else load_calibration()
    preds = predict_many(table, targets, source=source, model=args.model, calibration=cal,
                         config=config, registry=reg)
    columns = table.columns
    out = open(args.out, "w", newline="") if args.out else sys.stdout  # noqa: SIM115
    try:
        w = csv.writer(out, lineterminator="\n")
        w.writerow([*columns, "target", "predicted_ns", "regime", "model"])
        cols = [table[c] for c in columns]
        for p in preds:
            regimes = p.regime_names
            for i in range(len(table)):
                w.writerow([*(_fmt(c[i]) for c in cols), p.target, f"{p.predicted_ns[i]:.1f}",
                            regimes[i], p.models[i]])
    finally:
        if args.out:
            out.close()
    if args.out:
        totals = ", ".join(f"{p.target}: {p.total_ns / 1e6:.3f} ms" for p in preds)
        print(f"wrote {len(table) * len(preds)} rows to {Path(args.out)} (sum of kernels {totals})")
    for p in preds:
        print(provenance_line(p, len(table)), file=sys.stderr)
    return 0


def provenance_line(pred: Prediction, kernels: int) -> str:
    """What produced a target's predictions and how far to trust them (for stderr)."""
    from cascade.calibration.accuracy import describe
    pv = pred.provenance
    src = f" from {pv.source_id}" if pv.source_id else ""
    reasons = pred.extrapolation_reasons
    extra = (f"; {int(pred.extrapolated.sum())}/{kernels} kernels extrapolated ("
             + ", ".join(f"{n}: {text}" for text, n in reasons.items()) + ")") if reasons else ""
    return (f"{pv.spec_id}{src}: model {pv.model}, spec {pv.spec_hash}, calibration "
            f"{pv.calibration_id}@{pv.calibration_version} ({pv.calibration_digest}), "
            f"{pv.measurement} times; {describe(pv.accuracy)}{extra}")
