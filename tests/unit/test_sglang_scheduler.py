"""SGLang's scheduler in the serving simulator: a pass is all prefill or all decode, prefill
first, prompts chunked back to back, admission that reserves output room, retraction."""

from __future__ import annotations

import json
from importlib import resources
from typing import cast

import msgspec
import numpy as np
import pytest

from cascade.errors import ValidationError
from cascade.gpus import default_registry
from cascade.llm.describe import describe_model
from cascade.serving import MODEL_SHAPES, KVConfig, Scenario, Sglang, Vllm, run_scenario
from cascade.serving.described import described_kv, sglang_kv
from cascade.serving.scenario import DrawnRequests, resolve, simulate
from cascade.serving.schedulers import sglang_mem_fraction_static
from cascade.serving.sglang import SglangScheduler
from cascade.serving.sim import SimOutcome, Simulation
from cascade.serving.synthetic import synthetic_step_model

GiB = 1 << 30
MODEL = synthetic_step_model()


def _kv(tokens: int) -> KVConfig:
    return KVConfig(model=MODEL_SHAPES["opt-125m"], gpu_memory_bytes=GiB, block_size=1,
                    num_gpu_blocks_override=tokens)


def _run(sched: Sglang | Vllm, arrivals: list[float], prompts: list[int], outputs: list[int],
         kv_tokens: int = 100_000) -> SimOutcome:
    rs = resolve(Scenario(n_requests=len(arrivals), scheduler=sched))
    return simulate(rs, MODEL, _kv(kv_tokens), record_steps=True, workload=DrawnRequests(
        np.asarray(arrivals), np.asarray(prompts), np.asarray(outputs)))


def _steps(out: SimOutcome) -> np.ndarray:
    """Per step: start, end, tokens, sequences, blocks in use."""
    return np.asarray(out.replicas[0].steps_log, dtype=float).reshape(-1, 5)


def test_a_prompt_arriving_mid_decode_gets_a_pass_of_its_own_and_the_decode_waits() -> None:
    # A decodes 200 tokens; B (64 tokens in) arrives during its 20th step
    probe = _run(Sglang(overlap_schedule=False), [0.0], [16], [200])
    mid = float(probe.step_ends[0][19] + probe.step_ends[0][20]) / 2 / 1e9
    out = _run(Sglang(overlap_schedule=False), [0.0, mid], [16, 64], [200, 5])
    steps = _steps(out)
    b_first = out.token_times_ns(1)[0]
    k = int(np.flatnonzero(np.isclose(steps[:, 1], b_first))[0])
    assert steps[k, 2] == 64 and steps[k, 3] == 1  # B's prompt alone: no decode in the pass
    a_times = out.token_times_ns(0)
    assert not np.any(np.isclose(a_times, b_first))  # A emitted nothing at that pass's end
    assert np.any(np.isclose(a_times, steps[k - 1, 1]))  # it decoded right before and after
    assert np.any(np.isclose(a_times, steps[k + 1, 1]))
    # vLLM runs B's prompt in a step beside A's decode
    v = _run(Vllm(async_scheduling=False), [0.0, mid], [16, 64], [200, 5])
    assert np.any(np.isclose(v.token_times_ns(0), v.token_times_ns(1)[0]))


def test_a_long_prompt_is_chunked_back_to_back_and_its_first_token_ends_the_last_chunk() -> None:
    probe = _run(Sglang(overlap_schedule=False), [0.0], [16], [100])
    mid = float(probe.step_ends[0][9] + probe.step_ends[0][10]) / 2 / 1e9
    out = _run(Sglang(chunked_prefill_size=100, overlap_schedule=False), [0.0, mid], [16, 350], [100, 3])
    steps = _steps(out)
    b_first = out.token_times_ns(1)[0]
    last = int(np.flatnonzero(np.isclose(steps[:, 1], b_first))[0])
    chunks = steps[last - 3:last + 1]
    assert chunks[:, 2].tolist() == [100, 100, 100, 50] and np.all(chunks[:, 3] == 1)
    a_times = out.token_times_ns(0)
    assert not np.any((a_times > chunks[0, 0]) & (a_times <= chunks[-1, 1]))  # A stalled throughout


