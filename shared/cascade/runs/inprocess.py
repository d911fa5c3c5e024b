"""One simulation in this process: predict every kernel of a table on a GPU, replay the
timeline, assemble the :class:`~cascade.runs.results.SimResult`.

The same engine calls a simulator makes for a job (:func:`cascade.engine.predict`, then
:func:`cascade.engine.replay.replay`), without the bus, chunking or progress events: for
a small table that must be simulated before anything else can answer (the bundled
sample's synthetic replica at first start). Deterministic: the same table, specs and
model give the same result, bit for bit, except ``created_at`` and ``wall_s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cascade.engine import predict
from cascade.engine.extrapolation import FLAGS_DTYPE
from cascade.engine.perf import REGIMES
from cascade.engine.replay import StepTimes, replay
from cascade.gpus import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.runs.results import (
    SimResult,
    StepResult,
    build_result,
    kernels_with_predictions,
    step_sequences,
)

_REGIME_NAMES = np.asarray(REGIMES, dtype=object)


@dataclass(frozen=True)
class InProcessSim:
    """A finished in-process simulation: the result and its per-kernel table."""

    result: SimResult
    kernels: KernelTable
    """The input table with the predicted columns (what ``kernels.npz`` holds)."""


def _steps(table: KernelTable, st: StepTimes) -> list[StepResult]:
    seqs = table["step_batch"]
    first_row: dict[int, int] = {}
    for row, step in enumerate(table["step"].tolist()):
        first_row.setdefault(step, row)
    out: list[StepResult] = []
    for i in range(len(st.step)):
        sid = int(st.step[i])
        kind = str(st.kind[i])
        tokens = max(0, int(st.tokens[i]))
        gpu = float(st.gpu_ns[i])
        span = float(st.duration_ns[i])
        out.append(StepResult(
            step=sid, kind=kind, tokens=tokens,
            batch=step_sequences(kind, tokens, int(seqs[first_row[sid]]) if sid in first_row else -1),
            context=max(0, int(st.context[i])),
            host_ns=max(0.0, span - gpu), gpu_ns=gpu,
            start_ns=float(st.start_ns[i]), end_ns=float(st.end_ns[i]),
            kernels=int(st.kernels[i]),
        ))
    return out


def simulate_in_process(
    table: KernelTable,
    target: GPUSpec,
    *,
    source: GPUSpec | None,
    run_id: str,
    sim_id: str,
    trace_id: str,
    model: str = "auto",
    worker: str = "",
    created_at: float | None = None,
) -> InProcessSim:
    """Simulate ``table`` (measured or estimated on ``source``) on ``target`` with ``model``.

    CPU-bound (about 20 ms for the sample's 11,000 kernels): call it in a thread from async code.
    """
    t0 = time.perf_counter()
    pred = predict(table, target, source=source, model=model)
    regime = _REGIME_NAMES[pred.regime.astype(np.int64)]
    flags = pred.flags if pred.flags is not None else np.zeros(len(table), dtype=FLAGS_DTYPE)
    rep = replay(table, pred.predicted_ns)
    prov = pred.provenance
    accuracy = None
    calibration = ""
    if prov is not None:
        from collections import Counter

        from cascade.calibration import load_calibration
        from cascade.engine.predict import accuracy_of

        used = Counter(str(m) for m in pred.models)
        accuracy = prov.accuracy if used.get("llm", 0) * 2 > len(pred.models) else accuracy_of(
            load_calibration(), source.id if source else None, target.id, prov.measurement, prov.model, used, flags)
        calibration = f"{prov.calibration_id}@{prov.calibration_version}"
    result = build_result(
        run_id=run_id, sim_id=sim_id, trace_id=trace_id, config=target.id, replica=0,
        model=str(getattr(prov, "model", "") or model), spec_id=target.id,
        spec_hash=target.spec_hash(), source_spec_id=source.id if source else "",
        calibration=calibration, table=table, predicted_ns=pred.predicted_ns, regime=regime,
        start_ns=rep.start_ns, end_ns=rep.end_ns, predicted_e2e_ns=float(rep.end_to_end_ns),
        steps=_steps(table, rep.steps), extrapolated=int(pred.extrapolated.sum()),
        extrapolation=dict(pred.extrapolation_reasons), accuracy=accuracy,
        wall_s=time.perf_counter() - t0, worker=worker,
        created_at=time.time() if created_at is None else created_at,
    )
    kernels = kernels_with_predictions(table, pred.predicted_ns, regime, rep.start_ns, rep.end_ns, flags)
    return InProcessSim(result=result, kernels=kernels)
