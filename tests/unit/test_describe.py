"""A model described from its config.json: its shape, its step rows, its step time, and the
closed-loop serving that answers 'N users, ISL in / OSL out: what TTFT and TPOT?'."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import msgspec
import numpy as np
import pytest

from cascade.errors import ValidationError
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable
from cascade.llm import work
from cascade.llm.describe import describe_model, host_ns, overhead_ns, step_table, step_time_ns
from cascade.llm.model import load_llm_calibration, model_times
from cascade.serving.arrivals import Fixed, Uniform
from cascade.serving.described import DescribedStepCost, described_kv
from cascade.serving.kvcache import MODEL_SHAPES, KVConfig
from cascade.serving.scenario import (
    DrawnRequests,
    Scenario,
    draw_workload,
    resolve,
    run_scenario,
    simulate,
)
from cascade.serving.schedulers import Static, Vllm
from cascade.serving.sim import SimulationInvariantError
from cascade.serving.synthetic import synthetic_step_model

LLAMA_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False}
QWEN3_MOE: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936, "sliding_window": None,
    "use_sliding_window": False, "tie_word_embeddings": False}
GPT_OSS: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_local_experts": 32, "experts_per_token": 4, "num_experts_per_tok": 4,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 24,
    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12, "vocab_size": 201088,
    "tie_word_embeddings": False, "quantization_config": {"quant_method": "mxfp4"}}


def _gemm_and_moe_flops(config: dict[str, Any], tokens: int) -> float:
    desc = describe_model(config, tp=1)
    table = step_table(desc, prefill=[(tokens, 0)])
    spec = default_registry().get("SM90_H100")
    keep = np.isin(table["op"], [work.GEMM, work.MOE])
    return float(np.sum(work.work(table, spec).flops[keep] * table["repeat"][keep]))


def test_llama_8b_is_described_with_8b_parameters_and_2_flops_each() -> None:
    desc = describe_model(LLAMA_8B, quant="bf16", tp=1)
    assert desc.head_dim == 128 and desc.n_moe_layers == 0 and set(desc.windows) == {0}
    assert desc.params() == pytest.approx(8.03e9, rel=0.01)
    # one token through every projection, MLP and the LM head: 2 FLOPs per (non-embedding) weight
    flops = _gemm_and_moe_flops(LLAMA_8B, 1)
    assert flops == pytest.approx(2 * (desc.params() - desc.vocab * desc.hidden), rel=0.01)
    assert desc.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2


def test_qwen3_moe_uses_topk_experts_per_token() -> None:
    desc = describe_model(QWEN3_MOE, quant="fp8", tp=4, ep=2)
    assert desc.n_moe_layers == 48 and desc.experts == 128 and desc.topk == 8 and desc.moe_tp == 2
    assert desc.params() == pytest.approx(30.5e9, rel=0.02)
    assert desc.params(active=True) == pytest.approx(3.3e9, rel=0.05)
    flops = _gemm_and_moe_flops(QWEN3_MOE, 1)
    active_no_embedding = describe_model(QWEN3_MOE, tp=1).params(active=True) - desc.vocab * desc.hidden
    assert flops == pytest.approx(2 * active_no_embedding, rel=0.02)
    table = step_table(desc, decode_contexts=np.array([100, 300]))
    moe = table.take(table["op"] == work.MOE)
    assert len(moe) == 1 and moe["repeat"][0] == 48 and moe["tokens"][0] == 2 and moe["ep"][0] == 2
    router = table.take(table["name"] == "router")
    assert router["n"][0] == 128 and router["dtype"][0] == "bf16"
    attn = table.take(table["op"] == work.ATTENTION)
    assert attn["context"][0] == 200 and attn["batch"][0] == 2 and attn["heads"][0] == 8 and attn["kv_heads"][0] == 1


DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "max_position_embeddings": 163840, "tie_word_embeddings": False}


def test_deepseek_v3_is_671b_with_37b_active_and_caches_one_latent() -> None:
    """Multi-head latent attention, 3 dense layers then 58 MoE ones of 256 routed + 1 shared expert."""
    desc = describe_model(DEEPSEEK_V3, quant="fp8-block", tp=8)
    assert desc.mla and desc.n_moe_layers == 58 and desc.experts == 256 and desc.shared_experts == 1
    assert desc.params() == pytest.approx(671e9, rel=0.01)
    assert desc.params(active=True) == pytest.approx(37e9, rel=0.03)
    # the latent (512) and the rotary key (64) per token and layer, whole on every TP rank
    assert desc.kv_bytes_per_token() == 61 * (512 + 64) * 2
    assert describe_model(DEEPSEEK_V3, quant="fp8-block", tp=1).kv_bytes_per_token() == desc.kv_bytes_per_token()
    assert desc.weight_bytes_per_gpu() / 2**30 == pytest.approx(671e9 / 8 / 2**30, rel=0.06)
    table = step_table(desc, prefill=[(512, 0)], decode_contexts=np.full(4, 1000))
    names = set(table["name"].tolist())
    assert {"q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "o_proj", "shared_gate_up_proj"} <= names
    decode = table.take(table["name"] == "attention_decode")
    assert (decode["kv_heads"][0], decode["heads"][0]) == (1, 16)  # 16 query heads a GPU share one latent
    # the one latent read per token: (512 + 64) x 2 bytes, not K and V per head
    spec = default_registry().get("SM90_H200")
    assert float(work.work(decode, spec).bytes[0]) == pytest.approx(4 * 1000 * 576 * 2, rel=0.05)
    # DeepSeek-V2-Lite: no query rank (``q_lora_rank`` null), 2 shared experts, 15.7B parameters
    lite = describe_model({**DEEPSEEK_V3, "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                           "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                           "first_k_dense_replace": 1, "num_hidden_layers": 27, "num_attention_heads": 16,
                           "num_key_value_heads": 16, "q_lora_rank": None, "vocab_size": 102400})
    assert lite.q_lora_rank == 0 and lite.params() == pytest.approx(15.7e9, rel=0.02)
    assert "q_proj" in set(step_table(lite, decode_contexts=np.full(2, 10))["name"].tolist())


def test_a_graphed_step_pays_no_eager_launches_and_blackwell_is_not_slower() -> None:
    """The collector timed block-FP8 GEMMs eagerly: in a CUDA graph a small one costs about its
    per-tensor FP8 kernel; a B200 never decodes DeepSeek-V3 slower than an H200."""
    cal = load_llm_calibration()
    h200, b200 = default_registry().get("SM90_H200"), default_registry().get("SM100_B200")
    gemm = KernelTable.from_rows([{"name": "q", "op": work.GEMM, "m": 64, "n": 4096, "k": 4096, "dtype": "fp8_block",
                                   "repeat": 1}])
    for spec in (h200, b200):
        eager, graphed = model_times(gemm, spec, cal).model_ns[0], model_times(gemm, spec, cal, graphed=True).model_ns[0]
        assert graphed < 0.5 * eager
    desc = describe_model(DEEPSEEK_V3, quant="fp8-block", tp=8)
    ctx = np.full(64, 1500)
    t_h, t_b = (step_time_ns(desc, s, cal, decode_contexts=ctx) for s in (h200, b200))
    assert t_b < t_h


def test_gpt_oss_alternates_sliding_and_full_layers() -> None:
    desc = describe_model(GPT_OSS, quant="bf16", moe_quant="mxfp4", tp=2)
    assert desc.window_counts() == {0: 12, 128: 12}
    assert desc.moe_inter == 2880 and desc.experts == 32 and desc.topk == 4
    assert desc.kv_layers == 12  # the sliding layers hold at most their window
    table = step_table(desc, prefill=[(512, 0), (512, 0), (64, 1000)], decode_contexts=np.full(8, 700))
    attn = table.take(table["op"] == work.ATTENTION)
    assert sorted(set(attn["window"].tolist())) == [0, 128]
    pre = attn.take(attn["phase"] == "prefill")
    # two equal fresh prompts share a row (batch 2); the chunk on a cached prefix is a difference
    assert {(int(b), int(s), int(r)) for b, s, r in zip(pre["batch"], pre["seq"], pre["repeat"], strict=True)} >= {
        (2, 512, 12), (1, 1064, 12), (1, 1000, -12)}
    ar = table.take(table["name"] == "tp_all_reduce")
    assert ar["repeat"][0] == 48 and ar["comm_bytes"][0] == (512 * 2 + 64 + 8) * 2880 * 2
    assert ar["impl"][0] == "vllm_custom_graph"
    head = table.take(table["name"] == "lm_head")
    assert head["m"][0] == 11 and head["n"][0] == 201088 // 2


def test_data_parallel_attention_runs_every_ranks_tokens_through_the_experts() -> None:
    """vllm serve --data-parallel-size 4 --enable-expert-parallel: four engines of one GPU each,
    the experts split over all four, every rank's tokens gathered into them and scattered back."""
    one = describe_model(QWEN3_MOE, quant="fp8", tp=1)
    dp = describe_model(QWEN3_MOE, quant="fp8", tp=1, ep=4, dp=4)
    assert dp.moe_tp == 1 and dp.ep == 4 and "DP 4" in dp.label()
    # a quarter of the experts per GPU; attention and KV cache as one GPU's
    expert_bytes = 48 * 128 * 3 * 2048 * 768  # FP8: a byte a weight
    assert one.weight_bytes_per_gpu() - dp.weight_bytes_per_gpu() == pytest.approx(expert_bytes * 3 / 4, rel=1e-6)
    assert dp.kv_bytes_per_token() == one.kv_bytes_per_token()
    table = step_table(dp, decode_contexts=np.full(16, 500))
    moe = table.take(table["op"] == work.MOE)
    assert moe["tokens"][0] == 4 * 16 and moe["ep"][0] == 4 and moe["tp"][0] == 1
    assert table.take(table["name"] == "router")["m"][0] == 16  # the router runs the rank's own tokens
    comm = {str(n): (str(c), int(r), float(b)) for n, c, r, b in zip(
        table["name"], table["collective"], table["ranks"], table["comm_bytes"], strict=True)
        if n in ("dp_gather", "dp_scatter")}
    assert comm == {"dp_gather": ("all_gather", 4, 64 * 2048 * 2.0), "dp_scatter": ("reduce_scatter", 4, 64 * 2048 * 2.0)}
    assert "tp_all_reduce" not in set(table["name"].tolist())  # tp 1: nothing to reduce inside a rank
    # without expert parallelism the experts' intermediate size is split over all dp x tp GPUs
    assert describe_model(QWEN3_MOE, tp=2, dp=2).moe_tp == 4
    # a dense model's data-parallel ranks are replicas: no gather
    dense = step_table(describe_model(LLAMA_8B, dp=2), decode_contexts=np.full(4, 100))
    assert not {"dp_gather", "dp_scatter"} & set(dense["name"].tolist())
    with pytest.raises(ValidationError) as err:
        describe_model(QWEN3_MOE, tp=2, dp=2, ep=3)
    assert err.value.field == "ep" and "dp x tp = 4" in str(err.value)
    with pytest.raises(ValidationError) as err:
        describe_model(QWEN3_MOE, dp=0)
    assert err.value.field == "dp"


