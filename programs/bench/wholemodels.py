"""`cascade bench wholemodels`: the whole transformer models of ``neusight-e2e`` as a trace gives
them, predicted from their work alone against their measured end-to-end times.

``neusight-e2e`` holds five Hugging Face models (inference, and training on the V100) as kernel
tables NeuSight's converter wrote, with each GPU's measured end-to-end time. A user's trace is
not that table: its work comes from the trace importer (:func:`cascade.traces.opshapes.op_work`,
``record_shapes=True``). Here each configuration is the model itself (``transformers``, random
weights, eager attention, FP32) run on PyTorch's ``meta`` device, every aten op recorded in the
profiler's record form and turned into work by ``op_work`` (:mod:`programs.bench._capture`;
dropout as CUDA's one fused kernel). The tables are committed
(``data/wholemodels/<config>.kernels.csv.gz``); ``--write`` records them again (needs PyTorch and
``transformers``).

Per cell (a configuration on a GPU that measured it), the bench prints the predicted total from
the work alone (the ``analytical`` model, as ``cascade predict`` runs a table of shapes) from the
recorded table and from NeuSight's, with the target's own fit taken out and as calibrated, and
the two tables' FLOPs and bytes against each other: the check that the importer's accounting
holds on whole real models, on measured totals.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cascade.kerneltable import KernelTable
from programs.bench._capture import Call, recording, table_of, write_gz

NAME = "wholemodels"
HELP = "neusight-e2e's models as a trace's importer sees them, from their work alone vs measured e2e"

TABLES = Path(__file__).with_name("data") / "wholemodels"
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "measured"


def _configs() -> dict[str, Callable[[], tuple[Any, str]]]:
    """Model name in ``neusight-e2e`` -> (transformers config, model kind). The ``gpt3_*`` models
    are GPT-2's architecture at the sizes NeuSight's tables have (GPT-3 XL there: 24 layers of
    3072, 24 heads)."""
    import transformers as hf

    return {
        "bert_large": lambda: (hf.BertConfig(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                                             intermediate_size=4096, vocab_size=30522), "bert"),
        "gpt2_large": lambda: (hf.GPT2Config(n_layer=36, n_embd=1280, n_head=20, vocab_size=50257,
                                             n_positions=1024), "causal"),
        "gpt3_xl": lambda: (hf.GPT2Config(n_layer=24, n_embd=3072, n_head=24, vocab_size=50257,
                                          n_positions=2048), "causal"),
        "gpt3_27": lambda: (hf.GPT2Config(n_layer=32, n_embd=2560, n_head=32, vocab_size=50257,
                                          n_positions=2048), "causal"),
        "opt_13": lambda: (hf.OPTConfig(num_hidden_layers=24, hidden_size=2048, num_attention_heads=32,
                                        ffn_dim=8192, vocab_size=50272, max_position_embeddings=2048,
                                        word_embed_proj_dim=2048), "causal"),
    }


def capture(config: str) -> list[Call]:
    """``<model>-<inf|train>-<seq>-<batch>`` as NeuSight ran it: inference under ``no_grad`` in
    eval mode (BERT with a sequence-classification head); training a forward, cross-entropy and
    ``loss.backward()`` (BERT with its pre-training heads), no optimizer step."""
    import torch
    import transformers as hf

    model_name, mode, seq, batch = config.rsplit("-", 3)
    cfg, kind = _configs()[model_name]()
    cfg._attn_implementation = "eager"
    model: Any
    with torch.device("meta"):
        if kind == "bert":
            model = hf.BertForPreTraining(cfg) if mode == "train" else hf.BertForSequenceClassification(cfg)
        else:
            model = hf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ids = torch.zeros(int(batch), int(seq), dtype=torch.long, device="meta")
    if mode == "inf":
        model.eval()
        with torch.no_grad(), recording() as calls:
            model(input_ids=ids)
        return calls
    model.train()
    with recording() as calls:
        out = model(input_ids=ids)
        logits = out.logits if hasattr(out, "logits") else out.prediction_logits
        labels = torch.zeros(logits.shape[0] * logits.shape[1], dtype=torch.long, device="meta")
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels).backward()
    return calls


def table_path(config: str, folder: Path = TABLES) -> Path:
    return folder / f"{config}.kernels.csv.gz"


def write(configs: list[str], folder: Path = TABLES) -> dict[str, KernelTable]:
    """Record each configuration and write its table."""
    out = {}
    for config in configs:
        out[config] = table = table_of(capture(config))
        write_gz(table, table_path(config, folder))
    return out


def cells(data: Path = DATA, folder: Path = TABLES) -> list[dict[str, Any]]:
    """Per (configuration, GPU that measured it): the measured e2e time and the predicted total
    from the work alone, from the recorded table and from NeuSight's, each with the target's fit
    taken out (``uncal``) and as calibrated (``cal``); the FLOPs and bytes ratios of the tables."""
    from cascade.calibration import load_calibration
    from cascade.calibration.accuracy import WORK_MODEL
    from cascade.engine.predict import predict
    from cascade.fitting import e2e
    from cascade.gpus import default_registry
    from cascade.tableio import read_table

    reg = default_registry()
    cal = load_calibration()
    out: list[dict[str, Any]] = []
    for run in sorted(e2e.load_neusight_e2e(data / e2e.WHOLE_DIR, reg), key=lambda r: (r.workload, r.spec.id)):
        ours = read_table(table_path(run.workload, folder))
        theirs = e2e.work_cells([run], cal, reg)  # NeuSight's table, both variants
        row: dict[str, Any] = {"config": run.workload, "gpu": run.spec.id, "measured_ms": run.total_ns / 1e6,
                               "flops_ratio": float(np.nansum(ours["flops"]) / np.nansum(run.table["flops"])),
                               "bytes_ratio": float(np.nansum(ours["bytes"]) / np.nansum(run.table["bytes"]))}
        for cell in theirs:
            key = "uncal" if cell.variant == "target uncalibrated" else "cal"
            use = e2e.without_gpu(cal, run.spec.id) if key == "uncal" else cal
            p = predict(ours, run.spec, model=WORK_MODEL, calibration=use, registry=reg)
            row[f"trace_{key}_pct"] = (float(np.nansum(p.predicted_ns)) / run.total_ns - 1.0) * 100.0
            row[f"table_{key}_pct"] = cell.error_pct
        out.append(row)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DATA, help="the measured data (neusight-e2e/ in it)")
    parser.add_argument("--tables", type=Path, default=TABLES, help="the recorded tables")
    parser.add_argument("--write", action="store_true",
                        help="record every configuration again first (needs PyTorch and transformers)")


def run(args: argparse.Namespace) -> int:
    """Print each cell and the mean / worst |error| per table and variant."""
    from cascade.fitting import e2e

    if args.write:
        names = sorted({p.name[: -len(".kernels.csv")] for p in (args.data / e2e.WHOLE_DIR).glob("*/*.kernels.csv")})
        for config, table in write(names, args.tables).items():
            print(f"wrote {table_path(config, args.tables)} ({len(table)} rows)")
    rows = cells(args.data, args.tables)
    print("whole models from their work alone vs measured e2e, error %: the table a trace's importer gives "
          "(trace) and NeuSight's (table); uncal: the target's own fit taken out")
    print(f"{'config':<26} {'GPU':<22} {'e2e ms':>9} {'FLOPs':>6} {'bytes':>6} {'trace uncal':>12} "
          f"{'table uncal':>12} {'trace cal':>10} {'table cal':>10}")
    for r in rows:
        print(f"{r['config']:<26} {r['gpu']:<22} {r['measured_ms']:9.1f} {r['flops_ratio']:6.3f} "
              f"{r['bytes_ratio']:6.2f} {r['trace_uncal_pct']:+12.1f} {r['table_uncal_pct']:+12.1f} "
              f"{r['trace_cal_pct']:+10.1f} {r['table_cal_pct']:+10.1f}")
    for key in ("trace_uncal_pct", "table_uncal_pct", "trace_cal_pct", "table_cal_pct"):
        errs = np.abs([r[key] for r in rows])
        train = np.abs([r[key] for r in rows if "-train-" in r["config"]])
        print(f"{key[:-4]:<12} mean {errs.mean():5.1f}  worst {errs.max():5.1f}  training {train.mean():5.1f} "
              f"({len(rows)} cells, {len(train)} training)")
    return 0
