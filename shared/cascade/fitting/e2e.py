"""The end-to-end protocol: whole workloads predicted from one GPU's measured per-operator times
into every other GPU that has a measured total, scored on the total (``cascade validate --e2e``).

Two data sets under ``../shared/data/measured``:

* ``neusight-e2e/<GPU folder>/<model>-<inf|train>-<seq>-<batch>.kernels.csv`` (every operator of
  the whole model as a Cascade kernel table, NeuSight's harness times) with ``<config>.json``
  (``e2e_latency`` ms, the whole model measured end to end): a cell is one model and mode from a
  source GPU into a target GPU; its error is the predicted total (the sum of predicted operator
  times) against the target's measured ``e2e_latency``. Beside it, ``anchored``: the source's
  measured ``e2e_latency`` x predicted / measured operator sum (what a replay of a measured
  timeline does with the time its kernels do not explain), and per op family the predicted
  against the target's own measured operator times, time-weighted.
* ``kernelbench/kernelbench_level1.csv`` (single PyTorch operators, FP32, one column of mean
  times per GPU): a cell is one operator from a source GPU into a target GPU, scored when the
  target's measured time is at least :data:`KERNELBENCH_MIN_MS` (launch and dispatch dominate
  shorter ones), per op family, beside the ratio roofline (source time x roofline ratio, from
  datasheet peaks alone).

Both are harness timings (CUDA events around a PyTorch call): the ``neusight`` and
``kernelbench`` measurement kinds, whose per-call fixed cost is the harness's.

Beside the cross-GPU cells, each data set is also predicted from its work alone (model
:data:`WORK_MODEL`, no source GPU: FLOPs, bytes and shapes on the target, as a table of shapes
without measured times is): each whole model on each GPU that measured it, each operator on each
GPU that timed it (:func:`work_cells`, :func:`work_operator_cells`).

Each cell is scored twice: with the calibration as it is (``calibrated``: a GPU whose per-operator
data the fit saw is in-sample for its own fit, never for these totals) and with the target's own
fit taken out (``target uncalibrated``: :func:`without_gpu`, the situation of a GPU nobody has
measured: its parameters, floors, residual grids and context membership removed, the other
GPUs' fits kept as fitted -- no refit, so the globals still saw the target's rows).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from cascade.calibration import Calibration, Transfer
from cascade.calibration.accuracy import OPERATOR_LOGO_VARIANT, WORK_MODEL
from cascade.engine import convmath
from cascade.engine.models import RooflineConfig, ScaledConfig
from cascade.engine.predict import predict, predict_many
from cascade.engine.workload import Workload, workload_of
from cascade.errors import TraceFormatError, UnknownGPUError
from cascade.gpus.registry import GPURegistry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

#: KernelBench operators are scored where the target's measured time is at least this (ms).
KERNELBENCH_MIN_MS = 0.1
#: KernelBench ``family`` -> the kernel table's ``op`` (what :func:`cascade.opfamilies.family_of`
#: reads): scans and losses are reductions, pooling a memory-bound window op.
KERNELBENCH_OPS: dict[str, str] = {
    "gemm": "matmul", "gemv": "gemv", "conv": "conv", "norm": "norm", "softmax": "softmax",
    "elementwise": "elementwise", "reduce": "reduce", "scan": "reduce", "pool": "elementwise",
    "loss": "reduce",
}
VARIANTS: tuple[str, ...] = ("calibrated", "target uncalibrated")
MODELS: tuple[str, ...] = ("scaled", "roofline")


@dataclass(frozen=True, slots=True)
class WholeRun:
    """One whole workload measured on one GPU."""

    dataset: str
    workload: str
    """``<model>-<inf|train>-<seq>-<batch>``."""
    mode: str
    """``inference`` or ``training``."""
    spec: GPUSpec
    label: str
    table: KernelTable
    total_ns: float
    """The workload's measured end-to-end time on this GPU."""
    path: str


