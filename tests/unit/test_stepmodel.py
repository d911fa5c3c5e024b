"""Step-time model: fitting, degenerate calibration, extrapolation labels, kernel re-shaping."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable
from cascade.serving.reshape import reshape_kernels, roofline_predictor
from cascade.serving.stepmodel import (
    KernelExtrapolator,
    Law,
    StepRecord,
    StepTimeModel,
    records_from_table,
)
from cascade.serving.synthetic import SyntheticLaw, synthetic_records


def test_fit_recovers_known_coefficients_exactly() -> None:
    law = SyntheticLaw(
        prefill_gpu=Law(intercept_ns=2.0e6, per_token_ns=1.5e4, per_attention_ns=0.8),
        prefill_host=Law(intercept_ns=3.0e5, per_token_ns=40.0),
        decode_gpu=Law(intercept_ns=4.0e6, per_token_ns=3.0e4, per_attention_ns=120.0),
        decode_host=Law(intercept_ns=2.0e5, per_token_ns=1.0e3),
    )
    m = StepTimeModel.fit(synthetic_records(law))
    for got, want in ((m.prefill_gpu, law.prefill_gpu), (m.decode_gpu, law.decode_gpu),
                      (m.prefill_host, law.prefill_host), (m.decode_host, law.decode_host)):
        assert got.intercept_ns == pytest.approx(want.intercept_ns, rel=1e-6)
        assert got.per_token_ns == pytest.approx(want.per_token_ns, rel=1e-6, abs=1e-6)
        assert got.per_attention_ns == pytest.approx(want.per_attention_ns, rel=1e-6, abs=1e-9)
    assert m.calibration.prefill_tokens_min == 16 and m.calibration.prefill_tokens_max == 4096
    assert m.calibration.decode_batch_max == 256


def test_fit_with_noise_is_close_and_coefficients_non_negative() -> None:
    law = SyntheticLaw()
    m = StepTimeModel.fit(synthetic_records(law, noise=0.01, seed=3))
    assert m.decode_gpu.per_attention_ns == pytest.approx(160.0, rel=0.05)
    assert m.decode_gpu.intercept_ns == pytest.approx(6.0e6, rel=0.05)
    for p in (64, 1024, 4096):
        want = law.prefill_gpu.value(p, p * p)
        assert m.predict_prefill(p).gpu_ns == pytest.approx(want, rel=0.05)
    for lw in (m.prefill_gpu, m.prefill_host, m.decode_gpu, m.decode_host):
        assert min(lw.intercept_ns, lw.per_token_ns, lw.per_attention_ns) >= 0


def _six_token_records() -> list[StepRecord]:
    """Calibrated like the opt-125m sample: one 6-token prefill, decode contexts 7..37, batch 1."""
    recs = [StepRecord(kind="prefill", tokens=6, batch=1, context=6, host_ns=9.0e4, gpu_ns=1.2e6)]
    for c in range(7, 38):
        recs.append(StepRecord(kind="decode", tokens=1, batch=1, context=c,
                               host_ns=5.0e4, gpu_ns=1.0e6 + 300.0 * c))
    return recs


def test_degenerate_calibration_falls_back_and_flags_2000_token_prompt() -> None:
    m = StepTimeModel.fit(_six_token_records())
    assert m.decode_gpu.terms == ("intercept", "attention")
    assert m.decode_gpu.per_attention_ns == pytest.approx(300.0)
    assert m.prefill_gpu.method == "anchored-on-decode"
    # reproduces the calibration point exactly
    assert m.predict_prefill(6).gpu_ns == pytest.approx(1.2e6)
    assert not m.predict_prefill(6).extrapolated
    est = m.predict_prefill(2000)
    assert est.extrapolated
    far = est.extrapolation["prefill_tokens"]
    assert far.high == 6 and far.beyond == 1994 and far.ratio == pytest.approx(2000 / 6)
    assert est.gpu_ns > m.predict_prefill(6).gpu_ns * 10
    assert est.total_ns == pytest.approx(est.host_ns + est.gpu_ns)
    dec = m.predict_decode(8, 20)
    assert dec.extrapolated and set(dec.extrapolation) == {"decode_batch"}
    assert not m.predict_decode(1, 20).extrapolated
    assert set(m.predict_decode(1, 100).extrapolation) == {"decode_context"}


def test_step_model_json_round_trip() -> None:
    m = StepTimeModel.fit(_six_token_records(), source="sim-1")
    back = StepTimeModel.from_json(m.to_json())
    assert back == m
    with pytest.raises(ValidationError) as err:
        StepTimeModel.from_json(b'{"prefill_gpu": 3}', source="model.json")
    assert err.value.field == "model.json"


def test_fit_needs_both_kinds() -> None:
    with pytest.raises(ValidationError) as err:
        StepTimeModel.fit([r for r in _six_token_records() if r.kind == "prefill"])
    assert err.value.field == "records"


def test_prediction_input_validation() -> None:
    m = StepTimeModel.fit(_six_token_records())
    with pytest.raises(ValidationError) as err:
        m.predict_decode(0, 10)
    assert err.value.field == "batch"


def _step_kernels(kind: str, tokens: int, context: int) -> KernelTable:
    """One transformer layer's kernels of a step, fp16, d_model 768."""
    d = 768
    rows = [
        {"name": "gemm_qkv", "op": "linear", "m": tokens, "n": 3 * d, "k": d, "dtype": "fp16",
         "flops": 2.0 * tokens * 3 * d * d, "bytes": 2.0 * (3 * d * d + tokens * d + tokens * 3 * d),
         "duration_ns": 20_000.0},
        {"name": "flash_fwd", "op": "attention", "batch": 12, "m": tokens, "n": context, "k": 64,
         "dtype": "fp16", "flops": 4.0 * tokens * context * d,
         "bytes": 2.0 * 2 * context * d, "duration_ns": 8_000.0},
        {"name": "layernorm", "op": "layernorm", "m": tokens, "dtype": "fp16",
         "flops": 8.0 * tokens * d, "bytes": 4.0 * tokens * d, "duration_ns": 3_000.0},
        {"name": "memcpy_like", "op": "", "duration_ns": 1_000.0},
    ]
    for r in rows:
        r.update(step=0, step_kind=kind, step_tokens=tokens, step_context=context)
    return KernelTable.from_rows(rows)


