"""How accurate a prediction is expected to be, from the accuracy a calibration measured.

``cascade calibrate`` stores, with the fitted parameters, the errors it measured on data it
did not fit (``Calibration.metrics``): held-out shapes per GPU pair, and leave-one-GPU-out
(LOGO) cells where one GPU had no calibration at all. :func:`expected_accuracy` picks the
figure that matches a prediction's situation, and says which one it picked:

1. target == source: the measured durations are kept (``scaled``), nothing to estimate;
2. both GPUs calibrated in the measurement context: the pair's MAPE on the *shifted-shape*
   protocol (:mod:`cascade.fitting.shift`: whole regions of the shape space never
   fitted; the mean over the protocols of each one's count-weighted MAPE over its regions
   and data sets), else, for a calibration without
   those rows, its random-split held-out MAPE;
3. the target calibrated, the source not: the LOGO cells *from* an uncalibrated GPU;
4. the target not calibrated but a *same-compute sibling* is (:mod:`cascade.calibration.family`:
   H200 <- H100, A100 PCIe <- A100 SXM): the source -> sibling figure of case 2, or, from the
   sibling itself, the memory-bound operators' cross-GPU figure (a bandwidth transfer), and
   the basis says so;
4b. otherwise the target not calibrated: the LOGO cells *into* an uncalibrated GPU (naming
   the closest calibrated sibling and what differs);
5. a context without such cells (Vidur's two GPUs allow no LOGO) borrows another context's,
   and the basis says so; with no measurement at all the estimate is ``None``.

Which kernels a prediction extrapolates to is per kernel: see
:func:`cascade.engine.extrapolation.extrapolation_flags`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from cascade.calibration import Calibration, measurement_context, measurement_of
from cascade.calibration.calibration import PerCalibration
from cascade.calibration.family import sibling
from cascade.gpus.spec import GPUSpec


class AccuracyEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """The measured error that best matches a prediction's situation."""

    mape_pct: float | None = None
    """Expected mean absolute percentage error of kernel times (None: nothing measured)."""
    worst_pct: float | None = None
    """Worst cell (GPU pair x data set) behind ``mape_pct``."""
    cells: int = 0
    """Scored cells behind the figure."""
    basis: str = ""
    """Which measurement the figure is (data, protocol, GPUs)."""
    target_calibrated: bool = False
    source_calibrated: bool = False
    sibling: str | None = None
    """The calibrated GPU an uncalibrated target borrows from (:mod:`cascade.calibration.family`)."""
    total_pct: float | None = None
    """Expected absolute error of the whole trace's total (the end-to-end protocol's figure for
    this situation, widened by the share of time in kernels of regimes no data set covers);
    None: not measured."""
    total_worst_pct: float | None = None
    """Worst whole-workload cell behind ``total_pct``."""
    total_basis: str = ""
    """Which measurement ``total_pct`` is (data set, variant, cells) and what widened it."""


def calibrated_in(cal: Calibration, spec_id: str, measurement: str | None) -> bool:
    """Whether the calibration fitted ``spec_id`` on data of the measurement's context; for
    a context it has no data of (``device``: an instruction trace's own timing), whether it
    fitted the GPU at all (its fit is what :meth:`Calibration.params_for` then uses)."""
    context = measurement_context(measurement) or "kernel"
    if context in cal.contexts:
        return spec_id in cal.contexts[context]
    return spec_id in cal.specs


def _rows(cal: Calibration, table: str, model: str) -> list[Mapping[str, object]]:
    rows = cal.metrics.get(table, [])
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, Mapping) and r.get("model") == model and r.get("mape") is not None]


def _cells(rows: Iterable[Mapping[str, object]]) -> list[Mapping[str, object]]:
    """One row per (pair, data set, left-out GPU): a data set's ``all`` row where it has one,
    else its per-family rows."""
    rows = list(rows)
    with_all = {(r.get("source"), r.get("target"), r.get("dataset"), r.get("left_out"))
                for r in rows if r.get("family") == "all"}
    return [r for r in rows
            if r.get("family") == "all"
            or (r.get("source"), r.get("target"), r.get("dataset"), r.get("left_out")) not in with_all]


def _pair_cells(cal: Calibration, table: str, model: str, source_id: str | None, target_id: str,
                context: str) -> list[Mapping[str, object]]:
    return [r for r in _cells(_rows(cal, table, model))
            if r.get("source") == source_id and r.get("target") == target_id and _context_of(r) == context]