@dataclass(frozen=True, slots=True)
class OperatorSet:
    """KernelBench: one row per operator, a measured time per GPU (NaN where not measured)."""

    names: np.ndarray
    families: np.ndarray
    work: KernelTable
    """The operators' work columns (no durations)."""
    times_ns: dict[str, np.ndarray]
    """Spec id -> measured time per operator."""
    specs: dict[str, GPUSpec]
    _pairs: dict[tuple[str, str, float], PairRows | None] = field(default_factory=dict, compare=False, repr=False)
    """:meth:`pair`'s answers: a fit asks every pair again at each grid point."""

    def pair(self, source: str, target: str, min_ms: float) -> PairRows | None:
        """The operators measured on both GPUs as a table timed on ``source``, its work, and which
        of them are scored (target time at least ``min_ms``); None when none is."""
        key = (source, target, min_ms)
        if key not in self._pairs:
            ts, tt = self.times_ns[source], self.times_ns[target]
            # every operator measured on both is predicted (the harness's fixed time is read from
            # all of them), the long ones scored
            both = np.flatnonzero(np.isfinite(ts) & np.isfinite(tt))
            scored = tt[both] >= min_ms * 1e6
            if not scored.any():
                self._pairs[key] = None
            else:
                table = self.work.take(both)
                table["duration_ns"] = ts[both]
                self._pairs[key] = PairRows(table=table, work=workload_of(table), rows=both, scored=scored)
        return self._pairs[key]


@dataclass(frozen=True, slots=True)
class PairRows:
    """:meth:`OperatorSet.pair`'s answer."""

    table: KernelTable
    work: Workload
    rows: np.ndarray
    """Operator indices measured on both GPUs."""
    scored: np.ndarray
    """Of those, the ones scored."""


class WholeCell(msgspec.Struct, frozen=True, kw_only=True):
    """One whole workload predicted from one GPU into another."""

    dataset: str
    workload: str
    mode: str
    source: str
    target: str
    variant: str
    model: str
    measured_ms: float
    """The target's measured end-to-end time."""
    predicted_ms: float
    """Sum of predicted operator times on the target."""
    error_pct: float
    """(predicted - measured) / measured x 100."""
    anchored_ms: float
    """The source's measured end-to-end time x predicted / measured operator sum."""
    anchored_error_pct: float
    families: dict[str, list[float]] = {}
    """Op family -> [predicted ms, the target's measured operator ms]."""


class OperatorCell(msgspec.Struct, frozen=True, kw_only=True):
    """Single operators of one family predicted from one GPU into another."""

    dataset: str
    family: str
    source: str
    target: str
    variant: str
    model: str
    count: int
    mape: float


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """Mean and worst absolute error of a group of cells."""

    dataset: str
    variant: str
    model: str
    group: str
    """``all``, a target spec id, an op family, or a mode."""
    cells: int
    mean_pct: float
    worst_pct: float


def _spec(reg: GPURegistry, label: str, path: Path) -> GPUSpec:
    try:
        return reg.get(label)
    except UnknownGPUError as exc:
        raise UnknownGPUError(label, exc.known, suggestions=exc.suggestions,
                              hint=f"named by {path}; add a spec with --specs DIR") from None


def load_neusight_e2e(root: str | Path, reg: GPURegistry) -> list[WholeRun]:
    """Every ``<GPU folder>/<config>.kernels.csv`` with its ``<config>.json`` under ``root``
    (folder names are device names with ``_`` for spaces)."""
    from cascade.tableio import read_table

    base = Path(root)
    runs: list[WholeRun] = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        label = folder.name.replace("_", " ")
        spec = _spec(reg, label, folder)
        for path in sorted(folder.glob("*.kernels.csv")):
            meta = path.with_name(path.name[: -len(".kernels.csv")] + ".json")
            if not meta.is_file():
                raise TraceFormatError(str(path), None, f"{meta.name} beside it with the measured e2e_latency")
            try:
                doc = json.loads(meta.read_text())
                total_ms = float(doc["e2e_latency"])
            except (ValueError, KeyError, TypeError) as exc:
                raise TraceFormatError(str(meta), None, "a JSON object with a numeric 'e2e_latency' (ms)",
                                       str(exc)) from None
            workload = path.name[: -len(".kernels.csv")]
            mode = "training" if "-train-" in workload else "inference"
            runs.append(WholeRun(dataset="neusight-e2e", workload=workload, mode=mode, spec=spec, label=label,
                                 table=read_table(path), total_ns=total_ms * 1e6, path=str(path)))
    return runs


