"""One request on an idle engine of a described model (:mod:`cascade.runs.described`), and what a
checkpoint serves in and takes on a GPU (:mod:`cascade.serving.description`)."""

from __future__ import annotations

import functools

import pytest

from cascade.errors import ValidationError
from cascade.gpus import default_registry
from cascade.runs.described import DescribedStepModel, estimate_described
from cascade.serving.description import (
    EXAMPLE_CONFIGS,
    DescribedServing,
    checkpoint_quant,
    describe_serving,
    described_footprint,
    example_config,
)


@functools.cache
def _llama_h100() -> DescribedServing:
    return describe_serving(example_config("llama-3.1-8b"), default_registry().get("SM90_H100"))


def test_checkpoint_quant_reads_quantization_config() -> None:
    assert checkpoint_quant(example_config("gpt-oss-120b")) == ("bf16", "mxfp4")
    assert checkpoint_quant(example_config("llama-3.1-8b")) == ("bf16", None)
    assert checkpoint_quant({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}) == (
        "fp8-block", None)
    assert checkpoint_quant({"quantization_config": {"quant_method": "fp8"}}) == ("fp8", None)
    assert checkpoint_quant({"quantization_config": {"quant_method": "awq", "bits": 4}}) == ("int4", None)
    assert checkpoint_quant({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}) == (
        "fp4", None)


def test_footprint_fits_by_tp() -> None:
    h100 = default_registry().get("SM90_H100")
    qwen = example_config("qwen3-32b")
    one, two = (described_footprint(qwen, h100, tp=tp) for tp in (1, 2))
    assert one.weight_bytes_per_gpu > 1.9 * two.weight_bytes_per_gpu
    assert one.context_tokens == 40_960
    assert 0 < one.kv_cache_tokens < 40_960 and not one.fits  # vLLM would refuse its default window
    assert two.fits
    gpt_bf16 = described_footprint(example_config("gpt-oss-120b"), h100)
    assert gpt_bf16.kv_cache_tokens == 0 and not gpt_bf16.fits
    with pytest.raises(ValidationError, match="tp=3"):
        described_footprint(qwen, h100, tp=3)


def test_estimate_chunks_the_prompt_and_grows_with_the_output() -> None:
    served = _llama_h100()
    short = estimate_described(served, 100, 8)
    assert short.prefill_steps == 1 and len(short.itl_ms) == 7 and short.method == "kernel-model"
    assert not short.extrapolated and short.extrapolation == {}
    assert short.e2e_ms == pytest.approx(short.ttft_ms + sum(short.itl_ms))
    assert short.tpot_ms == pytest.approx(sum(short.itl_ms) / 7)
    long_ = estimate_described(served, 20_000, 8)
    assert long_.prefill_steps == 3 and long_.ttft_ms > short.ttft_ms
    assert estimate_described(served, 20_000, 8, token_budget=4096).prefill_steps == 5
    assert estimate_described(served, 100, 64).e2e_ms > short.e2e_ms
    # every gap: a decode step at a growing context
    gaps = estimate_described(served, 100_000, 64).itl_ms
    assert gaps[-1] >= gaps[0] > 0
    with pytest.raises(ValidationError):
        estimate_described(served, 0, 4)


def test_step_model_memoises_estimates() -> None:
    dsm = DescribedStepModel(served=_llama_h100())
    assert dsm.estimate(64, 4) is dsm.estimate(64, 4)
    assert dsm.estimate(64, 4) is not dsm.estimate(64, 4, token_budget=16)


@pytest.mark.slow  # 72 whole simulations (about 7 s): `make test` runs it, `make test-unit` leaves it out
@pytest.mark.parametrize("name", sorted(EXAMPLE_CONFIGS))
def test_every_bundled_model_on_every_kind_of_board_answers_or_says_why(name: str) -> None:
    """No run fails: each bundled model on a Hopper, a Blackwell and an Ada board, at TP 1 and 8, in
    the checkpoint's precision, FP8 and FP4, either serves 64 closed-loop clients (TTFT and TPOT
    positive, TTFT below the whole request) or is refused with a ValidationError naming the field
    (a model that does not fit, FP4 on a GPU without it is run weight-only)."""
    from cascade.serving.arrivals import Fixed
    from cascade.serving.requests import for_gpu, scheduler_limits
    from cascade.serving.scenario import Scenario, run_scenario
    from cascade.serving.schedulers import Vllm

    reg = default_registry()
    served_any = False
    for gpu in ("SM90_H200", "SM100_B200", "SM89_L40S"):
        spec = reg.get(gpu)
        for tp in (1, 8):
            for quant in (None, "fp8", "fp4"):
                sc = for_gpu(Scenario(concurrency=64, n_requests=64, prompt=Fixed(tokens=1024), output=Fixed(tokens=64),
                                      scheduler=Vllm()), spec)
                tokens, seqs = scheduler_limits(sc)
                try:
                    served = describe_serving(example_config(name), spec, quant=quant, tp=tp,
                                              max_num_batched_tokens=tokens, max_num_seqs=seqs)
                    res = run_scenario(sc, served.cost, served.kv)
                except ValidationError as exc:
                    assert exc.field, (gpu, tp, quant, str(exc))
                    continue
                served_any = True
                assert res.completed == 64 and res.tpot_ms.mean > 0 and 0 < res.ttft_ms.mean < res.e2el_ms.mean, (
                    gpu, tp, quant)
    assert served_any