def _weighted(rows: list[Mapping[str, object]]) -> float:
    counts = [max(int(r.get("count", 1) or 1), 1) for r in rows]  # type: ignore[call-overload]
    return sum(float(r["mape"]) * c for r, c in zip(rows, counts, strict=True)) / sum(counts)  # type: ignore[arg-type]


def _summary(rows: list[Mapping[str, object]], weighted: bool) -> tuple[float, float, int]:
    mapes = [float(r["mape"]) for r in rows]  # type: ignore[arg-type]
    if weighted:
        counts = [max(int(r.get("count", 1) or 1), 1) for r in rows]  # type: ignore[call-overload]
        mean = sum(m * c for m, c in zip(mapes, counts, strict=True)) / sum(counts)
    else:
        mean = sum(mapes) / len(mapes)
    return round(mean, 1), round(max(mapes), 1), len(rows)


def _context_of(row: Mapping[str, object]) -> str:

    kind = measurement_of(str(row.get("kind") or "vidur"), str(row.get("dataset") or ""))
    return measurement_context(kind) or "kernel"


def _specs(extra: Mapping[str, GPUSpec] | None) -> dict[str, GPUSpec]:
    from cascade.gpus import default_registry

    out = {s.id: s for s in default_registry()}
    out.update(extra or {})
    return out


#: Op families whose time is DRAM traffic: the bandwidth-transfer figure.
MEMORY_FAMILIES = ("elementwise", "norm", "embedding")


def _bandwidth_transfer(cal: Calibration, model: str, context: str) -> tuple[float, float, int] | None:
    """Count-weighted MAPE of memory-bound operator families between calibrated GPUs of the
    context, on the shifted-shape protocol (else random-split held-out shapes)."""
    for table in ("shifted_shapes", "heldout_shapes"):
        rows = [r for r in _rows(cal, table, model)
                if r.get("family") in MEMORY_FAMILIES and _context_of(r) == context]
        if rows:
            return _summary(rows, weighted=True)
    return None


#: The end-to-end protocol's data sets: whole models, and single operators (what a kernel of a
#: regime no data set covers is quoted, :func:`widen_total`).
WHOLE_DATASET = "neusight-e2e"
OPERATOR_DATASET = "kernelbench"
#: The operator protocol's variant whose fitted exponents never saw the target (leave one GPU out):
#: the figure quoted for kernels no data set covers.
OPERATOR_LOGO_VARIANT = "target uncalibrated, transfer fitted without it"
#: The model a prediction from the work alone runs (no measured source time; the end-to-end
#: protocol scores it on both data sets, :func:`cascade.fitting.e2e.work_cells`).
WORK_MODEL = "analytical"
#: What the work-alone figures hold for, said beside them.
_WORK_SCOPE = ("kernels predicted from their work (FLOPs, bytes, shapes); not those an instruction trace's "
               "features predicted")


def _e2e_row(cal: Calibration, dataset: str, variant: str, model: str, group: str) -> Mapping[str, object] | None:
    rows = cal.metrics.get("end_to_end")
    if not isinstance(rows, list):
        return None
    for r in rows:
        if (isinstance(r, dict) and r.get("dataset") == dataset and r.get("variant") == variant
                and r.get("model") == model and r.get("group") == group):
            return r
    return None