def _num(text: str, default: float) -> float:
    try:
        return float(text)
    except ValueError:
        return default


def load_kernelbench(path: str | Path, reg: GPURegistry) -> OperatorSet:
    """``kernelbench_level1.csv``: one row per problem, a column of mean ms per GPU (``<GPU>``;
    ``<GPU>__std`` beside it), work columns ``family,dtype,batch,m,n,k,flops,bytes``."""
    p = Path(path)
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        rows = list(reader)
    need = {"problem", "family", "flops", "bytes"}
    if not need <= set(header):
        raise TraceFormatError(str(p), 1, f"the columns {sorted(need)}", ",".join(header))
    gpus = [h for h in header if h not in {"problem", "family", "dtype", "batch", "m", "n", "k", "flops", "bytes",
                                           "aten_ops"} and not h.endswith("__std")]
    specs = {label: _spec(reg, label, p) for label in gpus}
    cols: dict[str, list[object]] = {c: [] for c in ("name", "op", "dtype", "flops", "bytes", "kernels", "batch", "m", "n",
                                                         "k")}
    for line, r in enumerate(rows, start=2):
        fam = r["family"]
        if fam not in KERNELBENCH_OPS:
            raise TraceFormatError(str(p), line, f"a family among {sorted(KERNELBENCH_OPS)}", fam)
        cols["name"].append(r["problem"])
        cols["op"].append(KERNELBENCH_OPS[fam])
        cols["dtype"].append(r.get("dtype") or "fp32")
        cols["flops"].append(_num(r["flops"], 0.0))
        cols["bytes"].append(_num(r["bytes"], 0.0))
        # the aten operators a call dispatches, allocations aside: one kernel each at least
        # (``bytes`` counts inputs and outputs only, not what a chain of them moves between)
        cols["kernels"].append(max(1, len([a for a in r.get("aten_ops", "").split() if not a.startswith("empty")])))
        for c in ("batch", "m", "n", "k"):
            cols[c].append(_num(r.get(c, ""), -1.0))
    work = KernelTable({k: np.asarray(v) for k, v in cols.items()})
    times = {specs[g].id: np.array([_num(r[g], np.nan) * 1e6 for r in rows]) for g in gpus}
    return OperatorSet(names=np.asarray(cols["name"]), families=np.asarray([r["family"] for r in rows]),
                       work=work, times_ns=times, specs={s.id: s for s in specs.values()})


def without_gpu(cal: Calibration, spec_id: str) -> Calibration:
    """The calibration as if ``spec_id`` had never been measured: its own parameters, fixed
    times, shape-residual grids and context membership removed (no refit)."""
    return msgspec.structs.replace(
        cal,
        specs={k: v for k, v in cal.specs.items() if k != spec_id},
        floors_ns={c: {k: v for k, v in d.items() if k != spec_id} for c, d in cal.floors_ns.items()},
        residuals={c: {k: v for k, v in d.items() if k != spec_id} for c, d in cal.residuals.items()},
        contexts={c: [s for s in ids if s != spec_id] for c, ids in cal.contexts.items()},
        defaults={k: v for k, v in cal.defaults.items() if k != spec_id},
    )


def _config(model: str, measurement: str) -> msgspec.Struct:
    return ScaledConfig(measurement=measurement) if model == "scaled" else RooflineConfig()


def _family_sums(table: KernelTable, values: np.ndarray) -> dict[str, float]:
    ops = table["op"].astype(str) if "op" in table else np.full(len(table), "other")
    return {str(f): float(np.nansum(values[ops == f])) for f in np.unique(ops)}