def test_data_parallel_ranks_step_together() -> None:
    """A data-parallel group's step lasts as long as its busiest rank: a prefill on one rank
    stalls the decodes of all; a decode spread over the ranks costs one rank's share plus the
    experts over every token."""
    spec = default_registry().get("SM90_H200")
    cal = load_llm_calibration()
    desc = describe_model(QWEN3_MOE, quant="fp8-block", ep=4, dp=4)
    group = DescribedStepCost(desc, spec, cal, max_tokens=4096, max_seqs=64)
    rank = DescribedStepCost(desc, spec, cal, max_tokens=4096, max_seqs=64)
    rank.ranks = 1  # the same grids, read as one rank's step
    decode = group.mixed_step_ns((), 32, 32 * 1000)
    assert decode == pytest.approx(float(group.decode_steps_ns(np.array([32.0]), np.array([32000.0]))[0]), rel=1e-6)
    # a prefill of 2,048 tokens on one rank: every rank's decodes wait for it
    stalled = group.mixed_step_ns([(2048, 0)], 32, 32 * 1000)
    assert stalled > decode + 0.5 * (rank.mixed_step_ns([(2048, 0)], 8, 8 * 1000) - rank.mixed_step_ns((), 8, 8000))
    # two prefills land on two ranks, not one: cheaper than both on one rank
    two = group.mixed_step_ns([(2048, 0), (2048, 0)], 32, 32 * 1000)
    assert stalled <= two < group.mixed_step_ns([(4096, 0)], 32, 32 * 1000)
    # the busiest rank holds 8 of 32 decodes: less than one engine running all 32 itself
    assert decode < rank.mixed_step_ns((), 32, 32 * 1000)


