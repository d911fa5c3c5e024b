"""Sim results through real S3 (``cascade.platform.runstore``): result.json and kernels.npz
written the way the simulator writes them, read back equal, and a redone sim overwriting them."""

from __future__ import annotations

import numpy as np

from cascade.engine import predict
from cascade.gpus import get_gpu
from cascade.platform.keys import result_key
from cascade.platform.runstore import read_kernels, read_result, write_result
from cascade.platform.storage import Storage
from cascade.runs.results import build_result, kernels_with_predictions
from programs.bench._runbed import generate_timeline
from services.simulator.engine import replay_timeline


async def test_results_round_trip_through_s3(storage: Storage) -> None:
    timeline = generate_timeline(600, seed=3)
    target = "SM90_H100"
    pred = predict(timeline, target, source="SM80_A100")
    rep = replay_timeline(timeline, pred.predicted_ns)
    result = build_result(
        run_id="run-x", sim_id="run-x-sm90_h100-r0", trace_id="t", config=target, replica=0,
        model="auto", spec_id=target, spec_hash=get_gpu(target).spec_hash(), table=timeline,
        predicted_ns=pred.predicted_ns, regime=pred.regime_names, start_ns=rep.start_ns,
        end_ns=rep.end_ns, predicted_e2e_ns=rep.e2e_ns, steps=rep.steps, source_spec_id="SM80_A100",
        baseline_e2e_ns=None,
    )
    kernels = kernels_with_predictions(timeline, np.arange(len(timeline), dtype=float),
                                       np.full(len(timeline), "memory", dtype=object),
                                       rep.start_ns, rep.end_ns)
    key = await write_result(storage, result, kernels)
    assert key == result_key("run-x", "run-x-sm90_h100-r0")
    again = await read_result(storage, "run-x", "run-x-sm90_h100-r0")
    assert again == result
    table = await read_kernels(storage, "run-x", "run-x-sm90_h100-r0")
    assert len(table) == len(timeline) and table["predicted_ns"][5] == 5.0
    assert table["regime"][0] == "memory" and table["name"][0] == timeline["name"][0]
    await write_result(storage, result, kernels)  # a redone sim overwrites the same keys
    assert await read_result(storage, "run-x", "run-x-sm90_h100-r0") == result