def whole_cells(runs: Sequence[WholeRun], cal: Calibration, reg: GPURegistry, *,
                variants: Iterable[str] = VARIANTS, models: Iterable[str] = MODELS,
                measurement: str = "neusight") -> list[WholeCell]:
    """Every (workload, source, target) of ``runs`` measured on both GPUs, per variant and model."""
    by: dict[str, list[WholeRun]] = {}
    for r in runs:
        by.setdefault(r.workload, []).append(r)
    out: list[WholeCell] = []
    for variant in variants:
        for model in models:
            for workload, group in sorted(by.items()):
                for src in group:
                    measured_src = float(np.nansum(src.table["duration_ns"]))
                    for tgt in group:
                        if tgt.spec.id == src.spec.id:
                            continue
                        use = without_gpu(cal, tgt.spec.id) if variant == "target uncalibrated" else cal
                        p = predict(src.table, tgt.spec, source=src.spec, model=model, calibration=use,
                                    config=_config(model, measurement), registry=reg)
                        total = float(np.nansum(p.predicted_ns))
                        anchored = src.total_ns * total / measured_src if measured_src > 0 else float("nan")
                        fam_pred = _family_sums(src.table, p.predicted_ns)
                        same_rows = len(tgt.table) == len(src.table)
                        fam_meas = _family_sums(tgt.table, tgt.table["duration_ns"]) if same_rows else {}
                        out.append(WholeCell(
                            dataset=src.dataset, workload=workload, mode=src.mode, source=src.spec.id,
                            target=tgt.spec.id, variant=variant, model=model, measured_ms=tgt.total_ns / 1e6,
                            predicted_ms=total / 1e6, error_pct=(total / tgt.total_ns - 1.0) * 100.0,
                            anchored_ms=anchored / 1e6, anchored_error_pct=(anchored / tgt.total_ns - 1.0) * 100.0,
                            families={f: [v / 1e6, fam_meas.get(f, float("nan")) / 1e6] for f, v in fam_pred.items()}))
    return out


def operator_cells(ops: OperatorSet, cal: Calibration, reg: GPURegistry, *,
                   variants: Iterable[str] = VARIANTS, models: Iterable[str] = MODELS,
                   measurement: str = "kernelbench", min_ms: float = KERNELBENCH_MIN_MS) -> list[OperatorCell]:
    """Every (source, target) pair of GPUs with common operators, per family, variant and model:
    MAPE over the operators whose measured target time is at least ``min_ms``."""
    out: list[OperatorCell] = []
    ids = sorted(ops.times_ns)
    for variant in variants:
        for model in models:
            for s in ids:
                for t in ids:
                    if s == t:
                        continue
                    rows = ops.pair(s, t, min_ms)
                    if rows is None:
                        continue
                    use = without_gpu(cal, t) if variant == "target uncalibrated" else cal
                    p = predict_many(rows.table, [ops.specs[t]], source=ops.specs[s], model=model, calibration=use,
                                     config=_config(model, measurement), registry=reg, workload=rows.work)[0]
                    scored = rows.scored
                    idx = rows.rows[scored]
                    err = np.abs(p.predicted_ns[scored] / ops.times_ns[t][idx] - 1.0) * 100.0
                    fams = ops.families[idx]
                    for fam in [*sorted(set(fams.tolist())), "all"]:
                        sel = np.ones(len(idx), dtype=bool) if fam == "all" else fams == fam
                        out.append(OperatorCell(dataset="kernelbench", family=str(fam), source=s, target=t,
                                                variant=variant, model=model, count=int(sel.sum()),
                                                mape=float(err[sel].mean())))
    return out


def work_cells(runs: Sequence[WholeRun], cal: Calibration, reg: GPURegistry, *,
               variants: Iterable[str] = VARIANTS) -> list[WholeCell]:
    """Every whole workload predicted from its work alone (no measured time, model
    :data:`WORK_MODEL` with its defaults, as ``cascade predict`` runs a table of shapes) on each
    GPU that measured it end to end, per variant: no source, no anchored figure."""
    out: list[WholeCell] = []
    for variant in variants:
        for r in sorted(runs, key=lambda r: (r.workload, r.spec.id)):
            use = without_gpu(cal, r.spec.id) if variant == "target uncalibrated" else cal
            p = predict(r.table.without_times(), r.spec, model=WORK_MODEL, calibration=use, registry=reg)
            total = float(np.nansum(p.predicted_ns))
            fam_pred = _family_sums(r.table, p.predicted_ns)
            fam_meas = _family_sums(r.table, r.table["duration_ns"])
            out.append(WholeCell(
                dataset=r.dataset, workload=r.workload, mode=r.mode, source="", target=r.spec.id, variant=variant,
                model=WORK_MODEL, measured_ms=r.total_ns / 1e6, predicted_ms=total / 1e6,
                error_pct=(total / r.total_ns - 1.0) * 100.0, anchored_ms=float("nan"),
                anchored_error_pct=float("nan"),
                families={f: [v / 1e6, fam_meas.get(f, float("nan")) / 1e6] for f, v in fam_pred.items()}))
    return out


