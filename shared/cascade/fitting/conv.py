"""The convolution campaign (``measured/neusight-conv/``): one FP32 Conv2d per row, timed on several
GPUs with the cuDNN kernels each launched, and the protocol that predicts each GPU from each other
(``cascade validate --data DIR --conv``).

A folder holds one ``<GPU>.csv`` or ``<GPU>.csv.gz`` per GPU in NeuSight's collection format
(``Latency`` ms per call; ``Kernel Name`` the main kernel, ``Kernels`` every kernel of the call
';'-joined; ``Grid``/``Block x/y/z`` the main kernel's launch; the shape in ``B``, ``Input_Channel``,
``Output_Channel``, ``Kernel_Szie`` (sic), ``Input_Size``, ``Stride``, ``Padding``). Each row becomes
a kernel-table row of op ``conv2d``: its implicit GEMM (m, n, k = B H_out W_out, C_out, C_in R S),
FLOPs 2 m n k, FP32, named by its main kernel, so the models see what cuDNN ran.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from cascade.calibration import Calibration, ConvAlgos, ConvSize
from cascade.engine import convalgo, perf
from cascade.engine.models import RooflineConfig, ScaledConfig, fixed_times
from cascade.engine.predict import predict
from cascade.engine.workload import workload_of
from cascade.errors import TraceFormatError, UnknownGPUError, ValidationError
from cascade.gpus.registry import GPURegistry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

#: Measurement kind of the campaign's harness times (NeuSight's harness: CUDA events around one call).
CONV_MEASUREMENT = "neusight-conv"
#: The campaign's folder under a measured-data root (``cascade calibrate --data ROOT`` fits on it).
CONV_FOLDER = "neusight-conv"
#: Shape columns, in key order.
SHAPE_COLUMNS: tuple[str, ...] = ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride",
                                  "Padding")
_NEED: tuple[str, ...] = ("Latency", "Kernel Name", *SHAPE_COLUMNS)
_FP32_BYTES = 4.0
#: Share of a convolution's measured deviation from its algorithm's cost that carries to another
#: GPU (:attr:`cascade.calibration.ConvAlgos.alpha`): 0.5 and 1 were tried on this campaign's
#: leave-one-GPU-out (25.3 / 28.2% mean over targets); 0.5 kept.
CONV_ALPHA = 0.5
#: The protocol's bounds (:func:`pair_bounds`): not predictions, the least error a model that
#: multiplies the source's time by one factor per pair (``bound-scale``), or by one factor per
#: shape cell of :data:`BOUND_CELL_OCTAVES` octaves in m, n and k (``bound-cells``), can reach, the
#: factors fitted on the target's own times.
BOUND_MODELS: tuple[str, ...] = ("bound-scale", "bound-cells")
BOUND_CELL_OCTAVES = 2.0


@dataclass(frozen=True, slots=True)
class ConvSet:
    """One GPU's convolutions."""

    spec: GPUSpec
    label: str
    """Device name as the file names it."""
    path: Path
    keys: np.ndarray
    """Per row: the shape, ``B,C_in,C_out,R,H,stride,pad`` (the same convolution on another GPU)."""
    table: KernelTable
    """Kernel-table rows (``duration_ns`` the measured latency)."""
    kernels: np.ndarray
    """Per row: every kernel of the call, ';'-joined."""
    algorithm: np.ndarray
    """Per row: the :data:`cascade.engine.convalgo.CONV_ALGOS` code the kernels say."""


def _open(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), newline="")
    return path.open(newline="")


def _spec_of(reg: GPURegistry, label: str, path: Path) -> GPUSpec:
    for candidate in (label, label.replace("_", " "), label.replace("_", "-")):
        spec = reg.resolve(candidate)
        if spec is not None:
            return spec
    raise UnknownGPUError(f"{label} (from {path.name})", reg.ids())


def _number(row: dict[str, str], col: str, path: Path, line: int) -> float:
    raw = row.get(col) or ""
    try:
        return float(raw)
    except ValueError:
        raise TraceFormatError(str(path), line, f"a number in column {col!r}", raw) from None


