"""Layer-level accuracy: the per-layer sum of operator times, predicted vs measured.

A Vidur MLP profile row is one transformer layer of one model at one token count and
tensor-parallel degree; its operators (QKV and output projections, MLP up / down
projections, activation, both norms, rotary embedding, residual add) are the GPU time of
that layer outside attention. The token embedding runs once per model, not per layer, and
is left out of the sum. :func:`layer_rows` scores, per GPU pair, the error of the sum of
the predicted operator times against the sum of the measured ones, for layers whose every
operator is selected (e.g. a whole TP degree left out of the fit); this is the level a user
reads (a step time is layers x this sum plus attention and the rest).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cascade.calibration import Calibration
from cascade.fitting.measured import Pair
from cascade.fitting.validation import ape, pair_predictions
from cascade.gpus.registry import GPURegistry

#: Per-model operators, not summed into a layer.
NOT_PER_LAYER = ("emb",)


def layer_ids(pair: Pair) -> tuple[np.ndarray, np.ndarray]:
    """(layer key of each row: its shape key without the operator, whether the row counts)."""
    keys = np.asarray([str(k).rsplit(",", 1)[0] for k in pair.keys], dtype=object)
    ops = np.asarray([str(k).rsplit(",", 1)[-1] for k in pair.keys], dtype=object)
    return keys, ~np.isin(ops, NOT_PER_LAYER)


def layer_rows(pairs: Sequence[Pair], cal: Calibration, models: Sequence[str] = ("roofline", "scaled"), *,
               reg: GPURegistry | None = None, select: dict[tuple[str, str, str], np.ndarray] | None = None,
               left_out: str = "") -> list[dict[str, object]]:
    """Per (Vidur pair, model): count of layers and MAPE / median / p90 of the layer sums,
    family ``layer``; only layers all of whose per-layer operators are selected."""
    out: list[dict[str, object]] = []
    for pair in pairs:
        if pair.source.kind != "vidur":
            continue
        mask = np.ones(len(pair.keys), dtype=bool)
        if select is not None:
            mask = select.get((pair.source.dataset, pair.source.spec.id, pair.target.spec.id), mask)
        layer, counts = layer_ids(pair)
        rows = counts & mask
        if not rows.any():
            continue
        complete = {k for k in set(layer[counts].tolist())
                    if np.all(mask[(layer == k) & counts])}
        use = rows & np.isin(layer, list(complete))
        if not use.any():
            continue
        uniq, inv = np.unique(layer[use], return_inverse=True)
        measured = np.bincount(inv, weights=pair.target_ns[use], minlength=len(uniq))
        for model in models:
            pred = pair_predictions(pair, model, cal, reg)[use]
            errs = ape(np.bincount(inv, weights=pred, minlength=len(uniq)), measured)
            row: dict[str, object] = {
                "kind": "vidur", "dataset": pair.source.dataset, "family": "layer",
                "source": pair.source.spec.id, "target": pair.target.spec.id, "model": model,
                "count": len(errs), "mape": round(float(np.mean(errs)), 2),
                "median_ape": round(float(np.median(errs)), 2), "p90_ape": round(float(np.percentile(errs, 90)), 2)}
            if left_out:
                row["left_out"] = left_out
            out.append(row)
    return out