def work_operator_cells(ops: OperatorSet, cal: Calibration, reg: GPURegistry, *,
                        variants: Iterable[str] = VARIANTS, min_ms: float = KERNELBENCH_MIN_MS) -> list[OperatorCell]:
    """Every operator predicted from its work alone on each GPU that timed it, per family and
    variant: MAPE over those of at least ``min_ms`` (one cell per GPU, no source)."""
    out: list[OperatorCell] = []
    for variant in variants:
        for t in sorted(ops.times_ns):
            tt = ops.times_ns[t]
            idx = np.flatnonzero(np.isfinite(tt) & (tt >= min_ms * 1e6))
            if len(idx) == 0:
                continue
            use = without_gpu(cal, t) if variant == "target uncalibrated" else cal
            p = predict(ops.work.take(idx), ops.specs[t], model=WORK_MODEL, calibration=use, registry=reg)
            err = np.abs(p.predicted_ns / tt[idx] - 1.0) * 100.0
            fams = ops.families[idx]
            for fam in [*sorted(set(fams.tolist())), "all"]:
                sel = np.ones(len(idx), dtype=bool) if fam == "all" else fams == fam
                out.append(OperatorCell(dataset="kernelbench", family=str(fam), source="", target=t,
                                        variant=variant, model=WORK_MODEL, count=int(sel.sum()),
                                        mape=float(err[sel].mean())))
    return out


def _summary(dataset: str, variant: str, model: str, group: str, errs: Sequence[float]) -> Summary:
    a = np.abs(np.asarray(errs, dtype=float))
    return Summary(dataset=dataset, variant=variant, model=model, group=group, cells=len(a),
                   mean_pct=round(float(a.mean()), 2), worst_pct=round(float(a.max()), 2))


def summarize(whole: Sequence[WholeCell], operators: Sequence[OperatorCell], *,
              anchored: bool = False) -> list[Summary]:
    """Per data set, variant and model: ``all``, per target GPU and per mode (whole workloads;
    the total's error, or the anchored one), and per family and target (operators: the mean of
    the pairs' MAPEs, each pair weighing the same)."""
    out: list[Summary] = []
    keys = sorted({(c.dataset, c.variant, c.model) for c in whole})
    for ds, var, model in keys:
        cells = [c for c in whole if (c.dataset, c.variant, c.model) == (ds, var, model)]
        err = [c.anchored_error_pct if anchored else c.error_pct for c in cells]
        out.append(_summary(ds, var, model, "all", err))
        for group in sorted({c.target for c in cells}) + sorted({c.mode for c in cells}):
            sel = [e for c, e in zip(cells, err, strict=True) if group in (c.target, c.mode)]
            out.append(_summary(ds, var, model, group, sel))
    keys = sorted({(c.dataset, c.variant, c.model) for c in operators})
    for ds, var, model in keys:
        ops = [c for c in operators if (c.dataset, c.variant, c.model) == (ds, var, model)]
        targets = {c.target for c in ops}
        for group in ["all", *sorted({c.family for c in ops} - {"all"}), *sorted(targets)]:
            if group in targets:
                sel = [c.mape for c in ops if c.target == group and c.family == "all"]
            else:
                sel = [c.mape for c in ops if c.family == group]
            if sel:
                out.append(_summary(ds, var, model, group, sel))
    return out


def family_errors(cells: Sequence[WholeCell]) -> dict[str, float]:
    """Per op family, the time-weighted error of the family's predicted time against the target's
    own measured operator times, over ``cells``: sum |pred - meas| / sum meas, %."""
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for c in cells:
        for fam, (pred, meas) in c.families.items():
            if np.isfinite(meas) and meas > 0:
                num[fam] = num.get(fam, 0.0) + abs(pred - meas)
                den[fam] = den.get(fam, 0.0) + meas
    return {f: round(100.0 * num[f] / den[f], 2) for f in sorted(num) if den[f] > 0}


def metrics_rows(summaries: Sequence[Summary]) -> list[dict[str, object]]:
    """The summaries as the plain rows :attr:`Calibration.metrics` keeps (``end_to_end``)."""
    return [msgspec.to_builtins(s) for s in summaries]