def whole_accuracy(cal: Calibration, target_id: str, target_calibrated: bool, measurement: str | None,
                   model: str) -> tuple[float, float, str] | None:
    """The end-to-end protocol's figure for a whole trace predicted into ``target_id``
    (``cascade validate --e2e``, stored as ``metrics["end_to_end"]``): the target's own cells
    where it has them, else every target's, for a calibrated target or (``target uncalibrated``)
    one nobody measured. (mean, worst, basis) or None without such metrics."""
    scored = "scaled" if model in ("auto", "scaled") else model
    variant = "calibrated" if target_calibrated else "target uncalibrated"
    row = _e2e_row(cal, WHOLE_DATASET, variant, scored, target_id) or _e2e_row(cal, WHOLE_DATASET, variant,
                                                                               scored, "all")
    if row is None:
        return None
    mean, worst, cells = float(str(row["mean_pct"])), float(str(row["worst_pct"])), int(str(row["cells"]))
    fitted = "calibrated" if target_calibrated else "with its own fit taken out"
    whose = f"into {target_id} ({fitted})" if row.get("group") == target_id else (
        "into calibrated GPUs" if target_calibrated else "into GPUs with their own fit taken out")
    if scored == WORK_MODEL:
        whose = (f"on {target_id} ({fitted})" if row.get("group") == target_id else
                 "on calibrated GPUs" if target_calibrated else "on GPUs with their own fit taken out")
        return mean, worst, (f"end-to-end protocol: {cells} whole-model cells predicted from their work alone "
                             f"(neusight-e2e, inference and training, the sum of predicted operators vs the "
                             f"measured e2e time) {whose}; for {_WORK_SCOPE}")
    kind = measurement_context(measurement) or "kernel"
    borrowed = "" if kind == "neusight" else f"; borrowed for {kind} times (the whole models are FP32 harness times)"
    return mean, worst, (f"end-to-end protocol: {cells} whole-model cells (neusight-e2e, the sum of predicted "
                         f"operators vs the measured e2e time) {whose}{borrowed}")


#: Where :func:`widen_total`'s single-operator figures come from, per scored model.
_OPS_WHERE = {"scaled": "into uncalibrated GPUs", WORK_MODEL: "from their work alone"}


def widen_total(cal: Calibration, est: AccuracyEstimate, share: float, window_share: float = 0.0,
                model: str = "scaled") -> AccuracyEstimate:
    """``est`` with its whole-trace figure widened for ``share`` (0-1) of the predicted time in
    kernels of regimes no data set covers (extrapolated shapes, work inferred from a name, paths
    moved, launch/roofline bounds only): + share x the single-operator figure into GPUs with no
    calibration (KernelBench), never a tight figure for what nothing measured; and for
    ``window_share`` of it in convolution and pooling kernels (which no whole-model data set has):
    + that share x KernelBench's figure for convolutions. ``model``: whose single-operator figures
    (:data:`WORK_MODEL`: KernelBench predicted from the work alone)."""
    if est.total_pct is None or (share <= 0 and window_share <= 0):
        return est
    total = est.total_pct
    parts: list[str] = []
    scored = WORK_MODEL if model == WORK_MODEL else "scaled"
    if share > 0:
        row = (_e2e_row(cal, OPERATOR_DATASET, OPERATOR_LOGO_VARIANT, scored, "all")
               or _e2e_row(cal, OPERATOR_DATASET, "target uncalibrated", scored, "all"))
        op = float(str(row["mean_pct"])) if row is not None else 50.0
        where = (f"the single-operator figure {_OPS_WHERE[scored]} (kernelbench)" if row is not None
                 else "50% (nothing measured)")
        total += share * op
        parts.append(f"{100 * share:.0f}% of the time in kernels no data set covers x {where} ({op:.0f}%)")
    if window_share > 0:
        row = (_e2e_row(cal, OPERATOR_DATASET, OPERATOR_LOGO_VARIANT, scored, "conv")
               or _e2e_row(cal, OPERATOR_DATASET, "target uncalibrated", scored, "conv"))
        conv = float(str(row["mean_pct"])) if row is not None else 50.0
        where = (f"the single-operator figure for convolutions {_OPS_WHERE[scored]} (kernelbench)"
                 if row is not None else "50% (nothing measured)")
        total += window_share * conv
        parts.append(f"{100 * window_share:.0f}% of the time in convolution and pooling kernels x {where} "
                     f"({conv:.0f}%)")
    total = round(total, 1)
    return msgspec.structs.replace(est, total_pct=total, total_worst_pct=max(est.total_worst_pct or 0.0, total),
                                   total_basis=f"{est.total_basis}; widened by " + " and by ".join(parts))


#: :func:`expected_accuracy`'s answers per calibration: a fit reads the same figure thousands of times.
_EXPECTED: PerCalibration[dict[tuple[Any, ...], AccuracyEstimate]] = PerCalibration(lambda _cal: {}, kept=8)


