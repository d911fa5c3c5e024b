"""`cascade validate --data DIR [--json]`: cross-GPU accuracy on measured data."""

from __future__ import annotations

import argparse
import sys

import msgspec


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("validate", help="predict each GPU's measured times from another GPU's")
    p.add_argument("--data", required=True, metavar="DIR", help="directory of Vidur / NeuSight measurements")
    p.add_argument("--models", default="roofline,scaled,analytical", help="comma-separated models")
    p.add_argument("--calibration", metavar="FILE", help="calibration JSON (default: packaged)")
    p.add_argument("--specs", metavar="DIR", help="also load user GPU spec files from DIR")
    p.add_argument("--heldout", type=float, default=None, metavar="FRACTION",
                   help="only score the shapes the calibration held out (its hash split)")
    p.add_argument("--shift", metavar="KINDS",
                   help="shifted-shape protocol instead (comma-separated: octave, aspect, extremes): refit "
                        "without whole regions of the shape space and score only them, per region and GPU "
                        "pair, roofline beside scaled (about 2 minutes per refit; octave has two)")
    p.add_argument("--evals", type=int, default=400, help="objective evaluations per search of --shift refits")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print per (dataset, family, GPU pair, model): count, MAPE, median and p90 APE."""
    from cascade.calibration import load_calibration
    from cascade.errors import ValidationError
    from cascade.fitting.fit import heldout_mask
    from cascade.fitting.measured import discover, pairs
    from cascade.fitting.validation import evaluate
    from cascade.gpus import GPURegistry, builtin_specs

    reg = GPURegistry(builtin_specs())
    if args.specs:
        reg.load_dir(args.specs)
    cal = load_calibration(args.calibration) if args.calibration else load_calibration()
    skipped: list[str] = []
    sets = discover(args.data, reg, skipped=skipped)
    for message in skipped:
        print(f"cascade validate: skipped {message}", file=sys.stderr)
    all_pairs = pairs(sets)
    if not all_pairs:
        raise ValidationError(f"no pair of GPUs with common operators under {args.data}", field="data")
    if args.shift:
        return _shifted(args, sets)
    select = None
    if args.heldout:
        select = {(p.source.dataset, p.source.spec.id, p.target.spec.id): heldout_mask(p.keys, args.heldout)
                  for p in all_pairs}
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    stats = evaluate(all_pairs, cal, models, reg=reg, select=select)
    if args.json:
        doc = {"calibration": {"id": cal.id, "version": cal.version, "digest": cal.digest()},
               "data": str(args.data), "heldout": args.heldout, "results": msgspec.to_builtins(stats)}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cross-GPU accuracy (calibration {cal.id} {cal.version})")
    for col in ("dataset", "family", "source -> target", "model", "count", "MAPE %", "median %", "p90 %"):
        table.add_column(col, justify="right" if col in ("count", "MAPE %", "median %", "p90 %") else "left")
    for s in stats:
        table.add_row(s.dataset, s.family, f"{s.source} -> {s.target}", s.model, str(s.count),
                      f"{s.mape:.1f}", f"{s.median_ape:.1f}", f"{s.p90_ape:.1f}")
    Console(width=140).print(table)
    return 0


def _shifted(args: argparse.Namespace, sets: list) -> int:  # type: ignore[type-arg]
    """The shifted-shape protocol: per region table, then per (protocol, pair) pooled MAPE."""
    from cascade.fitting.report import markdown_table, shift_summary
    from cascade.fitting.shift import shifted_rows
    from programs.cli.calibrate import _shifts

    rows = shifted_rows(sets, _shifts(args.shift), evals=args.evals,
                        log=lambda m: print(m, file=sys.stderr))
    if args.json:
        doc = {"data": str(args.data), "shift": args.shift, "results": rows}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    sys.stdout.write(markdown_table(rows) + "\n\n" + shift_summary(rows) + "\n")
    return 0
