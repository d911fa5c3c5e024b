"""Request estimates of a described model: a config.json timed by the LLM kernel model at each
step's own shape (:class:`cascade.serving.description.DescribedServing`), no trace, no fit.

:func:`estimate_described` answers what :func:`cascade.runs.estimates.estimate_request` answers
for a finished simulation, one request alone on an idle engine, in the same
:class:`~cascade.runs.estimates.RequestEstimate`: the prompt prefilled in chunks of at most the
token budget (the last chunk yields the first token), then one single-sequence decode step per
further output token, the step yielding token ``i + 1`` at context ``prompt + i`` (the serving
simulator's convention). Every step is the kernel model's at its shape, so nothing is
extrapolated from a fitted range (``extrapolated`` false, ``method`` ``kernel-model``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascade.errors import ValidationError
from cascade.runs.estimates import DEFAULT_TOKEN_BUDGET, ESTIMATE_MEMO, RequestEstimate
from cascade.serving.description import DescribedServing


def estimate_described(served: DescribedServing, prompt_tokens: int, output_tokens: int, *,
                       token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate:
    """Timings of one request alone on an idle engine of a described model (see the module)."""
    if prompt_tokens < 1:
        raise ValidationError("must be >= 1", field="prompt_tokens")
    if output_tokens < 1:
        raise ValidationError("must be >= 1", field="max_tokens")
    if token_budget < 1:
        raise ValidationError("must be >= 1", field="token_budget")
    cost = served.cost
    ttft_ns = 0.0
    done = chunks = 0
    while done < prompt_tokens:
        take = min(token_budget, prompt_tokens - done)
        ttft_ns += cost.mixed_step_ns([(take, done)], 0, 0)
        done += take
        chunks += 1
    itl_ns = np.zeros(0)
    if output_tokens > 1:
        contexts = prompt_tokens + np.arange(1, output_tokens, dtype=float)
        itl_ns = cost.decode_steps_ns(np.ones(len(contexts)), contexts)
    ttft_ms = ttft_ns / 1e6
    e2e_ms = ttft_ms + float(np.sum(itl_ns)) / 1e6
    tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1) if output_tokens > 1 else 0.0
    return RequestEstimate(prompt_tokens=prompt_tokens, output_tokens=output_tokens, ttft_ms=ttft_ms,
                           tpot_ms=tpot_ms, itl_ms=(itl_ns / 1e6).tolist(), e2e_ms=e2e_ms,
                           prefill_steps=chunks, extrapolated=False, extrapolation={}, method="kernel-model")


@dataclass
class DescribedStepModel:
    """A described model ready to answer requests: its step-time source and basis, the estimates
    made so far (pure per request shape) and the callers' memo of encoded answers.

    :meth:`estimate` may run in worker threads at once: the step-time source tabulates its
    parts lazily, so one lock keeps two threads from timing the same part twice."""

    served: DescribedServing
    answers: dict[Any, Any] = field(default_factory=dict)
    """Callers' memo of encoded answers per request shape (the api's /v1 fragments)."""
    _memo: dict[tuple[int, int, int], RequestEstimate] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def estimate(self, prompt_tokens: int, output_tokens: int, *,
                 token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate:
        """:func:`estimate_described`, memoised per shape."""
        key = (prompt_tokens, output_tokens, token_budget)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        with self._lock:
            est = estimate_described(self.served, prompt_tokens, output_tokens, token_budget=token_budget)
            if len(self._memo) >= ESTIMATE_MEMO:
                self._memo.pop(next(iter(self._memo)))
            self._memo[key] = est
        return est