def test_reshape_kernels_scales_by_op_kind() -> None:
    src = _step_kernels("prefill", 6, 6)
    out = reshape_kernels(src, tokens=600, context=600, batch=1)
    d = 768
    assert out["m"][0] == 600
    assert out["flops"][0] == pytest.approx(src["flops"][0] * 100)
    weights = 2.0 * 3 * d * d
    assert out["bytes"][0] == pytest.approx(weights + (src["bytes"][0] - weights) * 100)
    assert out["flops"][1] == pytest.approx(src["flops"][1] * 100 * 100)
    assert out["bytes"][1] == pytest.approx(src["bytes"][1] * 100)
    assert out["flops"][2] == pytest.approx(src["flops"][2] * 100)
    assert out["duration_ns"][3] == 1_000.0  # unknown op: unchanged
    assert math.isnan(out["duration_ns"][0]) and out["source_duration_ns"][0] == 20_000.0
    assert list(out["step_tokens"][:3]) == [600, 600, 600]
    # decode: 1 seq at context 20 -> 8 seqs at context 20: attention bytes x8 (KV reads)
    dec = reshape_kernels(_step_kernels("decode", 1, 20), tokens=8, context=20, batch=8)
    assert dec["bytes"][1] == pytest.approx(_step_kernels("decode", 1, 20)["bytes"][1] * 8)
    assert dec["batch"][1] == 96 and dec["m"][1] == 1
    with pytest.raises(ValidationError):
        reshape_kernels(src, tokens=0, context=1, batch=1)


def test_kernel_model_extrapolation_is_labelled_and_continuous() -> None:
    m = StepTimeModel.fit(_six_token_records())
    ref = KernelTable.concat([_step_kernels("prefill", 6, 6), _step_kernels("decode", 1, 37)])
    step = np.zeros(len(ref), dtype=np.int64)
    step[4:] = 1
    ref["step"] = step
    ex = KernelExtrapolator.from_table(ref, roofline_predictor(100e12, 2e12, launch_ns=2000))
    fit_only = m.predict_prefill(2000)
    kern = m.predict_prefill(2000, extrapolator=ex)
    assert kern.method == "kernel-model" and kern.extrapolated
    assert kern.extrapolation == fit_only.extrapolation
    assert kern.gpu_ns > m.predict_prefill(6).gpu_ns
    # just past the edge the kernel-model answer starts from the fitted value
    near = m.predict_prefill(7, extrapolator=ex)
    assert near.gpu_ns == pytest.approx(m.predict_prefill(6).gpu_ns, rel=0.2)
    assert m.predict_prefill(6, extrapolator=ex).method == "fit"
    dec = m.predict_decode(64, 30, extrapolator=ex)
    assert dec.method == "kernel-model" and "decode_batch" in dec.extrapolation


def test_records_from_table_sums_per_step() -> None:
    t = KernelTable.from_rows([
        {"name": "a", "step": 0, "step_kind": "prefill", "step_tokens": 6, "step_context": 6,
         "duration_ns": 100.0, "host_launch_ns": 0.0, "start_ns": 50.0},
        {"name": "b", "step": 0, "step_kind": "prefill", "step_tokens": 6, "step_context": 6,
         "duration_ns": 200.0, "host_launch_ns": 10.0, "start_ns": 150.0},
        {"name": "c", "step": 1, "step_kind": "decode", "step_tokens": 4, "step_context": 7,
         "duration_ns": 30.0, "host_launch_ns": 400.0, "start_ns": 420.0},
        {"name": "d", "step": -1, "duration_ns": 99.0},
    ])
    recs = records_from_table(t)
    assert len(recs) == 2
    assert recs[0].kind == "prefill" and recs[0].gpu_ns == 300.0 and recs[0].host_ns == 50.0
    assert recs[1].kind == "decode" and recs[1].batch == 4 and recs[1].context == 7
    assert recs[1].host_ns == 20.0
    assert msgspec.json.decode(msgspec.json.encode(recs), type=list[StepRecord]) == recs
    with pytest.raises(ValidationError) as err:
        records_from_table(KernelTable.from_rows([{"name": "x", "duration_ns": 1.0}]))
    assert err.value.field == "step"