@pytest.mark.parametrize(("drop", "field"), [("hidden_size", "hidden_size"), ("num_hidden_layers", "num_hidden_layers"),
                                             ("intermediate_size", "intermediate_size")])
def test_a_missing_field_is_named(drop: str, field: str) -> None:
    config = {k: v for k, v in LLAMA_8B.items() if k != drop}
    with pytest.raises(ValidationError) as err:
        describe_model(config)
    assert err.value.field == field


def test_bad_splits_and_unknown_attention_are_refused() -> None:
    with pytest.raises(ValidationError, match="tp"):
        describe_model(LLAMA_8B, tp=3)
    with pytest.raises(ValidationError) as err:  # a latent attention needs its rotary and no-rope sizes
        describe_model({**LLAMA_8B, "kv_lora_rank": 512})
    assert err.value.field == "qk_rope_head_dim"
    with pytest.raises(ValidationError) as err:
        describe_model(LLAMA_8B, quant="fp7")
    assert err.value.field == "quant"


def test_step_time_grows_with_the_batch_and_the_context() -> None:
    reg = default_registry()
    spec, cal = reg.get("h100"), load_llm_calibration()
    desc = describe_model(LLAMA_8B, quant="fp8", tp=1)
    small = step_time_ns(desc, spec, cal, decode_contexts=np.full(8, 1000))
    big = step_time_ns(desc, spec, cal, decode_contexts=np.full(256, 1000))
    long = step_time_ns(desc, spec, cal, decode_contexts=np.full(256, 8000))
    assert small < big < long
    # memory-bound decode of an 8B model in FP8 on an H100: a few milliseconds, not micro or seconds
    assert 2e6 < small < 2e7
    assert float(overhead_ns(desc, spec, 8, 8)) > 0