#: Exponents :func:`fit_transfer` tries (0: the target model alone; 1: the source's whole deviation).
TRANSFER_GRID: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
#: FP32 FLOPs per byte :func:`fit_transfer` tries for each window kernel kind
#: (:attr:`Calibration.window_simt`; 0: no window roof).
WINDOW_GRID: tuple[float, ...] = (0.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0)
#: The measurement context KernelBench's harness times belong to.
KERNELBENCH_CONTEXT = "kernelbench"
#: The variant of the operator protocol whose transfer was fitted without the target.
LOGO_VARIANT = OPERATOR_LOGO_VARIANT


class KernelBenchFit(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`fit_transfer` fits on KernelBench: the context's transfer exponents and the
    window kernels' CUDA-core work per byte (a kernel property, so every context's)."""

    transfer: Transfer
    window_simt: dict[str, float] = {}


def with_transfer(cal: Calibration, context: str, tr: Transfer) -> Calibration:
    """``cal`` with ``tr`` as the transfer exponents of measurement ``context``."""
    return msgspec.structs.replace(cal, transfer={**cal.transfer, context: tr})


def with_fit(cal: Calibration, fit: KernelBenchFit, context: str = KERNELBENCH_CONTEXT) -> Calibration:
    """``cal`` with ``fit``'s exponents for ``context`` and its window kernels' work per byte."""
    return msgspec.structs.replace(with_transfer(cal, context, fit.transfer), window_simt=dict(fit.window_simt))


def _operator_mape(ops: OperatorSet, cal: Calibration, reg: GPURegistry, leave_out: str | None) -> float:
    cells = operator_cells(ops, cal, reg, variants=("target uncalibrated",), models=("scaled",))
    errs = [c.mape for c in cells if c.family == "all" and leave_out not in (c.source, c.target)]
    return float(np.mean(errs)) if errs else float("nan")


def fit_transfer(ops: OperatorSet, cal: Calibration, reg: GPURegistry, *,
                 leave_out: str | None = None, context: str = KERNELBENCH_CONTEXT) -> KernelBenchFit:
    """The transfer exponents of ``context`` (GEMMs, convolutions, every other kernel) and the
    window kernels' FP32 FLOPs per byte (:data:`cascade.engine.convmath.WINDOW_KINDS`) that make the
    operator protocol's mean error into uncalibrated targets least: coordinate descent over
    :data:`TRANSFER_GRID` and :data:`WINDOW_GRID`, two passes, from what ``cal`` has. ``leave_out``:
    fitted on the pairs between the other GPUs only (leave one GPU out)."""
    start = cal.transfer_for(context)
    cur = {"gemm": start.gemm, "other": start.other, "conv": start.other if start.conv is None else start.conv}
    cur.update({f"window:{k}": float(cal.window_simt.get(k, 0.0)) for k in convmath.WINDOW_KINDS})

    def make(values: dict[str, float]) -> KernelBenchFit:
        tr = Transfer(gemm=values["gemm"], gemm_memory=values["gemm"], other=values["other"], conv=values["conv"])
        return KernelBenchFit(transfer=tr, window_simt={k: values[f"window:{k}"] for k in convmath.WINDOW_KINDS
                                                        if values[f"window:{k}"] > 0})

    for _ in range(2):
        for key in list(cur):
            grid = WINDOW_GRID if key.startswith("window:") else TRANSFER_GRID
            scores = {v: _operator_mape(ops, with_fit(cal, make({**cur, key: v}), context), reg, leave_out)
                      for v in grid}
            cur[key] = min(scores, key=lambda v: (scores[v], abs(v - cur[key])))
    return make(cur)


def transfer_logo(ops: OperatorSet, cal: Calibration, reg: GPURegistry, *,
                  context: str = KERNELBENCH_CONTEXT) -> tuple[list[OperatorCell], dict[str, KernelBenchFit]]:
    """Leave one GPU out: for every GPU, the exponents and window work fitted without it
    (:func:`fit_transfer`) and the operator cells into it under them (variant
    :data:`LOGO_VARIANT`): the honest figure for a GPU the fit never saw."""
    out: list[OperatorCell] = []
    fitted: dict[str, KernelBenchFit] = {}
    for gpu in sorted(ops.times_ns):
        fit = fit_transfer(ops, cal, reg, leave_out=gpu, context=context)
        fitted[gpu] = fit
        cells = operator_cells(ops, with_fit(cal, fit, context), reg, variants=("target uncalibrated",),
                               models=("scaled",))
        out += [msgspec.structs.replace(c, variant=LOGO_VARIANT) for c in cells if c.target == gpu]
    return out, fitted


@dataclass(frozen=True, slots=True)
class EndToEnd:
    """One run of the end-to-end protocol over a data directory (:func:`end_to_end`)."""

    calibration: Calibration
    """The calibration the cells were scored with (the KernelBench fit applied, where made)."""
    fitted: KernelBenchFit | None
    """The KernelBench fit on every pair (None: not asked for)."""
    left_out: dict[str, KernelBenchFit]
    """GPU -> the fit made without it (empty: no leave-one-GPU-out)."""
    whole: list[WholeCell]
    operators: list[OperatorCell]
    """Every operator cell, the left-out variant's among them."""
    summary: list[Summary]
    anchored: list[Summary]

    def record(self, target: Calibration) -> Calibration:
        """``target`` with this run's KernelBench fit (where made) and its summaries as the
        ``end_to_end`` / ``end_to_end_anchored`` metrics, the figures whole traces quote."""
        out = with_fit(target, self.fitted) if self.fitted is not None else target
        metrics = {**out.metrics, "end_to_end": metrics_rows(self.summary),
                   "end_to_end_anchored": metrics_rows(self.anchored)}
        return msgspec.structs.replace(out, metrics=metrics)


