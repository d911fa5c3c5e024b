"""Markdown accuracy tables from a calibration's recorded metrics.

``python -m cascade.calibration.report [CALIBRATION.json]`` prints, for the held-out
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
    """Per (shift protocol, GPU pair): the count-weighted MAPE over its regions and data sets,
    ``roofline`` beside ``scaled`` (:func:`cascade.calibration.shift.pooled`)."""
    from cascade.calibration.shift import pooled

    rows = [dict(r) for r in rows]
    scaled, roof = pooled(rows, "scaled"), pooled(rows, "roofline")
    lines = ["| shift | source -> target | scaled MAPE | roofline MAPE |", "|---|---|---|---|"]
    for (shift, src, tgt), v in sorted(scaled.items()):
        r = roof.get((shift, src, tgt))
        lines.append(f"| {shift} | {_short(src)} -> {_short(tgt)} | {v:.1f} | "
                     + (f"{r:.1f}" if r is not None else "-") + " |")
    return "\n".join(lines)


def render(cal: Calibration) -> str:
    """Every metrics section of a calibration as markdown."""
    out = [f"calibration `{cal.id}` {cal.version} (digest {cal.digest()}), command: `{cal.command}`", ""]
    for section, rows in cal.metrics.items():
        out += [f"### {section}", "", markdown_table(rows), ""]  # type: ignore[arg-type]
        if section == "shifted_shapes":
            out += ["pooled over regions and data sets:", "", shift_summary(rows), ""]  # type: ignore[arg-type]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the tables of the packaged (or a given) calibration."""
    args = sys.argv[1:] if argv is None else argv
    cal = load_calibration(args[0]) if args else load_calibration()
    sys.stdout.write(render(cal) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