def test_the_tabulated_step_cost_agrees_with_step_time() -> None:
    spec, cal = default_registry().get("SM90_H100"), load_llm_calibration()
    desc = describe_model(LLAMA_8B, quant="bf16", tp=1)
    cost = DescribedStepCost(desc, spec, cal, max_tokens=2048, max_seqs=64)
    ctx = np.full(48, 1500)
    exact = step_time_ns(desc, spec, cal, prefill=[(512, 0)], decode_contexts=ctx)
    tab = cost.mixed_step_ns([(512, 0)], 48, int(ctx.sum()))
    assert tab == pytest.approx(exact, rel=0.05)
    dec = cost.decode_steps_ns(np.array([48.0, 48.0]), np.array([ctx.sum(), ctx.sum() + 48.0]))
    assert dec[0] == pytest.approx(step_time_ns(desc, spec, cal, decode_contexts=ctx), rel=0.05)
    # synchronous scheduling (vLLM 0.12): the step's host work adds to its GPU time instead of
    # hiding behind it, by exactly the host time where the GPU's is the longer
    sync = DescribedStepCost(desc, spec, cal, max_tokens=2048, max_seqs=64, async_scheduling=False)
    slow = step_time_ns(desc, spec, cal, prefill=[(512, 0)], decode_contexts=ctx, async_scheduling=False)
    assert sync.mixed_step_ns([(512, 0)], 48, int(ctx.sum())) == pytest.approx(slow, rel=0.05)
    assert slow - exact == pytest.approx(float(host_ns(49)), rel=1e-6)
    one = sync.decode_steps_ns(np.array([1.0]), np.array([100.0]))[0]
    assert one > cost.decode_steps_ns(np.array([1.0]), np.array([100.0]))[0] >= float(host_ns(1))
    assert dec[1] >= dec[0]
    kv = described_kv(desc, spec)
    tokens = kv.num_blocks() * kv.block_size
    # 80 GB x 0.9 - 16 GB of weights - activations, at 128 KiB a token: a few hundred thousand
    assert 300_000 < tokens < 500_000


def test_a_prefill_step_of_more_tokens_never_takes_less_time_on_the_shipped_kernels() -> None:
    """Qwen3-32B on an H100 from 512 to 8,192 prompt tokens a step, TP 1-8, on either vLLM
    collector's kernels: more tokens never run more than 8% faster (before measured spikes were
    left out of the surfaces, 4,608 tokens at TP 8 on the 0.14 kernels took 1.23x the time of
    more; a kernel's tile steps still leave a few percent)."""
    config = json.loads(resources.files("cascade.serving").joinpath("model_configs/qwen3-32b.json").read_text())
    spec, cal = default_registry().get("SM90_H100"), load_llm_calibration()
    tokens = np.arange(512, 8193, 128)
    for tp in (1, 2, 4, 8):
        desc = describe_model(config, quant="bf16", tp=tp)
        for collector in ("vllm-0.14", "vllm-0.24"):
            cost = DescribedStepCost(desc, spec, cal, max_tokens=8192, max_seqs=256, collector=collector)
            t = np.array([cost.mixed_step_ns([(int(n), 0)], 0, 0) for n in tokens])
            worst = np.maximum.accumulate(t) / t
            assert worst.max() <= 1.08, (tp, collector, int(tokens[int(np.argmax(worst))]), float(worst.max()))