def expected_accuracy(cal: Calibration, source_id: str | None, target_id: str,
                      measurement: str | None = "kernel", model: str = "scaled",
                      specs: Mapping[str, GPUSpec] | None = None) -> AccuracyEstimate:
    """The per-kernel figure of :func:`kernel_accuracy` with the whole-trace figure of
    :func:`whole_accuracy` beside it."""
    if specs:  # custom specs decide an uncalibrated target's sibling: not kept
        return _expected_accuracy(cal, source_id, target_id, measurement, model, specs)
    answers = _EXPECTED(cal)
    key = (source_id, target_id, measurement, model)
    if key not in answers:
        answers[key] = _expected_accuracy(cal, source_id, target_id, measurement, model, None)
    return answers[key]


def _expected_accuracy(cal: Calibration, source_id: str | None, target_id: str, measurement: str | None,
                       model: str, specs: Mapping[str, GPUSpec] | None) -> AccuracyEstimate:
    est = kernel_accuracy(cal, source_id, target_id, measurement, model, specs)
    if source_id and source_id == target_id and est.mape_pct == 0.0:
        return msgspec.structs.replace(est, total_pct=0.0, total_worst_pct=0.0,
                                       total_basis="target is the source GPU: measured durations kept")
    if model != WORK_MODEL and (model not in ("auto", "scaled", "roofline") or not source_id):
        return est
    whole = whole_accuracy(cal, target_id, est.target_calibrated, measurement, model)
    if whole is None:
        return est
    return msgspec.structs.replace(est, total_pct=whole[0], total_worst_pct=whole[1], total_basis=whole[2])


