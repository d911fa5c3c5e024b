"""Timeline replay: schedule rules, syncs, steps, and own-source reproduction."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade.engine import predict
from cascade.engine.replay import replay
from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable


def naive(h: list[float], d: list[float], streams: list[int], sync: list[int], orig_end: list[float]) -> list[float]:
    """Reference replay: one kernel at a time."""
    free: dict[int, float] = {}
    delay, resume = 0.0, -np.inf
    sim_end = orig_max = -np.inf
    starts = []
    for i in range(len(h)):
        host = max(h[i] + delay, resume)
        s = max(host, free.get(streams[i], -np.inf))
        free[streams[i]] = s + d[i]
        sim_end = max(sim_end, s + d[i])
        orig_max = max(orig_max, orig_end[i])
        starts.append(s)
        if sync[i]:
            r_sim, r_orig = max(sim_end, host), max(orig_max, h[i])
            delay, resume = r_sim - r_orig, r_sim
    return starts


def traced_timeline(n: int, seed: int = 0, streams: int = 1) -> KernelTable:
    """A consistent measured timeline: host launches, device runs, host waits at syncs."""
    rng = np.random.default_rng(seed)
    m = rng.integers(1, 4096, n)
    work = np.maximum(2.0 * m * 4096 * 4096 / 200e12, 2.0 * (2 * m * 4096 + 4096 * 4096) / 1.5e12)
    dur = work * 1e9 * rng.uniform(1.0, 1.5, n) + 3_000  # above the A100 roofline
    sync = (rng.random(n) < 0.05).astype(np.int64)
    stream = rng.integers(0, streams, n)
    host = np.empty(n)
    start = np.empty(n)
    t = 0.0
    free: dict[int, float] = {}
    device_end = 0.0
    for i in range(n):
        t += rng.uniform(3_000, 8_000)
        host[i] = t
        start[i] = max(t, free.get(int(stream[i]), 0.0))
        free[int(stream[i])] = start[i] + dur[i]
        device_end = max(device_end, start[i] + dur[i])
        if sync[i]:
            t = max(t, device_end)
    step = np.cumsum(np.r_[0, sync[:-1]])
    return KernelTable({
        "name": np.array(["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn"] * n, dtype=object),
        "op": np.array(["linear"] * n, dtype=object), "dtype": np.array(["fp16"] * n, dtype=object),
        "m": m, "n": np.full(n, 4096), "k": np.full(n, 4096),
        "host_launch_ns": host, "start_ns": start, "duration_ns": dur, "stream": stream,
        "sync_after": sync, "step": step, "step_kind": np.where(step == 0, "prefill", "decode").astype(object),
        "step_tokens": np.where(step == 0, 128, 1), "step_context": 128 + step,
    })


def test_replay_on_source_gpu_with_scaled_model_reproduces_end_to_end() -> None:
    table = traced_timeline(3000, streams=2)
    measured_e2e = float((table["start_ns"] + table["duration_ns"]).max() - table["host_launch_ns"].min())
    p = predict(table, "SM80_A100", source="SM80_A100", model="scaled")
    r = replay(table, p.predicted_ns)
    assert abs(r.end_to_end_ns / measured_e2e - 1) < 0.01
    np.testing.assert_allclose(r.start_ns, table["start_ns"], rtol=1e-9, atol=1e-3)


def test_faster_gpu_shortens_timeline_and_keeps_host_gaps() -> None:
    table = traced_timeline(500)
    a = replay(table, table["duration_ns"])
    h = replay(table, predict(table, "SM90_H100", source="SM80_A100", model="scaled").predicted_ns)
    assert h.end_to_end_ns < a.end_to_end_ns
    first_sync = int(np.flatnonzero(table["sync_after"])[0])
    np.testing.assert_allclose(h.host_launch_ns[: first_sync + 1], table["host_launch_ns"][: first_sync + 1])
    gaps = np.diff(table["host_launch_ns"][first_sync + 1:first_sync + 5])
    np.testing.assert_allclose(np.diff(h.host_launch_ns[first_sync + 1:first_sync + 5]), gaps)


def test_stream_serialises_and_host_waits_after_sync() -> None:
    rows = [
        {"name": "a", "host_launch_ns": 0.0, "stream": 0, "duration_ns": 10.0, "sync_after": 0, "step": 0},
        {"name": "b", "host_launch_ns": 1.0, "stream": 0, "duration_ns": 10.0, "sync_after": 1, "step": 0},
        {"name": "c", "host_launch_ns": 25.0, "stream": 1, "duration_ns": 10.0, "sync_after": 0, "step": 1},
        {"name": "d", "host_launch_ns": 26.0, "stream": 0, "duration_ns": 10.0, "sync_after": 0, "step": 1},
    ]
    t = KernelTable.from_rows(rows)
    r = replay(t, np.array([30.0, 30.0, 5.0, 5.0]))
    # measured: the host resumed at 20 and launched c 5 ns later; simulated: resumes at 60
    assert list(r.start_ns) == [0.0, 30.0, 65.0, 66.0]
    assert list(r.host_launch_ns) == [0.0, 1.0, 65.0, 66.0]
    assert r.end_to_end_ns == 71.0
    steps = r.steps.as_rows()
    assert [s["step"] for s in steps] == [0, 1] and steps[0]["gpu_ns"] == 60.0
    assert steps[1]["start_ns"] == 65.0 and steps[1]["end_ns"] == 71.0 and steps[1]["host_ns"] == 1.0


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 10_000), streams=st.integers(1, 3),
       scale=st.floats(0.1, 5.0))
def test_vectorised_replay_matches_reference_loop(n: int, seed: int, streams: int, scale: float) -> None:
    table = traced_timeline(n, seed, streams)
    d = table["duration_ns"] * scale
    r = replay(table, d)
    ref = naive(table["host_launch_ns"].tolist(), d.tolist(), table["stream"].tolist(),
                table["sync_after"].tolist(), (table["start_ns"] + table["duration_ns"]).tolist())
    np.testing.assert_allclose(r.start_ns, ref, rtol=1e-9, atol=1e-6)


def test_replay_rejects_bad_predictions() -> None:
    t = traced_timeline(5)
    with pytest.raises(ValidationError):
        replay(t, np.ones(4))
    with pytest.raises(ValidationError):
        replay(t, np.array([1.0, np.nan, 1.0, 1.0, 1.0]))