def test_admission_reserves_the_running_requests_output_room() -> None:
    # 1,000 tokens of KV, three requests at once. A (100 in, 600 out) reserves 700 of them and
    # B (100 in, 100 out) 200: both are prefilled in the first pass. C (300 in, 100 out) needs
    # 400 of the 100 left, so admission stops there and stays stopped until B finishes; vLLM
    # admits all three at once (their prompts fit)
    arrivals, prompts, outputs = [0.0, 0.0, 0.0], [100, 100, 300], [600, 100, 100]
    out = _run(Sglang(overlap_schedule=False), arrivals, prompts, outputs, kv_tokens=1000)
    b_done = out.finished_ns[1]
    assert out.first_token_ns[1] < out.token_times_ns(0)[1]  # B prefilled with A
    assert out.first_token_ns[2] > b_done  # C waited for B to finish
    assert out.preemptions.sum() == 0
    v = _run(Vllm(async_scheduling=False), arrivals, prompts, outputs, kv_tokens=1000)
    assert v.first_token_ns[2] < b_done


def test_a_decode_without_room_retracts_the_request_with_fewest_outputs_and_all_finish() -> None:
    # one request at a time, each while the others decode: a low ratio reserves little of the
    # running requests' outputs, so the cache fills before they finish
    sc = Scenario(n_requests=30, prompt={"kind": "fixed", "tokens": 100}, output={"kind": "fixed", "tokens": 200},
                  arrival={"kind": "constant", "rate": 200.0}, scheduler=Sglang(init_new_token_ratio=0.05))
    res = run_scenario(sc, MODEL, _kv(3000))
    assert res.preemptions > 0
    assert res.completed == 30 and res.total_output_tokens == 30 * 200
    assert res.kv_cache.max_blocks_used <= 3000


def test_the_new_token_ratio_falls_to_its_floor_and_restarts_when_idle() -> None:
    cfg = Sglang()
    rs = resolve(Scenario(n_requests=1, scheduler=cfg))
    out = simulate(rs, MODEL, _kv(100_000), workload=DrawnRequests(np.array([0.0]), np.array([10]),
                                                                   np.array([900])))
    assert out.tokens_emitted[0] == 900
    sched = SglangScheduler(cfg, cast(Simulation, _sim_stub()))
    assert sched.min_ratio == pytest.approx(0.7 * 0.14)
    assert sched.decay * cfg.new_token_ratio_decay_steps == pytest.approx(0.7 - 0.098)


def _sim_stub() -> object:
    class _Rep:
        pass

    class _Sim:
        reps = [_Rep()]
        num_blocks = 1000
        bs = 1
    return _Sim()


@pytest.mark.parametrize(("gib", "tp", "version", "frac"), [
    (79.65, 1, (0, 5, 6), 0.835), (79.65, 8, (0, 5, 6), 0.818), (140.4, 1, (0, 5, 6), 0.907),
    (140.4, 8, (0, 5, 6), 0.897), (79.65, 1, (0, 5, 1), 0.874), (79.65, 8, (0, 5, 1), 0.831),
    (140.4, 2, (0, 5, 1), 0.907)])
def test_sglang_sizes_its_static_memory_by_gpu_and_tp(gib: float, tp: int, version: tuple[int, int, int],
                                                      frac: float) -> None:
    assert sglang_mem_fraction_static(gib, tp, version) == pytest.approx(frac, abs=0.002)


def test_sglang_kv_sizes_the_pool_as_sglang_and_refuses_a_board_its_rule_leaves_nothing() -> None:
    config = json.loads(resources.files("cascade.serving").joinpath("model_configs/llama-3.1-8b.json").read_text())
    desc = describe_model(config, quant="bf16", tp=1)
    h100 = default_registry().get("SM90_H100")
    kv = sglang_kv(desc, h100)
    assert kv.block_size == 1 and kv.gpu_memory_utilization == pytest.approx(0.835, abs=0.002)
    # SGLang keeps 0.835 of the memory to vLLM's 0.9 less activations: a smaller pool here
    assert kv.num_blocks() < described_kv(desc, h100).num_blocks() * 16
    small = msgspec.structs.replace(h100, memory_gb=8.0)
    with pytest.raises(ValidationError, match="no static memory") as err:
        sglang_kv(desc, small)
    assert err.value.field == "kv"