def kernel_accuracy(cal: Calibration, source_id: str | None, target_id: str,
                    measurement: str | None = "kernel", model: str = "scaled",
                    specs: Mapping[str, GPUSpec] | None = None) -> AccuracyEstimate:
    """The calibration's measured error for predicting ``target_id`` from ``source_id``
    (``None``: no measured source times) with ``model`` (``auto`` and ``scaled`` read the
    ``scaled`` figures; ``roofline`` its own; other models have none). ``specs`` adds GPU
    specs (id -> spec) beyond the built-in ones, to find an uncalibrated target's sibling."""
    context = measurement_context(measurement) or "kernel"
    t_cal = calibrated_in(cal, target_id, measurement)
    s_cal = bool(source_id) and calibrated_in(cal, str(source_id), measurement)
    base: dict[str, Any] = {"target_calibrated": t_cal, "source_calibrated": s_cal}
    scored = "scaled" if model in ("auto", "scaled") else model
    if source_id and source_id == target_id and scored == "scaled":
        return AccuracyEstimate(mape_pct=0.0, worst_pct=0.0, basis="target is the source GPU: measured durations kept", **base)
    if scored == WORK_MODEL:
        variant = "calibrated" if t_cal else "target uncalibrated"
        row = (_e2e_row(cal, OPERATOR_DATASET, variant, WORK_MODEL, target_id)
               or _e2e_row(cal, OPERATOR_DATASET, variant, WORK_MODEL, "all"))
        if row is None:
            return AccuracyEstimate(basis=f"no measured accuracy for model {model!r}", **base)
        fitted = "calibrated" if t_cal else "with its own fit taken out"
        on = (f"on {target_id} ({fitted})" if row.get("group") == target_id else
              "on calibrated GPUs" if t_cal else "on GPUs with their own fit taken out")
        return AccuracyEstimate(
            mape_pct=float(str(row["mean_pct"])), worst_pct=float(str(row["worst_pct"])), cells=int(str(row["cells"])),
            basis=(f"end-to-end protocol, single operators predicted from their work alone (kernelbench, FP32, "
                   f">= 0.1 ms) {on}; for {_WORK_SCOPE}"), **base)
    if scored not in ("scaled", "roofline") or (scored == "scaled" and not source_id):
        return AccuracyEstimate(basis=f"no measured accuracy for model {model!r} without source times"
                                if scored == "scaled" else f"no measured accuracy for model {model!r}", **base)

    if t_cal and s_cal:
        shifted = _pair_cells(cal, "shifted_shapes", scored, source_id, target_id, context)
        if shifted:
            # each protocol weighs the same (its regions count-weighted): the octave refits
            # score half the rows, the others a fifth to a third
            kinds = sorted({str(r.get("shift")) for r in shifted})
            per = [_weighted([r for r in shifted if r.get("shift") == k]) for k in kinds]
            mean = round(sum(per) / len(per), 1)
            worst, n = round(max(float(r["mape"]) for r in shifted), 1), len(shifted)  # type: ignore[arg-type]
            kinds = [f"{k} {v:.1f}" for k, v in zip(kinds, per, strict=True)]
            held = _pair_cells(cal, "heldout_shapes", scored, source_id, target_id, context)
            rnd = f"; random-split held-out {_summary(held, weighted=True)[0]:.1f}" if held else ""
            return AccuracyEstimate(mape_pct=mean, worst_pct=worst, cells=n, basis=(
                f"shifted shapes (mean of the protocols {', '.join(kinds)}: regions never fitted), {source_id} -> {target_id} "
                f"({context} data, {n} region cells{rnd})"), **base)
        pair = _pair_cells(cal, "heldout_shapes", scored, source_id, target_id, context)
        if pair:
            mean, worst, n = _summary(pair, weighted=True)
            count = sum(int(r.get("count", 0) or 0) for r in pair)  # type: ignore[call-overload]
            return AccuracyEstimate(mape_pct=mean, worst_pct=worst, cells=n, basis=(
                f"held-out shapes, {source_id} -> {target_id} ({context} data, {count} operators)"), **base)

    sib = None
    if not t_cal:
        known = _specs(specs)
        if target_id in known:
            sib = sibling(cal, known[target_id], measurement, known)
    if sib is not None and sib.same_compute:
        what = (f"{target_id} has no calibration: {sib.id}'s accuracy plus a bandwidth transfer (same SMs and "
                f"clocks; {', '.join(sib.differs) or 'no spec figure differs'}; the transfer's own error is not "
                f"measured here: no two GPUs of one die in one harness in the data)")
        if s_cal and source_id != sib.id:
            got = kernel_accuracy(cal, source_id, sib.id, measurement, model, specs)
            if got.mape_pct is not None:
                return AccuracyEstimate(mape_pct=got.mape_pct, worst_pct=got.worst_pct, cells=got.cells,
                                        basis=f"{what}; {got.basis}", sibling=sib.id, **base)
        if source_id == sib.id:
            bw = _bandwidth_transfer(cal, scored, context)
            if bw is not None:
                return AccuracyEstimate(mape_pct=bw[0], worst_pct=bw[1], cells=bw[2], sibling=sib.id, basis=(
                    f"{what}; the bandwidth transfer alone, as memory-bound operators ({', '.join(MEMORY_FAMILIES)}) "
                    f"transfer between the calibrated GPUs of {context} data: {bw[2]} cells"), **base)
    logo = _cells(_rows(cal, "leave_one_gpu_out", scored))
    if t_cal:
        want, what = [r for r in logo if r.get("left_out") == r.get("source")], "from a GPU with no calibration into a calibrated one"
    else:
        want, what = [r for r in logo if r.get("left_out") == r.get("target")], "into a GPU with no calibration"
    same = [r for r in want if _context_of(r) == context]
    picked = same or want
    if picked:
        mean, worst, n = _summary(picked, weighted=False)
        where = f"{context} data" if same else f"{_context_of(picked[0])} data (no such cells for {context} data)"
        note = ""
        if sib is not None:
            note = (f"; closest calibrated sibling {sib.id}, which differs in "
                    f"{', '.join(sib.differs) or 'no spec figure'}")
        return AccuracyEstimate(mape_pct=mean, worst_pct=worst, cells=n, sibling=sib.id if sib else None, basis=(
            f"leave-one-GPU-out, {what}: mean of {n} cells, {where}{note}"), **base)
    return AccuracyEstimate(basis="the calibration has no accuracy measurement for this case", **base)


def describe(est: AccuracyEstimate) -> str:
    """One line for people: ``expected MAPE 7.9% (worst cell 8.9%; held-out shapes, ...)``,
    then the whole trace's figure where one is measured."""
    if est.mape_pct is None:
        line = est.basis
    elif est.cells > 1 and est.worst_pct is not None:
        line = f"expected MAPE {est.mape_pct:.1f}% (worst cell {est.worst_pct:.1f}%; {est.basis})"
    else:
        line = f"expected MAPE {est.mape_pct:.1f}% ({est.basis})"
    if est.total_pct is not None and est.total_pct > 0:
        worst = f"worst {est.total_worst_pct:.1f}%; " if est.total_worst_pct is not None else ""
        line += f"; whole trace: expected error {est.total_pct:.1f}% ({worst}{est.total_basis})"
    return line