def load_conv_file(path: str | Path, reg: GPURegistry) -> ConvSet:
    """One GPU's CSV (or .csv.gz) of the campaign; the GPU from the ``Device`` column, else the
    file name."""
    p = Path(path)
    with _open(p) as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in _NEED if c not in header]
        if missing:
            raise TraceFormatError(str(p), 1, f"the columns {list(_NEED)}", ",".join(header))
        rows = list(reader)
    if not rows:
        raise TraceFormatError(str(p), 2, "at least one convolution row", "")
    label = rows[0].get("Device") or p.name.split(".")[0]
    spec = _spec_of(reg, label, p)
    n = len(rows)
    shape = np.empty((n, len(SHAPE_COLUMNS)), dtype=np.float64)
    latency = np.empty(n)
    launch = np.full((n, 6), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        line = i + 2
        for j, c in enumerate(SHAPE_COLUMNS):
            shape[i, j] = _number(r, c, p, line)
        latency[i] = _number(r, "Latency", p, line)
        for j, c in enumerate(("Grid x", "Grid y", "Grid z", "Block x", "Block y", "Block z")):
            raw = r.get(c) or ""
            launch[i, j] = int(float(raw)) if raw else -1
    if (shape[:, :5] <= 0).any() or (shape[:, 5] <= 0).any() or (shape[:, 6] < 0).any():
        bad = int(np.flatnonzero((shape[:, :5] <= 0).any(axis=1) | (shape[:, 5] <= 0) | (shape[:, 6] < 0))[0])
        raise TraceFormatError(str(p), bad + 2, "positive B, channels, kernel size, input size and stride",
                               ",".join(str(int(v)) for v in shape[bad]))
    b, cin, cout, r_, h, stride, pad = shape.T
    out = np.floor((h + 2.0 * pad - r_) / stride) + 1.0
    if (out <= 0).any():
        bad = int(np.flatnonzero(out <= 0)[0])
        raise TraceFormatError(str(p), bad + 2, "a kernel that fits the padded input", f"Kernel_Szie {r_[bad]:g}")
    m, nn, k = b * out * out, cout, cin * r_ * r_
    names = np.asarray([r["Kernel Name"] for r in rows], dtype=object)
    kernels = np.asarray([";".join(x for x in (r.get("Kernels") or "").split(";") if x) for r in rows], dtype=object)
    counts = np.asarray([max(1, len([x for x in s.split(";") if x])) for s in kernels.tolist()], dtype=np.int64)
    table = KernelTable({
        "name": names, "op": np.full(n, "conv2d", dtype=object), "dtype": np.full(n, "fp32", dtype=object),
        "flops": 2.0 * m * nn * k,
        "bytes": _FP32_BYTES * (b * cin * h * h + cout * k + m * nn),
        "batch": np.ones(n, dtype=np.int64), "m": m.astype(np.int64), "n": nn.astype(np.int64),
        "k": k.astype(np.int64), "kernels": counts, "duration_ns": latency * 1e6,
        "grid_x": launch[:, 0], "grid_y": launch[:, 1], "grid_z": launch[:, 2],
        "block_x": launch[:, 3], "block_y": launch[:, 4], "block_z": launch[:, 5],
    })
    keys = np.asarray([",".join(str(int(v)) for v in s) for s in shape], dtype=object)
    algo = convalgo.algorithms(np.where(kernels != "", kernels, names))
    return ConvSet(spec=spec, label=label, path=p, keys=keys, table=table, kernels=kernels, algorithm=algo)


def load_conv_folder(root: str | Path, reg: GPURegistry, log: Callable[[str], None] | None = None) -> list[ConvSet]:
    """Every ``*.csv`` / ``*.csv.gz`` of ``root`` (one GPU each; a GPU the registry does not know
    is skipped with a message to ``log``)."""
    base = Path(root)
    if not base.is_dir():
        raise ValidationError(f"{base} is not a folder", field="data")
    out: list[ConvSet] = []
    for path in sorted([*base.glob("*.csv"), *base.glob("*.csv.gz")]):
        try:
            out.append(load_conv_file(path, reg))
        except UnknownGPUError as exc:
            if log is not None:
                log(f"skipped {path.name}: {exc}")
    if len({s.spec.id for s in out}) < 2:
        raise ValidationError(f"{base}: fewer than two GPUs with convolution CSVs", field="data")
    return out


class ConvScore(msgspec.Struct, frozen=True, kw_only=True):
    """MAPE of one (source, target, model) over the convolutions both GPUs timed."""

    source: str
    target: str
    model: str
    n: int
    mape_pct: float
    median_pct: float
    p90_pct: float
    by_algorithm: dict[str, float] = {}
    """MAPE per algorithm the target ran (:data:`cascade.engine.convalgo.CONV_ALGOS`)."""


def conv_config(model: str) -> msgspec.Struct:
    """The model config for the campaign: NeuSight's harness times, TF32 off (as it was run)."""
    if model == "scaled":
        return ScaledConfig(measurement=CONV_MEASUREMENT, cudnn_tf32=False)
    if model == "roofline":
        return RooflineConfig()
    raise ValidationError(f"the convolution protocol scores scaled and roofline, not {model!r}", field="models")


def _common(src: ConvSet, tgt: ConvSet) -> tuple[np.ndarray, np.ndarray]:
    _, si, ti = np.intersect1d(src.keys.astype(str), tgt.keys.astype(str), return_indices=True)
    return si, ti


def evaluate_conv(sets: Sequence[ConvSet], cal: Calibration, reg: GPURegistry,
                  models: Sequence[str] = ("roofline", "scaled"),
                  calibration_for: Callable[[str], Calibration] | None = None,
                  bounds: bool = True) -> list[ConvScore]:
    """Each GPU predicted from each other GPU's measured times over the shapes both timed.
    ``calibration_for``: the calibration to score a target with (a fit with that GPU left out),
    else ``cal``; ``bounds``: :data:`BOUND_MODELS` scored beside (:func:`pair_bounds`)."""
    out: list[ConvScore] = []
    for src in sets:
        for tgt in sets:
            if src.spec.id == tgt.spec.id:
                continue
            si, ti = _common(src, tgt)
            if len(si) == 0:
                continue
            table = src.table.take(si)
            measured = tgt.table["duration_ns"][ti]
            algo = tgt.algorithm[ti]
            use = calibration_for(tgt.spec.id) if calibration_for is not None else cal
            predicted = {m: predict(table, tgt.spec, source=src.spec, model=m, calibration=use,
                                    config=conv_config(m), registry=reg).predicted_ns for m in models}
            if bounds:
                predicted.update(pair_bounds(table, table["duration_ns"], measured))
            for model, pred in predicted.items():
                ape = np.abs(pred / measured - 1.0) * 100.0
                by = {convalgo.CONV_ALGOS[a]: float(np.mean(ape[algo == a])) for a in np.unique(algo).tolist()}
                out.append(ConvScore(source=src.spec.id, target=tgt.spec.id, model=model, n=len(ape),
                                     mape_pct=float(np.mean(ape)), median_pct=float(np.median(ape)),
                                     p90_pct=float(np.percentile(ape, 90)), by_algorithm=by))
    return out


def pair_bounds(table: KernelTable, source_ns: np.ndarray, measured_ns: np.ndarray) -> dict[str, np.ndarray]:
    """Per :data:`BOUND_MODELS` name, the source's times scaled by the factors that fit the
    target's own times best (median log ratio over the pair, or per shape cell): what no
    prediction from the source's time and the shape class alone can beat."""
    r = np.log(measured_ns / source_ns)
    cells = convalgo.shape_cells(table["m"].astype(float), table["n"].astype(float), table["k"].astype(float),
                                 BOUND_CELL_OCTAVES)
    _, inv = np.unique(cells.astype(str), return_inverse=True)
    per_cell = np.bincount(inv, weights=r) / np.bincount(inv)
    return {"bound-scale": source_ns * float(np.exp(np.median(r))), "bound-cells": source_ns * np.exp(per_cell[inv])}


def per_target(scores: Sequence[ConvScore]) -> dict[str, dict[str, float]]:
    """Per target GPU and model, the mean over its sources of the pair MAPE."""
    acc: dict[str, dict[str, list[float]]] = {}
    for s in scores:
        acc.setdefault(s.target, {}).setdefault(s.model, []).append(s.mape_pct)
    return {t: {m: float(np.mean(v)) for m, v in d.items()} for t, d in acc.items()}


def algorithm_counts(sets: Sequence[ConvSet]) -> dict[str, dict[str, int]]:
    """Per GPU, how many of its convolutions ran each algorithm."""
    return {s.spec.id: {convalgo.CONV_ALGOS[a]: int(np.count_nonzero(s.algorithm == a))
                        for a in np.unique(s.algorithm).tolist()} for s in sets}


def conv_markdown(scores: Sequence[ConvScore], sets: Sequence[ConvSet]) -> str:
    """The protocol's tables: per pair, per target (the GPU left out), algorithms per GPU."""
    models = sorted({s.model for s in scores}, key=lambda m: (m in BOUND_MODELS, m != "scaled", m))
    lines = ["### convolutions (neusight-conv): MAPE % per (source -> target)", "",
             "| source -> target | n | " + " | ".join(f"{m} MAPE" for m in models) + " | scaled median | scaled p90 |",
             "|---|---|" + "---|" * (len(models) + 2)]
    by_pair: dict[tuple[str, str], dict[str, ConvScore]] = {}
    for s in scores:
        by_pair.setdefault((s.source, s.target), {})[s.model] = s
    for (src, tgt), d in by_pair.items():
        first = next(iter(d.values()))
        sc = d.get("scaled")
        lines.append(f"| {src} -> {tgt} | {first.n} | " + " | ".join(f"{d[m].mape_pct:.1f}" if m in d else "-"
                                                                      for m in models)
                     + (f" | {sc.median_pct:.1f} | {sc.p90_pct:.1f} |" if sc else " | - | - |"))
    lines += ["", "### per target GPU (mean over its sources of the pair MAPE, %)", "",
              "| target | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    by_target = per_target(scores)
    for t, mapes in by_target.items():
        lines.append(f"| {t} | " + " | ".join(f"{mapes[m]:.1f}" if m in mapes else "-" for m in models) + " |")
    for m in models:
        vals = [mapes[m] for mapes in by_target.values() if m in mapes]
        if vals:
            lines.append(f"\n{m}: mean over targets {np.mean(vals):.1f}%, worst {max(vals):.1f}%")
    if any(m in BOUND_MODELS for m in models):
        lines.append(f"\nbound-scale / bound-cells are not predictions: the source's times scaled by the one factor per pair "
                     f"(per {BOUND_CELL_OCTAVES:g}-octave cell of m, n, k) that fits the target's own times best, "
                     "the least error a prediction from the source's time and the shape class alone can reach")
    lines += ["", "### algorithm cuDNN ran (from the kernel names), per GPU", ""]
    for gpu, counts in algorithm_counts(sets).items():
        lines.append(f"- {gpu}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda x: -x[1])))
    return "\n".join(lines)


def direct_model_ns(s: ConvSet, cal: Calibration, reg: GPURegistry) -> tuple[np.ndarray, float]:
    """(work time of each row's direct implicit GEMM as the model has it on the set's own GPU, the
    harness's fixed time there): the time each algorithm's cost is measured against."""
    t = s.table["duration_ns"]
    w = workload_of(s.table)
    fixed, _ = fixed_times(t, s.spec, s.spec, cal, CONV_MEASUREMENT)
    archs = {g.id: g.arch for g in reg}
    params = cal.params_for(s.spec, archs, CONV_MEASUREMENT)
    tiles = perf.target_tiles(w, s.spec, cal, s.spec)
    return perf.kernel_times(w, s.spec, params, cal, fixed, tiles).work_ns, fixed


#: The size model's choices (:func:`fit_conv_size`), made by leaving each training GPU out in turn:
#: how sharply an unfitted GPU's shape-cell residual leans to the fitted GPUs of the nearest SM
#: count (None: all alike), and how much of the source's deviation carries.
SIZE_SCALES: tuple[float | None, ...] = (0.25, 0.5, 1.0, None)
SIZE_BETAS: tuple[float, ...] = (0.25, 0.5, 0.75)
#: Octaves per shape cell of the size model's residual tables.
SIZE_CELL_OCTAVES = 1.0


@dataclass(frozen=True, slots=True)
class _Sized:
    """One GPU's campaign rows as the size model reads them."""

    gpu: str
    sms: float
    flops: float
    bandwidth: float
    keys: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    nbytes: np.ndarray
    log_ns: np.ndarray
    cells: np.ndarray


def _sized(s: ConvSet) -> _Sized:
    t = s.table
    m, n, k = (t[c].astype(np.float64) for c in ("m", "n", "k"))
    return _Sized(gpu=s.spec.id, sms=float(s.spec.sms), flops=s.spec.peak_flops("fp32", False),
                  bandwidth=s.spec.memory_bandwidth_gbps * 1e9, keys=s.keys.astype(str), m=m, n=n, k=k,
                  nbytes=t["bytes"].astype(np.float64), log_ns=np.log(t["duration_ns"].astype(np.float64)),
                  cells=convalgo.shape_cells(m, n, k, SIZE_CELL_OCTAVES))


def _base(g: _Sized, theta: np.ndarray) -> np.ndarray:
    floor, eff, knee, bw = np.exp(theta)
    return convalgo.size_log_ns(g.m, g.n, g.k, g.nbytes, sms=g.sms, fp32_flops=g.flops, bandwidth=g.bandwidth,
                                floor_ns=floor, eff=eff, knee_flops=knee, bw_eff=bw)


def _size_fit(train: Sequence[_Sized], scale: float | None = None, beta: float = 0.5) -> ConvSize:
    """The size model's four parameters by least squares in log time over every row of ``train``,
    then each GPU's mean log residual per shape cell."""
    from scipy.optimize import least_squares

    def residual(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([_base(g, theta) - g.log_ns for g in train])

    # physics bounds: the floor below the fastest 1% of every training GPU's calls, the
    # efficiencies at most 1
    floor_max = min(float(np.percentile(g.log_ns, 1)) for g in train)
    lower = np.array([np.log(1_000.0), np.log(0.01), np.log(1e3), np.log(0.01)])
    upper = np.array([floor_max, 0.0, np.log(1e13), 0.0])
    theta = least_squares(residual, x0=np.clip(np.log([20_000.0, 0.6, 1e8, 0.7]), lower + 1e-9, upper - 1e-9),
                          bounds=(lower, upper)).x
    cells: dict[str, dict[str, float]] = {}
    for g in train:
        r = g.log_ns - _base(g, theta)
        keys, inv = np.unique(g.cells.astype(str), return_inverse=True)
        cells[g.gpu] = dict(zip(keys.tolist(), (np.bincount(inv, weights=r) / np.bincount(inv)).tolist(), strict=True))
    floor, eff, knee, bw = (float(v) for v in np.exp(theta))
    return ConvSize(floor_ns=floor, eff=eff, knee_flops=knee, bw_eff=bw, width=SIZE_CELL_OCTAVES, cells=cells,
                    sms={g.gpu: int(g.sms) for g in train}, scale=scale, beta=beta, measurement=CONV_MEASUREMENT)


def _log_model(fit: ConvSize, g: _Sized) -> np.ndarray:
    return convalgo.size_model_log_ns(g.m, g.n, g.k, g.nbytes, g.gpu, sms=g.sms, fp32_flops=g.flops,
                                      bandwidth=g.bandwidth, fit=fit)


def _choose(train: Sequence[_Sized]) -> tuple[float | None, float]:
    """(scale, beta) of :data:`SIZE_SCALES` x :data:`SIZE_BETAS` with the least mean MAPE over the
    training GPUs, each predicted from the others by a fit without it."""
    score: dict[tuple[float | None, float], list[float]] = {(sc, b): [] for sc in SIZE_SCALES for b in SIZE_BETAS}
    for held in train:
        rest = [g for g in train if g.gpu != held.gpu]
        base_fit = _size_fit(rest)
        deviation = {g.gpu: g.log_ns - _log_model(base_fit, g) for g in rest}
        common = {g.gpu: np.intersect1d(g.keys, held.keys, return_indices=True)[1:] for g in rest}
        for sc in SIZE_SCALES:
            fit = msgspec.structs.replace(base_fit, scale=sc)
            target = _log_model(fit, held)
            for b in SIZE_BETAS:
                per_source = []
                for g in rest:
                    si, ti = common[g.gpu]
                    pred = target[ti] + b * deviation[g.gpu][si]
                    per_source.append(float(np.mean(np.abs(np.exp(pred - held.log_ns[ti]) - 1.0))))
                score[(sc, b)].append(float(np.mean(per_source)))
    return min(score, key=lambda key: float(np.mean(score[key])))


def fit_conv_size(sets: Sequence[ConvSet], *, leave_out: str | None = None) -> ConvSize | None:
    """The size model (:class:`ConvSize`) on every set but ``leave_out``'s GPU; its scale and beta
    chosen by leaving each of those GPUs out in turn (three or more; else all alike and 0.5).
    None with fewer than two GPUs."""
    train = [_sized(s) for s in sets if s.spec.id != leave_out]
    gpus = len({g.gpu for g in train})
    if gpus < 2:
        return None
    scale, beta = _choose(train) if gpus >= 3 else (None, 0.5)
    return _size_fit(train, scale=scale, beta=beta)


def fit_conv_algos(sets: Sequence[ConvSet], cal: Calibration, reg: GPURegistry, *, leave_out: str | None = None,
                   width: float = 1.0, alpha: float = CONV_ALPHA, size: bool = True, blend: bool = True
                   ) -> ConvAlgos:
    """Fit each algorithm's cost (median over every row that ran it of measured work / the direct
    implicit GEMM's model work on that GPU) and each architecture's expected cost per shape cell,
    on every set but ``leave_out``'s GPU; with ``size`` the size model too (:func:`fit_conv_size`)
    and, with ``blend`` and three GPUs or more, its share in the blend with the engine's prediction
    (:func:`_choose_blend`)."""
    logs: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    cells: list[np.ndarray] = []
    archs: list[np.ndarray] = []
    gpus: list[str] = []
    for s in sets:
        if s.spec.id == leave_out:
            continue
        model, fixed = direct_model_ns(s, cal, reg)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.log(np.maximum(s.table["duration_ns"] - fixed, 1.0) / model)
        ok = np.isfinite(r)
        logs.append(r[ok])
        codes.append(s.algorithm[ok])
        cells.append(convalgo.shape_cells(s.table["m"][ok].astype(float), s.table["n"][ok].astype(float),
                                          s.table["k"][ok].astype(float), width))
        archs.append(np.full(int(ok.sum()), s.spec.arch, dtype=object))
        gpus.append(s.spec.id)
    if not logs:
        raise ValidationError("no convolution set left to fit on", field="data")
    log_r, code, cell, arch = (np.concatenate(x) for x in (logs, codes, cells, archs))
    cost = {convalgo.CONV_ALGOS[a]: float(np.exp(np.median(log_r[code == a]))) for a in np.unique(code).tolist()}
    log_cost = np.log(convalgo.source_cost(code, cost))
    choice: dict[str, dict[str, float]] = {}
    for group in ["*", *sorted(set(arch.tolist()))]:
        sel = np.ones(len(arch), dtype=bool) if group == "*" else arch == group
        keys, inv = np.unique(cell[sel].astype(str), return_inverse=True)
        sums = np.bincount(inv, weights=log_cost[sel], minlength=len(keys))
        counts = np.bincount(inv, minlength=len(keys))
        choice[group] = {str(k): float(v / c) for k, v, c in zip(keys.tolist(), sums, counts, strict=True)}
    fitted = ConvAlgos(cost=cost, choice=choice, width=width, alpha=alpha, gpus=gpus,
                       size=fit_conv_size(sets, leave_out=leave_out) if size else None)
    if fitted.size is None or not blend or len(gpus) < 3:
        return fitted
    train = [s for s in sets if s.spec.id != leave_out]
    share = _choose_blend(train, cal, reg, width=width, alpha=alpha)
    return msgspec.structs.replace(fitted, size=msgspec.structs.replace(fitted.size, blend=share))


#: Shares of the size model in its geometric blend with the engine's algorithm-cost prediction,
#: chosen by leaving each training GPU out in turn (:func:`_choose_blend`).
BLEND_SHARES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)


def _choose_blend(train: Sequence[ConvSet], cal: Calibration, reg: GPURegistry, *, width: float,
                  alpha: float) -> float:
    """The :data:`BLEND_SHARES` share with the least mean MAPE over the training GPUs, each
    predicted from the others with both models fitted without it: the two err apart (the engine's
    per-GPU physics, the size model's shape cells), so their geometric mean can beat either."""
    cfg = conv_config("scaled")
    score: dict[float, list[float]] = {w: [] for w in BLEND_SHARES}
    for held in train:
        rest = [s for s in train if s.spec.id != held.spec.id]
        inner = fit_conv_algos(rest, cal, reg, width=width, alpha=alpha, blend=False)
        if inner.size is None:
            continue
        sized = msgspec.structs.replace(cal, conv_algos=msgspec.structs.replace(
            inner, size=msgspec.structs.replace(inner.size, blend=1.0)))
        engine = msgspec.structs.replace(cal, conv_algos=msgspec.structs.replace(inner, size=None))
        per_source: dict[float, list[float]] = {w: [] for w in BLEND_SHARES}
        for src in rest:
            si, ti = _common(src, held)
            table, measured = src.table.take(si), held.table["duration_ns"][ti]
            a = np.log(predict(table, held.spec, source=src.spec, model="scaled", calibration=sized, config=cfg,
                               registry=reg).predicted_ns)
            b = np.log(predict(table, held.spec, source=src.spec, model="scaled", calibration=engine, config=cfg,
                               registry=reg).predicted_ns)
            for w in BLEND_SHARES:
                per_source[w].append(float(np.mean(np.abs(np.exp(w * a + (1.0 - w) * b) / measured - 1.0))))
        for w in BLEND_SHARES:
            score[w].append(float(np.mean(per_source[w])))
    return min(BLEND_SHARES, key=lambda w: float(np.mean(score[w])) if score[w] else float("inf"))


def fit_campaign(root: str | Path, cal: Calibration, reg: GPURegistry,
                 log: Callable[[str], None] | None = None) -> ConvAlgos | None:
    """The algorithm model fitted on every GPU of ``root``'s :data:`CONV_FOLDER` (what the packaged
    calibration ships, made by ``cascade calibrate``); None where the folder is absent or holds
    fewer than two GPUs (nothing to move between)."""
    folder = Path(root) / CONV_FOLDER
    if not folder.is_dir():
        return None
    sets = load_conv_folder(folder, reg, log=log)
    if len({s.spec.id for s in sets}) < 2:
        return None
    return fit_conv_algos(sets, msgspec.structs.replace(cal, conv_algos=None), reg)


def left_out_calibrations(sets: Sequence[ConvSet], cal: Calibration, reg: GPURegistry, *,
                          width: float = 1.0, alpha: float = CONV_ALPHA, size: bool = True, blend: bool = True
                          ) -> Callable[[str], Calibration]:
    """Per target GPU, ``cal`` with the convolution algorithm model fitted on every other GPU."""
    cache: dict[str, Calibration] = {}

    def get(gpu: str) -> Calibration:
        if gpu not in cache:
            fit = fit_conv_algos(sets, cal, reg, leave_out=gpu, width=width, alpha=alpha, size=size, blend=blend)
            cache[gpu] = msgspec.structs.replace(cal, conv_algos=fit)
        return cache[gpu]

    return get
