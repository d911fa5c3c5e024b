"""Serving simulator: invariants (hypothesis), analytic checks, metrics, validation."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade.errors import DuplicateNameError, TraceFormatError, UnknownNameError, ValidationError
from cascade.serving import (
    MODEL_SHAPES,
    ROUTERS,
    Burst,
    Constant,
    Fixed,
    Gamma,
    KVConfig,
    LeastOutstanding,
    LogNormal,
    Poisson,
    RoundRobin,
    Scenario,
    Sglang,
    Slo,
    Static,
    StepTimeModel,
    Trace,
    Uniform,
    Vllm,
    run_scenario,
)
from cascade.serving.capacity import max_rate, min_replicas
from cascade.serving.metrics import records_csv
from cascade.serving.scenario import DrawnRequests, draw_workload, resolve, simulate
from cascade.serving.stepmodel import Law
from cascade.serving.synthetic import SyntheticLaw, synthetic_step_model

GiB = 1 << 30
MODEL = synthetic_step_model()
KV_BIG = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=80 * GiB)


def kv_blocks(n: int, block_size: int = 16) -> KVConfig:
    return KVConfig(model=MODEL_SHAPES["opt-125m"], gpu_memory_bytes=GiB, block_size=block_size,
                    num_gpu_blocks_override=n)


# ---- invariants ------------------------------------------------------------------------------

scenarios = st.builds(
    lambda rate, n, reps, plo, pspan, olo, ospan, sched, router, seed: Scenario(
        arrival=Poisson(rate=rate), n_requests=n, replicas=reps,
        prompt=Uniform(lo=plo, hi=plo + pspan), output=Uniform(lo=olo, hi=olo + ospan),
        scheduler=sched, router=router, seed=seed),
    rate=st.floats(1.0, 400.0), n=st.integers(1, 60), reps=st.integers(1, 3),
    plo=st.integers(1, 200), pspan=st.integers(0, 300), olo=st.integers(1, 40),
    ospan=st.integers(0, 60),
    sched=st.one_of(
        st.builds(Vllm, max_num_batched_tokens=st.integers(16, 600),
                  max_num_seqs=st.integers(1, 12), enable_chunked_prefill=st.just(True),
                  long_prefill_token_threshold=st.sampled_from([0, 0, 64]), async_scheduling=st.booleans()),
        st.builds(Static, batch_size=st.integers(1, 6), drop_finished=st.booleans()),
        st.builds(Sglang, chunked_prefill_size=st.integers(16, 600), max_prefill_tokens=st.integers(16, 1200),
                  max_running_requests=st.one_of(st.none(), st.integers(1, 12)),
                  clip_max_new_tokens=st.sampled_from([4096, 8]), overlap_schedule=st.booleans())),
    router=st.sampled_from([RoundRobin(), LeastOutstanding()]),
    seed=st.integers(0, 2**32 - 1),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios, blocks=st.integers(40, 200))
def test_invariants(sc: Scenario, blocks: int) -> None:
    kv = kv_blocks(blocks)
    rs = resolve(sc)
    out = simulate(rs, MODEL, kv, record_steps=True)
    sched = rs.scheduler
    n = len(out.arrival_ns)
    # every request gets exactly its output tokens, none before it arrives, in order
    assert np.array_equal(out.tokens_emitted, out.output_tokens)
    for rid in range(n):
        times = out.token_times_ns(rid)
        assert len(times) == out.output_tokens[rid]
        assert times[0] > out.arrival_ns[rid]
        assert out.first_scheduled_ns[rid] >= out.arrival_ns[rid]
        assert np.all(np.diff(times) > 0)
    assert len(out.itl_ns) == int(np.sum(out.output_tokens - 1))
    for rep in out.replicas:
        log = np.array(rep.steps_log, dtype=float).reshape(-1, 5)
        # steps of a replica never overlap; KV never exceeds capacity
        assert np.all(log[1:, 0] >= log[:-1, 1] - 1e-6)
        assert np.all(log[:, 4] <= kv.num_blocks())
        assert rep.kv_max <= kv.num_blocks()
        if isinstance(sched, Vllm):
            assert np.all(log[:, 2] <= sched.max_num_batched_tokens)
            assert np.all(log[:, 3] <= sched.max_num_seqs)
        elif isinstance(sched, Sglang):
            if sched.max_running_requests:
                assert np.all(log[:, 3] <= sched.max_running_requests)
        else:
            assert np.all(log[:, 3] <= sched.batch_size)
        assert rep.free == kv.num_blocks()  # everything released at the end
    # identical seed -> identical result
    again = simulate(resolve(sc), MODEL, kv)
    assert np.array_equal(again.finished_ns, out.finished_ns)
    assert np.array_equal(again.itl_ns, out.itl_ns)


@settings(max_examples=25, deadline=None)
@given(sc=scenarios.filter(lambda s: isinstance(s.scheduler, Vllm | Sglang)), blocks=st.integers(40, 200))
def test_fast_forward_matches_single_stepping(sc: Scenario, blocks: int) -> None:
    rs = resolve(sc)
    kv = kv_blocks(blocks)
    a = simulate(rs, MODEL, kv, fast_forward=True)
    b = simulate(rs, MODEL, kv, fast_forward=False)
    np.testing.assert_allclose(a.finished_ns, b.finished_ns, rtol=1e-12)
    np.testing.assert_allclose(a.first_token_ns, b.first_token_ns, rtol=1e-12)
    assert np.array_equal(a.preemptions, b.preemptions)
    np.testing.assert_allclose(np.sort(a.itl_ns), np.sort(b.itl_ns), rtol=1e-9)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_async_scheduling_admits_a_request_one_step_later(fast_forward: bool) -> None:
    # one long request decoding; a second arrives in the middle of its 20th step. Synchronous
    # scheduling takes it into the next step; async scheduling built that one already, while
    # the 20th ran, so the second waits for the step after (vLLM's AsyncScheduler)
    first: dict[bool, float] = {}
    for overlap in (False, True):
        sc = Scenario(n_requests=2, prompt=Fixed(tokens=16), output=Fixed(tokens=200),
                      scheduler=Vllm(async_scheduling=overlap))
        rs = resolve(sc)
        probe = simulate(rs, MODEL, kv_blocks(200), workload=DrawnRequests(
            np.array([0.0, 1e9]), np.array([16, 16]), np.array([200, 1])), fast_forward=fast_forward)
        ends = probe.step_ends[0]
        mid = (ends[19] + ends[20]) / 2 / 1e9
        out = simulate(rs, MODEL, kv_blocks(200), workload=DrawnRequests(
            np.array([0.0, mid]), np.array([16, 16]), np.array([200, 1])), fast_forward=fast_forward)
        step = int(np.searchsorted(out.step_ends[0], out.first_scheduled_ns[1] + 1e-3))
        first[overlap] = step
        assert np.array_equal(out.tokens_emitted, out.output_tokens)
    assert first[False] == 21 and first[True] == 22


def test_preemption_happens_and_requests_still_complete() -> None:
    sc = Scenario(arrival=Burst(), n_requests=40, prompt=Fixed(tokens=100),
                  output=Fixed(tokens=200), scheduler=Vllm(max_num_seqs=32))
    res = run_scenario(sc, MODEL, kv_blocks(60))
    assert res.preemptions > 0
    assert res.completed == 40 and res.total_output_tokens == 40 * 200
    assert res.kv_cache.max_blocks_used <= 60


def test_throughput_never_exceeds_n_times_single_replica_capacity() -> None:
    base = {"prompt": Fixed(tokens=128), "output": Fixed(tokens=64),
            "scheduler": Vllm(max_num_seqs=64)}
    one = run_scenario(Scenario(arrival=Burst(), n_requests=1500, **base), MODEL, KV_BIG)
    cap = one.output_throughput
    # analytic bound too: a step yields at most max_num_seqs tokens and lasts at least d0 + d1
    c = MODEL.step_cost()
    assert cap <= 64 / ((c.d0 + c.d1) / 1e9)
    for reps, rate in ((2, 50.0), (3, 400.0), (4, 2000.0)):
        r = run_scenario(Scenario(arrival=Poisson(rate=rate), n_requests=1500, replicas=reps,
                                  router=LeastOutstanding(), **base), MODEL, KV_BIG)
        assert r.output_throughput <= reps * cap * 1.02


# ---- analytic checks -------------------------------------------------------------------------

def test_ttft_at_very_low_rate_is_the_prefill_step_time() -> None:
    sc = Scenario(arrival=Poisson(rate=0.001), n_requests=20, prompt=Fixed(tokens=300),
                  output=Fixed(tokens=5), include_records=True)
    res = run_scenario(sc, MODEL, KV_BIG)
    prefill_ms = MODEL.predict_prefill(300).total_ns / 1e6
    assert res.ttft_ms.mean == pytest.approx(prefill_ms, rel=1e-9)
    assert res.ttft_ms.p99 == pytest.approx(prefill_ms, rel=1e-9)
    assert res.queue_ms.max == 0.0
    dec = [MODEL.predict_decode(1, 300 + j).total_ns / 1e6 for j in range(1, 5)]
    assert res.tpot_ms.mean == pytest.approx(sum(dec) / 4, rel=1e-9)
    assert res.e2el_ms.mean == pytest.approx(prefill_ms + sum(dec), rel=1e-9)


def test_static_batch_1_matches_md1_waiting_time() -> None:
    sc0 = Scenario(arrival=Poisson(rate=1.0), n_requests=1, prompt=Fixed(tokens=64),
                   output=Fixed(tokens=8), scheduler=Static(batch_size=1))
    service_s = run_scenario(sc0, MODEL, KV_BIG).e2el_ms.mean / 1e3
    rho = 0.6
    lam = rho / service_s
    sc = msgspec.structs.replace(sc0, arrival=Poisson(rate=lam), n_requests=40000, seed=11)
    res = run_scenario(sc, MODEL, KV_BIG)
    wq_ms = rho * service_s / (2 * (1 - rho)) * 1e3
    assert res.queue_ms.mean == pytest.approx(wq_ms, rel=0.05)


def test_static_batches_do_not_admit_mid_batch() -> None:
    sc = Scenario(arrival=Constant(rate=100.0), n_requests=6, prompt=Fixed(tokens=16),
                  output=Fixed(tokens=50), scheduler=Static(batch_size=4), include_records=True)
    res = run_scenario(sc, MODEL, KV_BIG)
    recs = res.records
    assert recs is not None
    # request 0 starts alone; 1..4 wait for it to finish and go together
    assert recs[1].first_scheduled_at == pytest.approx(recs[0].finished_at)
    assert {r.first_scheduled_at for r in recs[1:5]} == {recs[1].first_scheduled_at}


def test_metrics_follow_vllm_bench_definitions() -> None:
    sc = Scenario(arrival=Poisson(rate=30.0), n_requests=300, replicas=2,
                  prompt=LogNormal(median=200, p90=600, max=2000), output=Uniform(lo=1, hi=80),
                  slo=Slo(ttft_ms=200, tpot_ms=40), include_records=True, seed=5)
    res = run_scenario(sc, MODEL, KV_BIG)
    recs = res.records
    assert recs is not None and len(recs) == 300
    tp = [r.tpot_ms for r in recs if r.output_tokens > 1]
    assert all(r.tpot_ms is None for r in recs if r.output_tokens == 1)
    assert res.tpot_ms.count == len(tp)
    assert res.tpot_ms.mean == pytest.approx(float(np.mean(tp)))
    for r in recs:
        assert r.ttft_ms == pytest.approx((r.first_token_at - r.arrived_at) * 1e3)
        if r.tpot_ms is not None:
            assert r.tpot_ms == pytest.approx((r.e2el_ms - r.ttft_ms) / (r.output_tokens - 1))
    assert res.itl_ms.count == sum(r.output_tokens - 1 for r in recs)
    assert res.duration_s == pytest.approx(max(r.finished_at for r in recs) - recs[0].arrived_at)
    assert res.request_throughput == pytest.approx(300 / res.duration_s)
    assert res.total_token_throughput == pytest.approx(
        (res.total_input_tokens + res.total_output_tokens) / res.duration_s)
    met = sum(1 for r in recs if r.ttft_ms <= 200 and (r.tpot_ms or 0) <= 40)
    assert res.request_goodput == pytest.approx(met / res.duration_s)
    assert res.slo_attainment == pytest.approx(met / 300)
    assert 0 < res.kv_cache.mean_utilisation <= res.kv_cache.max_utilisation <= 1
    text = records_csv(recs)
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) == 300 and float(rows[7]["e2el_ms"]) == pytest.approx(recs[7].e2el_ms)
    back = msgspec.json.decode(msgspec.json.encode(res))
    assert back["ttft_ms"]["p99"] == pytest.approx(res.ttft_ms.p99)


def test_round_robin_and_least_outstanding_routing() -> None:
    sc = Scenario(arrival=Poisson(rate=50.0), n_requests=90, replicas=3, include_records=True)
    res = run_scenario(sc, MODEL, KV_BIG)
    assert [r.requests for r in res.replicas] == [30, 30, 30]
    assert res.records is not None
    assert [r.replica for r in res.records[:6]] == [0, 1, 2, 0, 1, 2]
    # long requests on replica 0 -> least_outstanding sends more elsewhere
    lo = run_scenario(msgspec.structs.replace(sc, router=LeastOutstanding(), arrival=Burst()),
                      MODEL, KV_BIG)
    assert sum(r.requests for r in lo.replicas) == 90
    assert max(r.requests for r in lo.replicas) - min(r.requests for r in lo.replicas) <= 1


def test_arrival_patterns_rates_and_determinism() -> None:
    for arr in (Poisson(rate=20.0), Gamma(rate=20.0, cv=3.0), Constant(rate=20.0)):
        wl = draw_workload(resolve(Scenario(arrival=arr, n_requests=20000, seed=1)))
        assert wl.arrived_at[0] == 0.0
        assert 19999 / wl.arrived_at[-1] == pytest.approx(20.0, rel=0.08)
    g = np.diff(draw_workload(resolve(Scenario(arrival=Gamma(rate=20.0, cv=3.0),
                                               n_requests=4000))).arrived_at)
    assert np.std(g) / np.mean(g) == pytest.approx(3.0, rel=0.2)
    wl = draw_workload(resolve(Scenario(arrival=Poisson(rate=5.0), duration_s=10.0)))
    assert wl.arrived_at.max() < 10.0 and 20 < len(wl.arrived_at) < 100
    ln = draw_workload(resolve(Scenario(n_requests=5000, prompt=LogNormal(median=100, p90=300))))
    assert np.median(ln.prompt_tokens) == pytest.approx(100, rel=0.05)
    assert np.percentile(ln.prompt_tokens, 90) == pytest.approx(300, rel=0.08)


def test_trace_replay(tmp_path: Path) -> None:
    p = tmp_path / "trace.csv"
    p.write_text("arrived_at,prompt_tokens,output_tokens\n0.0,10,3\n0.5,20,4\n1.0,30,1\n")
    res = run_scenario({"arrival": {"kind": "trace", "path": str(p)}, "include_records": True},
                       MODEL, KV_BIG)
    assert res.records is not None
    assert [(r.arrived_at, r.prompt_tokens, r.output_tokens) for r in res.records] == [
        (0.0, 10, 3), (0.5, 20, 4), (1.0, 30, 1)]
    fast = run_scenario(Scenario(arrival=Trace(path=str(p), time_scale=0.5),
                                 include_records=True), MODEL, KV_BIG)
    assert fast.records is not None and fast.records[2].arrived_at == 0.5
    bad = tmp_path / "bad.csv"
    bad.write_text("arrived_at,prompt_tokens,output_tokens\n0.0,10,3\n0.1,x,4\n")
    with pytest.raises(TraceFormatError) as err:
        run_scenario(Scenario(arrival=Trace(path=str(bad))), MODEL, KV_BIG)
    assert err.value.line == 3 and err.value.file == str(bad)
    hdr = tmp_path / "hdr.csv"
    hdr.write_text("t,p,o\n")
    with pytest.raises(TraceFormatError) as err:
        run_scenario(Scenario(arrival=Trace(path=str(hdr))), MODEL, KV_BIG)
    assert err.value.line == 1


@pytest.mark.parametrize(("scenario", "field"), [
    ({"arrival": {"kind": "poisson", "rate": -1}}, "arrival.rate"),
    ({"arrival": {"kind": "nope"}}, "arrival"),
    ({"replicas": 0}, "replicas"),
    ({"prompt": {"kind": "uniform", "lo": 10, "hi": 5}}, "prompt.hi"),
    ({"prompt": {"kind": "lognormal", "median": 10}}, "prompt"),
    ({"output": {"kind": "trace"}}, "output"),
    ({"scheduler": {"kind": "vllm", "max_num_seqs": 0}}, "scheduler.max_num_seqs"),
    ({"router": {"kind": "random"}}, "router"),
    ({"slo": {"ttft_ms": -5}}, "slo.ttft_ms"),
    ({"n_requests": 5, "duration_s": 3.0}, "duration_s"),
    ({"prompt": {"kind": "fixed", "tokens": 10**7}}, "prompt.tokens"),  # over MAX_TOKENS
    ({"prompt": {"kind": "fixed", "tokens": 10**6}}, "prompt"),  # over the KV cache
    ({"output": {"kind": "lognormal", "mean": 100, "sigma": 1e300}}, "output.sigma"),
])
def test_validation_errors_name_the_field(scenario: dict, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        run_scenario(scenario, MODEL, KV_BIG)
    assert err.value.field == field, str(err.value)


def test_registries_reject_duplicates_and_list_known_names() -> None:
    with pytest.raises(DuplicateNameError):
        ROUTERS.register("round_robin", RoundRobin, lambda cfg, n: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(UnknownNameError) as err:
        ROUTERS.get("random")
    assert err.value.known == ["least_outstanding", "round_robin"]


def test_progress_callback_and_scenario_from_json() -> None:
    seen: list[tuple[int, int]] = []
    sc = msgspec.json.decode(json.dumps({"arrival": {"kind": "poisson", "rate": 100},
                                         "n_requests": 2500, "replicas": 2}), type=Scenario)
    run_scenario(sc, MODEL, KV_BIG, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (1000, 2500) and seen[-1] == (2500, 2500)


def test_extrapolation_is_reported_for_scenarios_outside_calibration() -> None:
    recs = [msgspec.structs.replace(r) for r in []]
    del recs
    small = StepTimeModel.fit(
        [*(__import__("cascade.serving.synthetic", fromlist=["x"]).synthetic_records(
            SyntheticLaw(), prefill_tokens=(6,), batches=(1,), contexts=(7, 37)))])
    res = run_scenario(Scenario(arrival=Poisson(rate=2.0), n_requests=50, prompt=Fixed(tokens=2000),
                                output=Fixed(tokens=8)), small, KV_BIG)
    assert res.extrapolated
    assert res.extrapolation["prefill_tokens"].value == 2000
    inside = run_scenario(Scenario(arrival=Poisson(rate=0.01), n_requests=5, prompt=Fixed(tokens=6),
                                   output=Fixed(tokens=20)), small, KV_BIG)
    assert not inside.extrapolated


def test_capacity_searches() -> None:
    base = Scenario(arrival=Poisson(rate=5.0), n_requests=400, prompt=Fixed(tokens=256),
                    output=Fixed(tokens=64), slo=Slo(ttft_ms=300, tpot_ms=60, attainment=0.9),
                    seed=3)
    cap = max_rate(base, MODEL, KV_BIG, rel_tol=0.05)
    assert cap.found and cap.rate is not None and cap.result is not None
    assert cap.result.slo_attainment is not None and cap.result.slo_attainment >= 0.9
    over = run_scenario(msgspec.structs.replace(base, arrival=Poisson(rate=cap.rate * 1.2)),
                        MODEL, KV_BIG)
    assert over.slo_attainment is not None and over.slo_attainment < 0.9 or \
        any(not p.ok and p.rate <= cap.rate * 1.2 for p in cap.probes)
    reps = min_replicas(msgspec.structs.replace(base, arrival=Poisson(rate=cap.rate * 2.5)),
                        MODEL, KV_BIG)
    assert reps.found and reps.replicas is not None and reps.replicas >= 2
    fewer = run_scenario(msgspec.structs.replace(
        base, arrival=Poisson(rate=cap.rate * 2.5), replicas=reps.replicas - 1), MODEL, KV_BIG)
    assert fewer.slo_attainment is not None and fewer.slo_attainment < 0.9
    with pytest.raises(ValidationError) as err:
        max_rate(msgspec.structs.replace(base, slo=Slo()), MODEL, KV_BIG)
    assert err.value.field == "slo"


def test_capacity_search_rates_stay_finite() -> None:
    """A rate search from a huge start stops before the rate overflows to inf (JSON null)."""
    import math

    base = Scenario(arrival=Poisson(rate=1e308), n_requests=20, prompt=Fixed(tokens=6),
                    output=Fixed(tokens=4), slo=Slo(e2e_ms=1e12, attainment=0.5), seed=1)
    cap = max_rate(base, MODEL, KV_BIG, rel_tol=0.05, max_probes=6)
    assert cap.found and cap.rate is not None and math.isfinite(cap.rate)
    assert all(math.isfinite(p.rate) for p in cap.probes)
    tiny = Scenario(arrival=Poisson(rate=5e-324), n_requests=5, prompt=Fixed(tokens=6),
                    output=Fixed(tokens=4), seed=1)
    with pytest.raises(ValidationError) as err:  # gaps of 1/rate overflow: said, not NaN results
        run_scenario(tiny, MODEL, KV_BIG)
    assert err.value.field == "arrival" and "overflow" in str(err.value)


def test_step_cost_combines_mixed_batches() -> None:
    law = SyntheticLaw(prefill_gpu=Law(intercept_ns=100.0, per_token_ns=2.0, per_attention_ns=0.5),
                       prefill_host=Law(intercept_ns=10.0),
                       decode_gpu=Law(intercept_ns=200.0, per_token_ns=3.0, per_attention_ns=1.0),
                       decode_host=Law(intercept_ns=20.0))
    from cascade.serving.synthetic import synthetic_step_model as ssm

    c = ssm(law).step_cost()
    assert c.step_ns(10, 100, 0, 0) == pytest.approx(110 + 20 + 50)
    assert c.step_ns(0, 0, 4, 40) == pytest.approx(220 + 12 + 40)
    assert c.step_ns(10, 100, 4, 40) == pytest.approx(220 + 20 + 50 + 12 + 40)


def test_requests_longer_than_the_context_window_are_refused() -> None:
    base = {"arrival": {"kind": "poisson", "rate": 10.0}, "n_requests": 50, "seed": 3,
            "prompt": {"kind": "uniform", "lo": 100, "hi": 900}, "output": {"kind": "fixed", "tokens": 100}}
    ok = draw_workload(resolve({**base, "max_context_tokens": 1000}))  # 900 + 100 fits exactly
    assert int(np.max(ok.prompt_tokens + ok.output_tokens)) <= 1000
    with pytest.raises(ValidationError) as exc:
        draw_workload(resolve({**base, "max_context_tokens": 950}))
    assert exc.value.field == "output"  # every prompt fits alone: the output law is the one named
    assert "requests hold more tokens than the model's context of 950" in str(exc.value)
    with pytest.raises(ValidationError) as exc:
        draw_workload(resolve({**base, "max_context_tokens": 500}))
    assert exc.value.field == "prompt"  # some prompts alone are longer than the context
    assert draw_workload(resolve(base)).prompt_tokens.max() <= 900  # no window: no check


@pytest.mark.parametrize(("gpu", "limits"), [
    ("SM90_H100", (8192, 1024)), ("SM90_H200", (8192, 1024)), ("SM100_B200", (8192, 1024)),
    ("SM80_A100", (2048, 256)), ("SM80_A100_PCIE_80GB", (2048, 256)), ("SM89_L40S", (2048, 256)),
    ("SM89_L4", (2048, 256)),
])
def test_vllm_batch_defaults_follow_the_gpu(gpu: str, limits: tuple[int, int]) -> None:
    """vLLM's API server: 8192 tokens / 1024 sequences on GPUs of >= 70 GiB that are not A100s."""
    from cascade.gpus import default_registry
    from cascade.serving.requests import for_gpu, scheduler_limits

    spec = default_registry().get(gpu)
    assert scheduler_limits(for_gpu(Scenario(), spec)) == limits
    # given limits are kept; an unset max_num_seqs never exceeds the token budget given
    assert scheduler_limits(for_gpu(Scenario(scheduler=Vllm(max_num_batched_tokens=512)), spec)) == \
        (512, min(512, limits[1]))
    assert scheduler_limits(for_gpu(Scenario(scheduler=Vllm(max_num_seqs=7)), spec)) == (limits[0], 7)
    # without chunked prefill the budget holds the model's whole context window
    whole = Scenario(scheduler=Vllm(enable_chunked_prefill=False), max_context_tokens=32768)
    assert scheduler_limits(for_gpu(whole, spec))[0] == 32768


