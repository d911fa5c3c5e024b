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
    p.add_argument("--e2e", action="store_true",
                   help="end-to-end protocol instead: whole models (DIR/neusight-e2e) and single operators "
                        "(DIR/kernelbench) predicted into every other GPU with a measured total, with and "
                        "without the target's own calibration, the ratio roofline beside (seconds)")
    p.add_argument("--record", metavar="FILE",
                   help="with --e2e: write the summary into this calibration JSON's metrics "
                        "(end_to_end), the figures whole-trace predictions then quote (fits as "
                        "--fit-transfer does wherever KernelBench is there)")
    p.add_argument("--fit-transfer", action="store_true",
                   help="with --e2e: fit how much of a KernelBench operator's measured deviation carries to "
                        "another GPU (GEMMs, convolutions, the rest) and the window kernels' CUDA-core work per "
                        "byte (convolutions, depthwise, pooling) on the kernelbench pairs, score them with "
                        "each GPU left out of the fit, and use them (with --record: keep them in FILE; 50 s)")
    p.add_argument("--llm", action="store_true",
                   help="LLM-kernel protocol instead: DIR laid out like measured/llm-kernels/ (gemm, attention, "
                        "moe, nccl, custom all-reduce Parquet tables; any GPUs, device names resolved through "
                        "the aliases): from each GPU the shipped LLM calibration measured into every other GPU "
                        "of DIR, per operator family and dtype, beside the ratio roofline, each target also "
                        "scored with its own surfaces removed; never fits on DIR")
    p.add_argument("--llm-calibration", metavar="FILE",
                   help="with --llm: an LLM calibration (.npz from `cascade calibrate --llm`; default: packaged)")
    p.add_argument("--llm-sources", metavar="SPEC[,SPEC...]",
                   help="with --llm: only these source GPUs (default: every GPU the calibration measured)")
    p.add_argument("--serving", action="store_true",
                   help="serving protocol instead: DIR holds serving.csv and model_configs/ (+ model_map.csv) "
                        "laid out like measured/llm-kernels/; every agg row's TTFT and TPOT predicted from the "
                        "model's config alone (closed-loop simulation at the row's concurrency), MAPE per "
                        "(backend, model, GPU) beside a roofline and a leave-one-out group mean")
    p.add_argument("--serving-backends", default="vllm", metavar="NAME[,NAME...]",
                   help="with --serving: backends to predict (default vllm; also sglang, trtllm: reported apart; "
                        "sglang rows run SGLang's scheduler and KV sizing)")
    p.add_argument("--serving-every", type=int, default=1, metavar="K",
                   help="with --serving: subsample, every K-th row of each (backend, model, GPU) group")
    p.add_argument("--serving-requests", type=int, default=None, metavar="R",
                   help="with --serving: measured requests per closed-loop client (default 10: 10 x concurrency "
                        "requests, as concurrency sweeps send them, after 2 x concurrency warm-up requests run to "
                        "their end)")
    p.add_argument("--conv", action="store_true",
                   help="convolution protocol instead: DIR laid out like measured/neusight-conv/ (one <GPU>.csv[.gz] "
                        "of FP32 Conv2d latencies with the cuDNN kernels each launched): each GPU predicted from each "
                        "other's measured times by scaled (TF32 off, as the campaign ran) beside the ratio roofline, "
                        "MAPE per pair and per target GPU, each target scored with the convolution algorithm model "
                        "fitted without it")
    p.add_argument("--serving-clients-start", choices=["together", "staggered"], default="together",
                   help="with --serving: the closed loop's clients started together (default, as the benchmark "
                        "starts them) or each at its own phase")
    p.add_argument("--serving-engine", choices=["aiconfigurator", "defaults"], default="aiconfigurator",
                   help="with --serving: each engine's token budget and sequences as AIConfigurator's generator sets "
                        "them for a benchmark (default: batch_size + isl + 1500 tokens, batch_size sequences; vLLM and "
                        "TRT-LLM rows) or vLLM's API-server defaults (8192, 1024); SGLang rows keep SGLang's own "
                        "either way")
    p.add_argument("--serving-left-out", action="store_true",
                   help="with --serving: each row's GPU predicted with its own LLM-kernel surfaces removed (a GPU "
                        "never measured)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    from cascade.fitting.options import add_model_options

    add_model_options(p)
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
    if getattr(args, "conv", False):
        return _conv(args, reg)
    if args.llm:
        return _llm(args, reg)
    if getattr(args, "serving", False):
        return _serving(args, reg)
    cal = load_calibration(args.calibration) if args.calibration else load_calibration()
    if args.e2e:
        return _end_to_end(args, cal, reg)
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


def _conv(args: argparse.Namespace, reg: object) -> int:
    """The convolution protocol (:func:`cascade.fitting.conv.evaluate_conv`): MAPE per pair and target."""
    from cascade.calibration import load_calibration
    from cascade.fitting import conv
    from cascade.gpus import GPURegistry

    assert isinstance(reg, GPURegistry)
    cal = load_calibration(args.calibration) if args.calibration else load_calibration()
    sets = conv.load_conv_folder(args.data, reg, log=lambda m: print(f"cascade validate: {m}", file=sys.stderr))
    scores = conv.evaluate_conv(sets, cal, reg, calibration_for=conv.left_out_calibrations(sets, cal, reg))
    if args.json:
        doc = {"calibration": {"id": cal.id, "version": cal.version, "digest": cal.digest()}, "data": str(args.data),
               "conv": msgspec.to_builtins(scores), "per_target": conv.per_target(scores),
               "algorithms": conv.algorithm_counts(sets)}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    sys.stdout.write(conv.conv_markdown(scores, sets) + "\n")
    return 0


def _shifted(args: argparse.Namespace, sets: list) -> int:  # type: ignore[type-arg]
    """The shifted-shape protocol: per region table, then per (protocol, pair) pooled MAPE."""
    from cascade.fitting.options import fit_config
    from cascade.fitting.report import markdown_table, shift_summary
    from cascade.fitting.shift import shifted_rows
    from programs.cli.calibrate import _shifts

    rows = shifted_rows(sets, _shifts(args.shift), evals=args.evals,
                        log=lambda m: print(m, file=sys.stderr), config=fit_config(args))
    if args.json:
        doc = {"data": str(args.data), "shift": args.shift, "results": rows}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    sys.stdout.write(markdown_table(rows) + "\n\n" + shift_summary(rows) + "\n")
    return 0


def _end_to_end(args: argparse.Namespace, cal: object, reg: object) -> int:
    """The end-to-end protocol (:mod:`cascade.fitting.e2e`): tables per data set and variant."""
    from pathlib import Path

    from cascade.calibration import Calibration, load_calibration, save_calibration
    from cascade.fitting import e2e
    from cascade.gpus import GPURegistry

    assert isinstance(cal, Calibration) and isinstance(reg, GPURegistry)
    root = Path(args.data)
    # what is recorded is whole: the KernelBench fit and its leave-one-GPU-out rows (the figure
    # quoted for kernels no data set covers) are made again wherever KernelBench is there
    fit = args.fit_transfer or (bool(args.record) and (root / e2e.KERNELBENCH_FILE).is_file())
    run = e2e.end_to_end(root, cal, reg, fit=fit)
    cal, summary, anchored, whole, operators = run.calibration, run.summary, run.anchored, run.whole, run.operators
    if run.fitted is not None:
        print(f"cascade validate: kernelbench transfer and window work fitted on every pair: {run.fitted}; with each "
              "GPU left out: " + "; ".join(f"{g} {t}" for g, t in run.left_out.items()), file=sys.stderr)
    if args.record:
        save_calibration(run.record(load_calibration(args.record)), args.record)
        print(f"cascade validate: end_to_end metrics written to {args.record}", file=sys.stderr)
    if args.json:
        doc = {"calibration": {"id": cal.id, "version": cal.version, "digest": cal.digest()}, "data": str(root),
               "summary": msgspec.to_builtins(summary), "anchored": msgspec.to_builtins(anchored),
               "whole": msgspec.to_builtins(whole), "operators": msgspec.to_builtins(operators)}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    sys.stdout.write(e2e_markdown(summary, anchored, whole) + "\n")
    return 0


def e2e_markdown(summary: list, anchored: list, whole: list) -> str:  # type: ignore[type-arg]
    """The end-to-end summary as markdown tables: whole models (total and anchored), operators."""
    from cascade.calibration.accuracy import WORK_MODEL
    from cascade.fitting.e2e import family_errors

    lines = ["### whole models (neusight-e2e): |error| of the predicted total vs the target's measured e2e, %", "",
             "| variant | model | group | cells | mean | worst | anchored mean | anchored worst |",
             "|---|---|---|---|---|---|---|---|"]
    anch = {(a.variant, a.model, a.group): a for a in anchored}
    for s in summary:
        if s.dataset != "neusight-e2e":
            continue
        a = anch.get((s.variant, s.model, s.group))
        # a model predicted from the work alone has no source time to anchor to
        model = f"{s.model} (work alone)" if s.model == WORK_MODEL else s.model
        lines.append(f"| {s.variant} | {model} | {s.group} | {s.cells} | {s.mean_pct:.1f} | {s.worst_pct:.1f} | "
                     + (f"{a.mean_pct:.1f} | {a.worst_pct:.1f} |" if a else "- | - |"))
    for variant in sorted({c.variant for c in whole}):
        for model in ("scaled", WORK_MODEL):
            fam = family_errors([c for c in whole if c.variant == variant and c.model == model])
            if fam:
                what = "from the work alone" if model == WORK_MODEL else "scaled"
                lines += ["", f"per op family, {what}, {variant} (time-weighted |error| vs the target's own operator "
                          "times, %): " + ", ".join(f"{k} {v:.1f}" for k, v in fam.items())]
    lines += ["", "### single operators (kernelbench, >= 0.1 ms on the target): mean over GPU pairs of MAPE, %", "",
              "(work alone: each operator on each GPU that timed it from its FLOPs and bytes, no source; "
              "the mean over GPUs)", "",
              "| variant | group | pairs | scaled mean | scaled worst | ratio roofline mean | ratio roofline worst "
              "| work alone mean | work alone worst |",
              "|---|---|---|---|---|---|---|---|---|"]
    ops = {(s.variant, s.model, s.group): s for s in summary if s.dataset == "kernelbench"}
    for (variant, model, group), s in ops.items():
        if model != "scaled":
            continue
        # the ratio roofline fits nothing: the same figure as the plain variant's
        r = ops.get((variant, "roofline", group)) or ops.get(("target uncalibrated", "roofline", group))
        w = ops.get((variant, WORK_MODEL, group))
        lines.append(f"| {variant} | {group} | {s.cells} | {s.mean_pct:.1f} | {s.worst_pct:.1f} | "
                     + (f"{r.mean_pct:.1f} | {r.worst_pct:.1f} |" if r else "- | - |")
                     + (f" {w.mean_pct:.1f} | {w.worst_pct:.1f} |" if w else " - | - |"))
    return "\n".join(lines)


def _llm(args: argparse.Namespace, reg: object) -> int:
    """The LLM-kernel protocol (:func:`cascade.fitting.llm.evaluate`): one row per cell."""
    from cascade.fitting import llm as fit_llm
    from cascade.gpus import GPURegistry
    from cascade.llm.model import describe, load_llm_calibration

    assert isinstance(reg, GPURegistry)
    cal = load_llm_calibration(args.llm_calibration)
    sets = fit_llm.read_folder(args.data, reg, log=lambda m: print(f"cascade validate: {m}", file=sys.stderr))
    sources = [reg.get(s.strip()).id for s in args.llm_sources.split(",") if s.strip()] if args.llm_sources else None
    heldout = bool(args.heldout)
    scores = fit_llm.evaluate(sets, cal, heldout_only=heldout, sources=sources)
    if args.json:
        doc = {"calibration": describe(cal), "data": str(args.data), "heldout": cal.heldout if heldout else None,
               "llm": msgspec.to_builtins(scores), "summary": fit_llm.summary(scores)}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    sys.stdout.write(llm_markdown(scores) + "\n")
    return 0


def _serving(args: argparse.Namespace, reg: object) -> int:
    """The serving protocol (:func:`cascade.fitting.serving.evaluate`): MAPE per group."""
    from pathlib import Path

    from cascade.errors import ValidationError
    from cascade.fitting import serving
    from cascade.gpus import GPURegistry
    from cascade.llm.model import describe, load_llm_calibration
    from cascade.serving.scenario import REQUESTS_PER_CLIENT

    assert isinstance(reg, GPURegistry)
    root = Path(args.data)
    csv_path, cfg_dir = root / "serving.csv", root / "model_configs"
    for path in (csv_path, cfg_dir / "model_map.csv"):
        if not path.is_file():
            raise ValidationError(f"{path} does not exist", field="data")
    cal = load_llm_calibration(getattr(args, "llm_calibration", None))
    rows = serving.read_rows(csv_path.read_text())
    configs = serving.parse_configs(serving.read_model_map((cfg_dir / "model_map.csv").read_text()),
                                    lambda name: (cfg_dir / name).read_text())
    backends = tuple(b.strip() for b in args.serving_backends.split(",") if b.strip())
    per_client = args.serving_requests or REQUESTS_PER_CLIENT
    report = serving.evaluate(rows, configs, reg, cal, backends=backends, requests_per_client=per_client,
                              left_out=args.serving_left_out, clients_start=args.serving_clients_start,
                              engine=args.serving_engine,
                              every=max(1, args.serving_every))
    for message in report.skipped:
        print(f"cascade validate: skipped {message}", file=sys.stderr)
    if args.json:
        doc = {"calibration": describe(cal), "data": str(root), "requests_per_client": per_client,
               "clients_start": args.serving_clients_start, "engine": args.serving_engine,
               "every": args.serving_every, "serving": msgspec.to_builtins(report.scores),
               "rows": msgspec.to_builtins(report.rows), "skipped": report.skipped}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
        return 0
    lines = ["| backend | model | gpu | n | TTFT MAPE % | TPOT MAPE % | roofline TTFT % | roofline TPOT % "
             "| group-mean TTFT % | group-mean TPOT % | load not reached | TTFT / TPOT % without them |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in report.scores:
        gm = (f"{s.group_mean_ttft_mape_pct:.1f} | {s.group_mean_tpot_mape_pct:.1f}"
              if s.group_mean_ttft_mape_pct is not None and s.group_mean_tpot_mape_pct is not None else "- | -")
        rest = (f"{s.ttft_mape_pct_reached:.1f} / {s.tpot_mape_pct_reached:.1f}"
                if s.ttft_mape_pct_reached is not None and s.tpot_mape_pct_reached is not None else "-")
        lines.append(f"| {s.backend} | {s.model} | {s.gpu} | {s.n} | {s.ttft_mape_pct:.1f} | {s.tpot_mape_pct:.1f} | "
                     f"{s.roofline_ttft_mape_pct:.1f} | {s.roofline_tpot_mape_pct:.1f} | {gm} | "
                     f"{s.n_load_not_reached} | {rest} |")
    lines.append("\nload not reached: measured TPOT under 70% of the same deployment's at a lower concurrency "
                 "(the engine did not run that many requests at once); the MAPE columns count every row.")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def llm_markdown(scores: list) -> str:  # type: ignore[type-arg]
    """The LLM-kernel protocol as a markdown table, then the summary per variant."""
    from cascade.fitting.llm import summary

    lines = ["| variant | op | dtype | source -> target | n | MAPE % | median % | p90 % | ratio roofline % |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in scores:
        lines.append(f"| {s.variant} | {s.op} | {s.dtype} | {s.source} -> {s.target} | {s.n} | {s.mape_pct:.1f} | "
                     f"{s.median_pct:.1f} | {s.p90_pct:.1f} | {s.baseline_mape_pct:.1f} |")
    from cascade.fitting.llm import condensed_markdown

    for source in sorted({s.source for s in scores}):
        for variant in ("calibrated", "target left out"):
            if any(s.source == source and s.variant == variant for s in scores):
                lines += ["", f"{variant}: MAPE % (ratio roofline %)", "", condensed_markdown(scores, source, variant)]
    lines.append("")
    for variant, row in summary(scores).items():
        lines.append(f"{variant}: {row['cells']} cells, {row['n']} shapes, MAPE {row['mape_pct']:.1f}% "
                     f"(ratio roofline {row['baseline_mape_pct']:.1f}%), worst cell {row['worst_cell_pct']:.1f}%, "
                     f"{row['cells_worse_than_baseline']} cells worse than the ratio roofline")
    return "\n".join(lines)
