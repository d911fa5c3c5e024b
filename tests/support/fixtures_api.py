"""An api on real NATS + S3 with one finished simulation (``client``, ``finished``), shared by
the /v1, limits, scenarios and contract tests; a module sets ``api_tokens`` to require a token.

The finished sim is written the way the simulator writes one (``cascade.runs.results``), from
the synthetic OPT-125m sample timeline with its source durations as the prediction."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from cascade.calibration import load_calibration
from cascade.calibration.accuracy import expected_accuracy
from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.keys import kernels_key, result_key
from cascade.platform.samples import load_sample
from cascade.platform.settings import Settings
from cascade.platform.state import Provenance, RunRecord, SimRecord, TraceRecord
from cascade.platform.storage import Storage
from cascade.runs.results import (
    SimResult,
    build_result,
    encode_result,
    kernels_npz_bytes,
    kernels_with_predictions,
)
from services.api.app import create_app


@dataclass(frozen=True)
class FinishedSim:
    trace_id: str
    run_id: str
    sim_id: str
    config: str
    result: SimResult

    @property
    def model(self) -> str:
        return f"cascade/{self.trace_id}/{self.config}"


@functools.cache
def _sample_prediction() -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, bytes]:
    """The sample timeline with its source durations as the prediction, and its kernels.npz
    bytes: the same for every finished sim, so built once per test process."""
    table = load_sample().synthetic_table
    predicted = table["duration_ns"].astype(float)
    start = table["start_ns"].astype(float)
    end = start + predicted
    regime = np.array(["memory"] * len(table), dtype=object)
    e2e = float(end.max() - np.nanmin(table["host_launch_ns"]))
    npz = kernels_npz_bytes(kernels_with_predictions(table, predicted, regime, start, end))
    return table, predicted, start, end, regime, e2e, npz


@functools.cache
def _sample_result() -> SimResult:
    """:func:`build_result` of the sample prediction, under placeholder ids (see
    :func:`make_finished_sim`)."""
    table, predicted, start, end, regime, e2e, _npz = _sample_prediction()
    return build_result(
        run_id="run", sim_id="sim", trace_id="trace", config="SM90_H100", replica=0,
        model="scaled", spec_id="SM90_H100", spec_hash="test", table=table,
        predicted_ns=predicted, regime=regime, start_ns=start, end_ns=end, predicted_e2e_ns=e2e,
        source_spec_id="SM90_H100")


async def make_finished_sim(bus: Bus, storage: Storage, *, config: str = "SM90_H100",
                            workload: str = "facebook/opt-125m eager greedy generation",
                            steps: list[object] | None = None) -> FinishedSim:
    """A completed sim of a new trace/run in KV, with result.json + kernels.npz in S3."""
    tag = uuid.uuid4().hex[:8]
    trace_id, run_id = f"tv1-{tag}", f"run-v1{tag}"
    sim_id = f"{run_id}-{config.lower()}-r0"
    *_, e2e, npz = _sample_prediction()
    cal = load_calibration()
    # build_result's summaries (top kernels, families, steps) are the same for every finished
    # sim: made once per process (_sample_result), then only what names this sim changes
    result = msgspec.structs.replace(
        _sample_result(), run_id=run_id, sim_id=sim_id, trace_id=trace_id, config=config,
        spec_id=config, created_at=time.time(), calibration=f"{cal.id}@{cal.version}",
        accuracy=expected_accuracy(cal, "SM90_H100", config, "kernel"),
        **({} if steps is None else {"steps": list(steps)}))
    # what write_result stores (kernels.npz, then result.json), the npz bytes built once
    await storage.put_bytes(kernels_key(run_id, sim_id), npz)
    key = result_key(run_id, sim_id)
    await storage.put_bytes(key, encode_result(result))
    now = time.time()
    traces = await bus.kv(subjects.KV_TRACES)
    await traces.put(trace_id, TraceRecord(id=trace_id, name=f"v1 test {tag}", source_gpu="SM90_H100",
                                           kind="timeline", workload=workload, state="ready",
                                           created_at=now))
    sims = await bus.kv(subjects.KV_SIMS)
    await sims.put(sim_id, SimRecord(id=sim_id, run_id=run_id, config=config, state="completed",
                                     percent=100.0, finished_at=now, result_key=key,
                                     predicted_e2e_ns=e2e, attempts=1))
    runs = await bus.kv(subjects.KV_RUNS)
    await runs.put(run_id, RunRecord(id=run_id, trace_id=trace_id, configs=[config], state="completed",
                                     created_at=now, updated_at=now, sim_ids=[sim_id],
                                     provenance=Provenance()))
    return FinishedSim(trace_id=trace_id, run_id=run_id, sim_id=sim_id, config=config, result=result)


async def start_client(settings: Settings, bus: Bus, storage: Storage) -> TestClient:
    app = create_app(settings, bus=bus, storage=storage)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
def api_tokens() -> list[str]:
    """Tokens the api accepts for writes (none: writes are open)."""
    return []


@pytest.fixture
async def finished(bus: Bus, storage: Storage) -> FinishedSim:
    return await make_finished_sim(bus, storage)


@pytest.fixture
async def client(bus: Bus, bus_settings: Settings, storage: Storage, finished: FinishedSim,
                 api_tokens: list[str]) -> AsyncIterator[TestClient]:
    settings = bus_settings.replace(samples=False, api_tokens=api_tokens)
    c = await start_client(settings, bus, storage)
    try:
        yield c
    finally:
        await c.close()
