"""Markdown accuracy tables from a calibration's recorded metrics.

``python -m cascade.fitting.report [CALIBRATION.json]`` prints, for the held-out
shapes and for every leave-one-GPU-out refit, per (dataset, family, GPU pair) the
count, MAPE, median and p90 absolute percentage error of each model; these are
the tables of ``ACCURACY.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from cascade.calibration import Calibration, load_calibration


def _short(spec_id: str) -> str:
    return spec_id.replace("_PCIE_40GB", "-PCIe").replace("_PCIE_32GB", "-PCIe")


def markdown_table(rows: Iterable[Mapping[str, Any]], families: tuple[str, ...] = ("all", "linear", "bmm")) -> str:
    """One row per (dataset, family, pair) with every model's count / MAPE / median / p90."""
    grouped: dict[tuple[str, str, str, str, str], dict[str, Mapping[str, Any]]] = {}
    models: list[str] = []
    for r in rows:
        fam = str(r["family"])
        if r["kind"] == "neusight" and fam not in families:
            continue
        key = (str(r["dataset"]), fam, str(r["source"]), str(r["target"]), str(r.get("left_out", "")))
        grouped.setdefault(key, {})[str(r["model"])] = r
        if r["model"] not in models:
            models.append(str(r["model"]))
    head = "| data | family | source -> target | left out | n | " + " | ".join(
        f"{m} MAPE / med / p90" for m in models) + " |"
    lines = [head, "|" + "---|" * (5 + len(models))]
    for (ds, fam, src, tgt, out), by_model in grouped.items():
        n = next(iter(by_model.values()))["count"]
        cells = [f"{by_model[m]['mape']:.1f} / {by_model[m]['median_ape']:.1f} / {by_model[m]['p90_ape']:.1f}"
                 if m in by_model else "-" for m in models]
        lines.append(f"| {ds} | {fam} | {_short(src)} -> {_short(tgt)} | {_short(out) or '-'} | {n} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def shift_summary(rows: Iterable[Mapping[str, Any]]) -> str:
    """Per GPU pair: each shift protocol's count-weighted MAPE over its regions and data sets
    (:func:`cascade.fitting.shift.pooled`) and their mean (the figure a prediction
    quotes), ``roofline``'s mean beside."""
    from cascade.fitting.shift import pooled

    rows = [dict(r) for r in rows]
    scaled, roof = pooled(rows, "scaled"), pooled(rows, "roofline")
    shifts = sorted({k[0] for k in scaled})
    pairs_ = sorted({(k[1], k[2]) for k in scaled})
    lines = ["| source -> target | " + " | ".join(f"{s}" for s in shifts) + " | scaled mean | roofline mean |",
             "|---|" + "---|" * (len(shifts) + 2)]
    for src, tgt in pairs_:
        vals = [scaled.get((s, src, tgt)) for s in shifts]
        rvals = [v for v in (roof.get((s, src, tgt)) for s in shifts) if v is not None]
        got = [v for v in vals if v is not None]
        lines.append(f"| {_short(src)} -> {_short(tgt)} | "
                     + " | ".join("-" if v is None else f"{v:.1f}" for v in vals)
                     + f" | {sum(got) / len(got):.1f} | "
                     + (f"{sum(rvals) / len(rvals):.1f}" if rvals else "-") + " |")
    return "\n".join(lines)


def render(cal: Calibration) -> str:
    """Every metrics section of a calibration as markdown."""
    out = [f"calibration `{cal.id}` {cal.version} (digest {cal.digest()}), command: `{cal.command}`", ""]
    for section, rows in cal.metrics.items():
        out += [f"### {section}", "", markdown_table(rows), ""]  # type: ignore[arg-type]
        if section == "shifted_shapes":
            out += ["per protocol (count-weighted over its regions and data sets) and their mean:", "",
                    shift_summary(rows), ""]  # type: ignore[arg-type]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the tables of the packaged (or a given) calibration."""
    args = sys.argv[1:] if argv is None else argv
    cal = load_calibration(args[0]) if args else load_calibration()
    sys.stdout.write(render(cal) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
