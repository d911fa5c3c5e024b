"""`cascade calibrate --data DIR [--out FILE]`: refit the model calibration on measured data."""

from __future__ import annotations

import argparse
from pathlib import Path

from cascade.fitting.options import add_model_options, fit_config


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("calibrate", help="fit model parameters on measured cross-GPU data")
    p.add_argument("--data", required=True, metavar="DIR", help="directory of Vidur / NeuSight measurements")
    p.add_argument("--out", metavar="FILE", help="where to write (default: the packaged default.json)")
    p.add_argument("--holdout", type=float, default=0.2, help="fraction of shapes held out of the fit")
    p.add_argument("--evals", type=int, default=800,
                   help="objective evaluations per parameter search (coordinate pattern search)")
    p.add_argument("--no-leave-one-gpu-out", action="store_true", help="skip the per-GPU hold-out refits")
    p.add_argument("--thorough", action="store_true",
                   help="fit on every row with three fit/tile rounds (slow: about 10 minutes); the default "
                        "fits a stable 3000-row subsample per GPU pair in two rounds (about 2 minutes with "
                        "the leave-one-GPU-out refits)")
    p.add_argument("--shift", default="octave,aspect,extremes", metavar="KINDS",
                   help="shifted-shape protocols to run and record (comma-separated: octave, aspect, "
                        "extremes; 'none' to skip): whole regions of the shape space refitted without "
                        "and scored, about 2 minutes per refit (octave: two)")
    p.add_argument("--llm", action="store_true",
                   help="fit the LLM-kernel surfaces instead, on DIR laid out like measured/llm-kernels/ "
                        "(default --out: the packaged llm.npz; seconds)")
    add_model_options(p)
    p.set_defaults(func=run)


def _shifts(text: str) -> tuple[str, ...]:
    from cascade.errors import ValidationError
    from cascade.fitting.shift import SHIFTS

    kinds = tuple(k.strip() for k in text.split(",") if k.strip() and k.strip() != "none")
    bad = [k for k in kinds if k not in SHIFTS]
    if bad:
        raise ValidationError(f"unknown shift {bad[0]!r}; expected {', '.join(SHIFTS)} or none", field="shift")
    return kinds


def run(args: argparse.Namespace) -> int:
    """Fit, write the JSON with provenance and print the held-out accuracy."""
    import cascade.calibration as calibration_pkg
    from cascade.calibration import save_calibration
    from cascade.fitting.calibrate import fit_directory

    if args.llm:
        return _llm(args, Path(calibration_pkg.__file__).with_name("llm.npz"))

    out = Path(args.out) if args.out else Path(calibration_pkg.__file__).with_name("default.json")
    cal = fit_directory(args.data, holdout=args.holdout, evals=args.evals,
                        leave_one_gpu_out=not args.no_leave_one_gpu_out, thorough=args.thorough, log=print,
                        shifts=_shifts(args.shift), config=fit_config(args))
    save_calibration(cal, out)
    print(f"wrote {out}")
    for section, rows in cal.metrics.items():
        print(f"[{section}]")
        if section.startswith("end_to_end"):  # the end-to-end protocol's summaries (cascade validate --e2e)
            for r in rows:  # type: ignore[attr-defined]
                if r["group"] == "all" and r["model"] == "scaled":
                    print(f"  {r['dataset']:12s} {r['variant']:48s} cells={r['cells']:3d} mean {r['mean_pct']:6.2f} "
                          f"worst {r['worst_pct']:6.2f}")
            continue
        for r in rows:  # type: ignore[attr-defined]
            if r["family"] in ("all", "linear", "bmm") or r["kind"] == "vidur":
                where = f" [{r['left_out']}]" if r.get("left_out") else ""
                print(f"  {r['dataset']:12s} {r['family']:12s} {r['source']:>20s} -> {r['target']:<20s} "
                      f"{r['model']:9s} n={r['count']:6d} MAPE {r['mape']:6.2f} median {r['median_ape']:6.2f} "
                      f"p90 {r['p90_ape']:6.2f}{where}")
    return 0


def _llm(args: argparse.Namespace, default_out: Path) -> int:
    """Fit the LLM surfaces (:func:`cascade.fitting.llm.fit`), score the held-out shapes from
    every calibrated GPU, record those figures in the file (what predictions quote)."""
    import msgspec

    from cascade.fitting import llm as fit_llm
    from cascade.gpus import GPURegistry, builtin_specs
    from cascade.llm.model import save_llm_calibration

    reg = GPURegistry(builtin_specs())
    out = Path(args.out) if args.out else default_out
    sets = fit_llm.read_folder(args.data, reg, log=print)
    cal = fit_llm.fit(sets, heldout_fraction=args.holdout, source=Path(args.data).name, version="1")
    print(f"fitted {len(cal.surfaces)} surfaces on {sum(len(s.table) for s in sets)} rows "
          f"({args.holdout:.0%} of shapes held out); scoring the held-out shapes")
    scores = fit_llm.evaluate(sets, cal, heldout_only=args.holdout > 0)
    cal = msgspec.structs.replace(cal, metrics=[msgspec.to_builtins(s) for s in scores])
    save_llm_calibration(cal, out)
    for variant, row in fit_llm.summary(scores).items():
        print(f"  {variant}: {row}")
    print(f"wrote {out}")
    return 0
