"""Synthetic step records from a known law (examples, the CLI's --synthetic, tests).

The default law is a rough Llama-2-7B-on-one-H100 shape: a fixed ~6 ms per step
(reading 13.5 GB of weights), ~18 us per prefill token, ~25 us per decode
sequence and ~160 ns per cached token a decode sequence attends to (reading
its KV); ~0.3-0.4 ms of host time per step. It is not a measurement.
"""

from __future__ import annotations

import msgspec
import numpy as np

from cascade.serving.stepmodel import Law, StepRecord, StepTimeModel


class SyntheticLaw(msgspec.Struct, frozen=True, kw_only=True):
    """The laws synthetic records are drawn from."""

    prefill_gpu: Law = Law(intercept_ns=6.0e6, per_token_ns=1.8e4, per_attention_ns=0.6)
    prefill_host: Law = Law(intercept_ns=4.0e5, per_token_ns=50.0)
    decode_gpu: Law = Law(intercept_ns=6.0e6, per_token_ns=2.5e4, per_attention_ns=160.0)
    decode_host: Law = Law(intercept_ns=3.0e5, per_token_ns=2.0e3)


def synthetic_records(law: SyntheticLaw | None = None, *, prefill_tokens: tuple[int, ...] = (
        16, 64, 256, 1024, 2048, 4096), batches: tuple[int, ...] = (1, 4, 16, 64, 128, 256),
        contexts: tuple[int, ...] = (16, 128, 512, 1024, 2048, 4096),
        noise: float = 0.0, seed: int = 0) -> list[StepRecord]:
    """Records on a grid of shapes; ``noise`` is a relative Gaussian error."""
    law = law or SyntheticLaw()
    rng = np.random.default_rng(seed)

    def jitter(x: float) -> float:
        return max(0.0, x * (1.0 + noise * float(rng.standard_normal()))) if noise else x

    out = [StepRecord(kind="prefill", tokens=p, batch=1, context=p,
                      host_ns=jitter(law.prefill_host.value(p, p * p)),
                      gpu_ns=jitter(law.prefill_gpu.value(p, p * p))) for p in prefill_tokens]
    for b in batches:
        for c in contexts:
            out.append(StepRecord(kind="decode", tokens=b, batch=b, context=c,
                                  host_ns=jitter(law.decode_host.value(b, b * c)),
                                  gpu_ns=jitter(law.decode_gpu.value(b, b * c))))
    return out


def synthetic_step_model(law: SyntheticLaw | None = None) -> StepTimeModel:
    """A StepTimeModel fitted on noise-free synthetic records."""
    return StepTimeModel.fit(synthetic_records(law), source="synthetic (llama-2-7b/H100-like law)")
