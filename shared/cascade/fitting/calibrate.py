"""``cascade calibrate`` as a function: fit every measured data set of a directory
(:func:`cascade.fitting.fit.fit_sets`), score the held-out shapes and the shifted-shape
protocols (:mod:`cascade.fitting.shift`), fit KernelBench's transfer and window work and score
the end-to-end protocol where its data sets are there (:func:`cascade.fitting.e2e.end_to_end`),
and return the calibration with its metrics and the data files' digests.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from cascade.calibration import Calibration
from cascade.fitting import conv, e2e
from cascade.fitting.fit import FitConfig, fit_sets, heldout_mask
from cascade.fitting.measured import MeasuredSet, discover, pairs
from cascade.fitting.shift import SHIFTS, shifted_rows
from cascade.fitting.validation import evaluate
from cascade.gpus.registry import GPURegistry, default_registry


def _file_digests(sets: Sequence[MeasuredSet], root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    paths = {s.path for s in sets}
    for s in sets:
        dev = s.path.with_name(f"device__{s.gpu_label}.json")
        if dev.is_file():
            paths.add(dev)
    for path in sorted(paths):
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def fit_directory(directory: str | Path, *, holdout: float = 0.2, evals: int = 800,
                  registry: GPURegistry | None = None, log: Callable[[str], None] = lambda _m: None,
                  leave_one_gpu_out: bool = True, thorough: bool = False,
                  shifts: Sequence[str] | None = None, config: FitConfig | None = None) -> Calibration:
    """Fit on every measured file under ``directory`` and record provenance and accuracy:
    held-out shapes, leave-one-GPU-out and (``shifts``, default every protocol of
    :mod:`cascade.fitting.shift`; empty to skip) the shifted-shape refits, every fit
    with the model terms of ``config``."""

    reg = registry or default_registry()
    root = Path(directory).resolve()
    sets = discover(root, reg)
    if not sets:
        from cascade.errors import ValidationError

        raise ValidationError(f"no Vidur or NeuSight files under {root}", field="data")
    max_rows = None if thorough else 3000
    rounds = 3 if thorough else 2
    config = config or FitConfig()
    cal = fit_sets(sets, holdout=holdout, evals=evals, registry=reg, log=log, max_rows=max_rows,
                   rounds=rounds, config=config)
    all_pairs = pairs(sets)
    select_test = {(p.source.dataset, p.source.spec.id, p.target.spec.id): heldout_mask(p.keys, holdout)
                   for p in all_pairs}
    metrics: dict[str, object] = {
        "heldout_shapes": _summ(evaluate(all_pairs, cal, ("roofline", "scaled"), reg=reg, select=select_test)),
    }
    if leave_one_gpu_out:
        logo: list[dict[str, object]] = []
        refits: dict[str, Calibration] = {}
        for kind_ds in sorted({(s.kind, s.dataset) for s in sets}):
            members = [s for s in sets if (s.kind, s.dataset) == kind_ds]
            if len(members) < 3:
                continue
            for out in members:
                if out.spec.id not in refits:  # one refit per GPU serves every data set
                    rest = [s for s in sets if s.spec.id != out.spec.id]
                    log(f"leave-one-GPU-out: {out.spec.id}")
                    refits[out.spec.id] = fit_sets(rest, holdout=0.0, evals=evals // 2, registry=reg,
                                                   max_rows=max_rows, rounds=rounds, config=config)
                cal_wo = refits[out.spec.id]
                involved = [p for p in all_pairs if (p.source.kind, p.source.dataset) == kind_ds
                            and out.spec.id in (p.source.spec.id, p.target.spec.id)]
                logo.extend({**r, "left_out": out.spec.id}
                            for r in _summ(evaluate(involved, cal_wo, ("roofline", "scaled"), reg=reg)))
        metrics["leave_one_gpu_out"] = logo
    shifts = SHIFTS if shifts is None else tuple(shifts)
    if shifts:
        metrics["shifted_shapes"] = shifted_rows(sets, shifts, evals=evals // 2, max_rows=max_rows,
                                                 rounds=rounds, registry=reg, log=log, config=config)
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    fitted = Calibration(
        id="cascade-default", version=now[:10], created=now,
        command=(f"cascade calibrate --data {directory} --holdout {holdout} --evals {evals}"
                 + (" --thorough" if thorough else "") + ("" if leave_one_gpu_out else " --no-leave-one-gpu-out")
                 + ("" if shifts == SHIFTS else f" --shift {','.join(shifts) or 'none'}") + config.options()),
        data_files=_file_digests(sets, root), globals=cal.globals, specs=cal.specs,
        floors_ns=cal.floors_ns, tiles=cal.tiles, metrics=metrics, defaults=cal.defaults,
        contexts=cal.contexts, transfer=cal.transfer, tile_menus=cal.tile_menus, residuals=cal.residuals)
    # cuDNN's convolution algorithms, fitted on the convolution campaign where the data has it (a
    # refit that dropped them would ship a calibration its own command cannot make)
    algos = conv.fit_campaign(root, fitted, reg, log=log)
    if algos is not None:
        log(f"convolution algorithms: {len(algos.cost)} costs on {len(algos.gpus)} GPUs")
        campaign = sorted((root / conv.CONV_FOLDER).glob("*.csv*"))
        files = {**fitted.data_files, **{str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
                                         for f in campaign}}
        fitted = msgspec.structs.replace(fitted, conv_algos=algos, data_files=files)
    if e2e.has_data(root):
        # KernelBench's transfer exponents and window work, and the whole-workload figures whole
        # traces quote, made on this fit (a refit that dropped them would quote stale figures)
        log("end-to-end protocol" + (" and the KernelBench fit" if (root / e2e.KERNELBENCH_FILE).is_file() else ""))
        run = e2e.end_to_end(root, fitted, reg, fit=(root / e2e.KERNELBENCH_FILE).is_file(),
                             leave_one_gpu_out=leave_one_gpu_out)
        fitted = run.record(fitted)
    return fitted


def _summ(stats: Sequence[object]) -> list[dict[str, object]]:
    from msgspec import to_builtins

    rows = []
    for s in stats:
        d = to_builtins(s)
        for k in ("mape", "median_ape", "p90_ape"):
            d[k] = round(d[k], 2)
        rows.append(d)
    return rows