def test_unset_limits_are_filled_from_the_replicas_memory() -> None:
    """A scenario run without a GPU named gets the limits of its KV config's memory, echoed."""
    model = synthetic_step_model()
    small = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=48 * 10**9)
    res = run_scenario(Scenario(n_requests=20, prompt=Fixed(tokens=64), output=Fixed(tokens=8)), model, small)
    assert (res.scenario["scheduler"]["max_num_batched_tokens"], res.scenario["scheduler"]["max_num_seqs"]) \
        == (2048, 256)


def test_a_data_parallel_group_holds_each_ranks_limits() -> None:
    """dp ranks simulated as one engine: vLLM limits and a static batch dp times one rank's, no
    prefill chunk above one rank's budget; dp 1 leaves the scenario as it is."""
    from cascade.serving.description import data_parallel

    group = data_parallel(Scenario(scheduler=Vllm(max_num_batched_tokens=2048, max_num_seqs=64)), 4)
    assert isinstance(group.scheduler, Vllm)
    assert (group.scheduler.max_num_batched_tokens, group.scheduler.max_num_seqs) == (8192, 256)
    assert group.scheduler.long_prefill_token_threshold == 2048
    static = data_parallel(Scenario(scheduler=Static(batch_size=8)), 2)
    assert isinstance(static.scheduler, Static) and static.scheduler.batch_size == 16
    one = Scenario(scheduler=Vllm(max_num_seqs=7))
    assert data_parallel(one, 1) is one