def _in_flight_max(arrival: np.ndarray, finished: np.ndarray) -> int:
    times = np.concatenate([finished, arrival])
    delta = np.concatenate([-np.ones(len(finished)), np.ones(len(arrival))])
    order = np.lexsort((delta, times))  # a finish frees its client before the next send
    return int(np.max(np.cumsum(delta[order])))


@pytest.mark.parametrize("start", ["together", "staggered"])
@pytest.mark.parametrize("scheduler", [Vllm(max_num_seqs=64, max_num_batched_tokens=2048), Static(batch_size=4)])
@pytest.mark.parametrize("n", [1, 3, 16])
def test_closed_loop_keeps_at_most_n_in_flight_and_finishes_all(n: int, scheduler: Any, start: str) -> None:
    sc = Scenario(concurrency=n, n_requests=60, prompt=Uniform(lo=16, hi=600), output=Uniform(lo=1, hi=80),
                  scheduler=scheduler, seed=n, warmup_requests=0, clients_start=start)  # type: ignore[arg-type]
    rs = resolve(sc)
    kv = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=80 << 30)
    out = simulate(rs, synthetic_step_model(), kv)
    assert np.all(out.finished_ns >= 0)
    assert np.array_equal(out.tokens_emitted, out.output_tokens)
    assert _in_flight_max(out.arrival_ns, out.finished_ns) == min(n, 60)
    # together: the first wave within the clients' own gaps of milliseconds, as a benchmark sends
    # it; staggered: spread over one request's expected time (each client at its own phase).
    # Every later request is sent after an earlier one finished, a client's gap later
    first = out.arrival_ns[:n]
    assert np.all(np.diff(first) >= 0)
    if start == "together":
        assert first[-1] < 50e6
    else:
        assert first[0] < 50e6 and (n == 1 or (np.all(np.diff(first) > 0) and first[-1] > 50e6))
    ends = np.sort(out.finished_ns)
    for t in out.arrival_ns[n:]:
        before = ends[ends <= t]
        assert len(before) and t - before[-1] < 1e9


def test_closed_loop_first_wave_is_in_time_order_and_disorder_is_refused() -> None:
    # the first wave's client gaps are drawn at random; the simulation takes arrivals in order,
    # so they are sorted (unsorted, a request arriving "in the past" once cut a fast-forwarded
    # plan to nothing: IndexError in the serving protocol)
    sc = Scenario(concurrency=256, n_requests=512, prompt=Fixed(tokens=64), output=Fixed(tokens=8))
    wl = draw_workload(resolve(sc))
    assert np.all(np.diff(wl.arrived_at[:256]) >= 0) and wl.client_gap_s is not None
    kv = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=80 << 30)
    res = simulate(resolve(sc), synthetic_step_model(), kv, workload=wl)
    assert np.all(res.finished_ns > 0) and np.array_equal(res.tokens_emitted, res.output_tokens)
    disordered = wl.arrived_at.copy()
    disordered[:256] = disordered[:256][::-1]
    shuffled = DrawnRequests(disordered, wl.prompt_tokens, wl.output_tokens, wl.client_gap_s)
    with pytest.raises(SimulationInvariantError, match="must not decrease"):
        simulate(resolve(sc), synthetic_step_model(), kv, workload=shuffled)