#: Where :func:`end_to_end` finds its two data sets under a data directory.
WHOLE_DIR = "neusight-e2e"
KERNELBENCH_FILE = Path("kernelbench") / "kernelbench_level1.csv"


def has_data(root: str | Path) -> bool:
    """Whether ``root`` holds either data set of the end-to-end protocol."""
    return (Path(root) / WHOLE_DIR).is_dir() or (Path(root) / KERNELBENCH_FILE).is_file()


def end_to_end(root: str | Path, cal: Calibration, reg: GPURegistry, *, fit: bool = False,
               leave_one_gpu_out: bool = True) -> EndToEnd:
    """The end-to-end protocol over ``root`` (``neusight-e2e/`` and ``kernelbench/``, either may be
    missing): with ``fit``, first the KernelBench transfer exponents and window work
    (:func:`fit_transfer`; with ``leave_one_gpu_out`` also each GPU's fit without it and the cells
    into it, :func:`transfer_logo`), then every whole-model and operator cell, summarised."""
    from cascade.errors import ValidationError

    base = Path(root)
    whole_dir, ops_file = base / WHOLE_DIR, base / KERNELBENCH_FILE
    if not has_data(base):
        raise ValidationError(f"{base}: neither {WHOLE_DIR}/ nor {KERNELBENCH_FILE} is there "
                              "(point --data at ../shared/data/measured)", field="data")
    runs = load_neusight_e2e(whole_dir, reg) if whole_dir.is_dir() else []
    ops = load_kernelbench(ops_file, reg) if ops_file.is_file() else None
    fitted: KernelBenchFit | None = None
    logo: list[OperatorCell] = []
    per_gpu: dict[str, KernelBenchFit] = {}
    if fit:
        if ops is None:
            raise ValidationError(f"{ops_file}: the transfer is fitted on KernelBench, which is not there",
                                  field="data")
        fitted = fit_transfer(ops, cal, reg)
        if leave_one_gpu_out:
            logo, per_gpu = transfer_logo(ops, cal, reg)
        cal = with_fit(cal, fitted)
    whole = whole_cells(runs, cal, reg) + work_cells(runs, cal, reg)
    operators = (operator_cells(ops, cal, reg) + work_operator_cells(ops, cal, reg) if ops is not None else []) + logo
    scaled_from_source = [c for c in whole if c.model != WORK_MODEL]  # (a work cell has no source to anchor to)
    return EndToEnd(calibration=cal, fitted=fitted, left_out=per_gpu, whole=whole, operators=operators,
                    summary=summarize(whole, operators), anchored=summarize(scaled_from_source, [], anchored=True))