def test_the_warm_up_runs_to_its_end_then_the_measured_clients_start_together() -> None:
    """A closed loop's warm-up as aiperf and `vllm bench serve` run it: every warm-up request
    finishes, then the measured clients send together to an idle engine, so the measured run
    is the same as a run without a warm-up, shifted to the instant the warm-up drained."""
    kv = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=80 << 30)
    base = Scenario(concurrency=8, n_requests=40, prompt=Fixed(tokens=512), output=Fixed(tokens=16))
    n = 56  # default: 2 x concurrency warm-up requests first, then the 40 measured

    def drawn(count: int) -> DrawnRequests:  # no client gaps: the two runs' sends comparable exactly
        return DrawnRequests(np.zeros(count), np.full(count, 512), np.full(count, 16), np.zeros(count))

    fresh = simulate(resolve(msgspec.structs.replace(base, warmup_requests=0)), synthetic_step_model(), kv,
                     workload=drawn(40))
    measured = simulate(resolve(base), synthetic_step_model(), kv, workload=drawn(n))
    assert len(measured.arrival_ns) == 40
    drain = float(measured.arrival_ns[0])
    # the first measured wave: every client at the instant the warm-up's last request finished,
    # two closed-loop rounds of the warm-up after the start
    assert np.all(measured.arrival_ns[:8] == drain) and drain >= 2 * float(np.max(fresh.finished_ns[:8]))
    ns = {"rtol": 0, "atol": 1.0}  # to the nanosecond (the times are absolute floats)
    np.testing.assert_allclose(measured.arrival_ns - drain, fresh.arrival_ns, **ns)
    np.testing.assert_allclose(measured.first_token_ns - drain, fresh.first_token_ns, **ns)
    # every measured request's 15 gaps, none of the warm-up's
    assert len(measured.itl_ns) == 40 * 15
    np.testing.assert_allclose(measured.token_times_ns(0) - drain, fresh.token_times_ns(0), **ns)
    res = run_scenario(base, synthetic_step_model(), kv)
    assert res.completed == 40 and res.scenario["warmup_requests"] == 16  # the answer says what it left out
    # the replicas' busy time and KV area are over the whole run they were accumulated over
    assert 0 < res.replicas[0].busy_fraction <= 1.0 and 0 < res.kv_cache.mean_utilisation <= 1.0
    # the figures are the measured requests' alone, their first wave (all 8 prompts at once) included
    ttft = (fresh.first_token_ns - fresh.arrival_ns) / 1e6
    np.testing.assert_allclose((measured.first_token_ns - measured.arrival_ns) / 1e6, ttft, rtol=1e-9)
    # a warm-up smaller than one wave: those requests alone, then every client at once
    small = simulate(resolve(msgspec.structs.replace(base, warmup_requests=3)), synthetic_step_model(), kv,
                     workload=drawn(43))
    assert np.all(small.arrival_ns[:8] == small.arrival_ns[0]) and small.arrival_ns[0] > 0
    np.testing.assert_allclose(small.first_token_ns - small.arrival_ns[0], fresh.first_token_ns, **ns)
    # behind a router of two replicas the warm-up drains on both before any measured request is sent
    two = msgspec.structs.replace(base, replicas=2)
    fresh2 = simulate(resolve(msgspec.structs.replace(two, warmup_requests=0)), synthetic_step_model(), kv,
                      workload=drawn(40))
    both = simulate(resolve(two), synthetic_step_model(), kv, workload=drawn(n))
    drain2 = float(both.arrival_ns[0])
    assert np.all(both.arrival_ns[:8] == drain2) and set(both.replica.tolist()) == {0, 1}
    np.testing.assert_allclose(both.first_token_ns - drain2, fresh2.first_token_ns, **ns)
    # an open loop's warm-up is its stream's first requests (nothing to drain: arrivals are fixed)
    open_loop = Scenario(n_requests=40, arrival={"kind": "constant", "rate": 50.0}, prompt=Fixed(tokens=512),
                         output=Fixed(tokens=16), warmup_requests=10)
    whole = simulate(resolve(msgspec.structs.replace(open_loop, warmup_requests=0, n_requests=50)),
                     synthetic_step_model(), kv)
    part = simulate(resolve(open_loop), synthetic_step_model(), kv)
    assert np.array_equal(part.arrival_ns, whole.arrival_ns[10:])
    assert np.array_equal(part.first_token_ns, whole.first_token_ns[10:])
    with pytest.raises(ValidationError) as err:
        run_scenario(Scenario(n_requests=None, duration_s=0.5, arrival={"kind": "constant", "rate": 4.0},
                              warmup_requests=50), synthetic_step_model(), kv)
    assert err.value.field == "warmup_requests" and "leave none" in str(err.value)


def test_closed_loop_defaults_to_ten_requests_per_client() -> None:
    kv = KVConfig(model=MODEL_SHAPES["llama-2-7b"], gpu_memory_bytes=80 << 30)
    res = run_scenario(Scenario(concurrency=4, prompt=Fixed(tokens=64), output=Fixed(tokens=8)),
                       synthetic_step_model(), kv)
    assert res.completed == 40
    with pytest.raises(ValidationError) as err:
        resolve(Scenario(concurrency=4, duration_s=10.0))
    assert err.value.field == "duration_s"
