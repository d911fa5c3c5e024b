"""The answers of ``/v1`` completions from request estimates: the model being served (a finished
sim's step model, :class:`TracedServed`, or a described model's, :class:`DescribedServed`), the
``metrics`` and ``cascade`` objects (memoised per request shape on the model), the whole answer,
the chunks of a streamed one, and the model cards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from cascade.calibration.accuracy import AccuracyEstimate
from cascade.gpus import default_registry
from cascade.runs.described import DescribedStepModel
from cascade.runs.estimates import DEFAULT_TOKEN_BUDGET, RequestEstimate, SimStepModel
from cascade.serving.description import ServingBasis
from services.api.described_models import DescribedEntry
from services.api.schemas.v1 import (
    AssistantMessage,
    CascadeInfo,
    CascadeModelInfo,
    ChatChoiceBody,
    ChatCompletionBody,
    ChunkChoice,
    ChunkDelta,
    CompletionBody,
    CompletionChoiceBody,
    DescribedModelInfo,
    KernelProvenance,
    MetricsBody,
    ModelCard,
    StreamChunk,
    TokenTime,
    UsageBody,
)
from services.api.sim_models import ModelEntry

#: Answers whose ``metrics`` / ``cascade`` objects one step model keeps.
FRAGMENT_MEMO = 4096


def model_card(e: ModelEntry | DescribedEntry) -> ModelCard:
    """The OpenAI model object of one entry (plus ``max_model_len``, ``cascade_source`` and
    ``cascade``)."""
    if isinstance(e, DescribedEntry):
        fp = e.footprint
        info = DescribedModelInfo(config=e.ref.config, gpu=e.spec.id, tp=e.ref.tp, ep=e.ref.ep, quant=e.quant,
                                  moe_quant=e.moe_quant, weights_gib_per_gpu=e.weights_gib_per_gpu,
                                  kv_cache_tokens=fp.kv_cache_tokens, context_tokens=fp.context_tokens)
        return ModelCard(id=e.id, object="model", created=0, owned_by="cascade-described",
                         max_model_len=e.context_length, cascade_source="described",
                         cascade=CascadeModelInfo(trace="", config=e.spec.id, sim="", run="", source="described",
                                                  described=info))
    return ModelCard(id=e.id, object="model", created=e.created, owned_by="cascade", max_model_len=e.context_length,
                     cascade=CascadeModelInfo(trace=e.trace_id, config=e.config, sim=e.sim.id, run=e.run.id))


class Served(Protocol):
    """A model answering one request: its id, estimates and ``cascade`` objects."""

    @property
    def id(self) -> str: ...

    @property
    def answers(self) -> dict[Any, Any]:
        """Memo of answer fragments per request shape, as long-lived as the model's estimates."""
        ...

    def estimate(self, prompt_tokens: int, output_tokens: int, *,
                 token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate: ...

    def cascade(self, est: RequestEstimate, approximate: bool, token_budget: int) -> CascadeInfo: ...


@dataclass(frozen=True, slots=True)
class TracedServed:
    """A finished sim's step model."""

    entry: ModelEntry
    sm: SimStepModel

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def answers(self) -> dict[Any, Any]:
        return self.sm.answers

    def estimate(self, prompt_tokens: int, output_tokens: int, *,
                 token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate:
        return self.sm.estimate(prompt_tokens, output_tokens, token_budget=token_budget)

    def cascade(self, est: RequestEstimate, approximate: bool, token_budget: int) -> CascadeInfo:
        return cascade_of(self.entry, est, self.sm, approximate, token_budget)


@dataclass(frozen=True, slots=True)
class DescribedServed:
    """A described model's step-time source."""

    entry: DescribedEntry
    dsm: DescribedStepModel

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def answers(self) -> dict[Any, Any]:
        return self.dsm.answers

    def estimate(self, prompt_tokens: int, output_tokens: int, *,
                 token_budget: int = DEFAULT_TOKEN_BUDGET) -> RequestEstimate:
        return self.dsm.estimate(prompt_tokens, output_tokens, token_budget=token_budget)

    def cascade(self, est: RequestEstimate, approximate: bool, token_budget: int) -> CascadeInfo:
        return described_cascade_of(self.entry, est, self.dsm.served.basis, approximate, token_budget)


def metrics_of(est: RequestEstimate, *, full: bool = False) -> MetricsBody:
    """The ``metrics`` object of one estimate: the inter-token gaps' mean, count, min, p50, p90,
    p99 and max (0 when there are none), and ``itl_ms`` itself only when ``full``."""
    itl = est.itl_ms
    lo = p50 = p90 = p99 = hi = 0.0
    if itl:
        arr = np.asarray(itl, dtype=float)
        p50, p90, p99 = (float(v) for v in np.percentile(arr, [50, 90, 99]))
        lo, hi = float(arr.min()), float(arr.max())
    return MetricsBody(
        ttft_ms=est.ttft_ms, tpot_ms=est.tpot_ms, itl_mean_ms=(sum(itl) / len(itl)) if itl else 0.0,
        itl_count=len(itl), itl_min_ms=lo, itl_p50_ms=p50, itl_p90_ms=p90, itl_p99_ms=p99, itl_max_ms=hi,
        e2e_ms=est.e2e_ms, queue_ms=est.queue_ms, itl_ms=itl if full else None)


def cascade_of(entry: ModelEntry, est: RequestEstimate, sm: SimStepModel, approximate: bool,
               token_budget: int) -> CascadeInfo:
    """The ``cascade`` object of one estimate of a finished sim."""
    spec = default_registry().resolve(entry.config)
    basis = ServingBasis(kind="traced", workload=entry.trace_id, gpu=entry.config,
                         gpu_name=spec.name if spec else "", gpu_memory_gb=spec.memory_gb if spec else None,
                         step_model=sm.model.source, context_tokens=entry.context_length)
    return CascadeInfo(
        config=entry.config, sim=entry.sim.id, run=entry.run.id, trace=entry.trace_id, extrapolated=est.extrapolated,
        extrapolation=est.extrapolation, calibration_range=sm.calibration,
        kernels=msgspec.convert(sm.kernels, KernelProvenance), prompt_tokens_approximate=approximate,
        method=est.method, prefill_steps=est.prefill_steps, token_budget=token_budget, idle_replica=True,
        source="traced", basis=basis)


def described_cascade_of(entry: DescribedEntry, est: RequestEstimate, basis: ServingBasis, approximate: bool,
                         token_budget: int) -> CascadeInfo:
    """The ``cascade`` object of one estimate of a described model: no sim, run or trace; the
    kernels timed by the LLM kernel model with its expected error on the model's rows."""
    cal, err = basis.llm_calibration, basis.expected_kernel_error
    accuracy = (AccuracyEstimate(mape_pct=err.mape_pct, worst_pct=err.worst_pct, cells=err.cells, basis=err.basis)
                if err is not None else None)
    kernels = KernelProvenance(model="llm", spec_id=entry.spec.id,
                               calibration=f"{cal.id}@{cal.version}" if cal else msgspec.UNSET, accuracy=accuracy,
                               extrapolated=0)
    return CascadeInfo(
        config=entry.spec.id, sim="", run="", trace="", extrapolated=est.extrapolated, extrapolation=est.extrapolation,
        calibration_range=None, kernels=kernels, prompt_tokens_approximate=approximate, method=est.method,
        prefill_steps=est.prefill_steps, token_budget=token_budget, idle_replica=True, source="described",
        basis=basis)


def fragments(served: Served, est: RequestEstimate, approximate: bool, token_budget: int,
              full: bool = False) -> tuple[MetricsBody, CascadeInfo]:
    """``metrics_of(est)`` and ``served.cascade(...)``, made once per request shape.

    Estimates are pure functions of the shape and the model, so the objects are memoised on
    the model's step model (a sim's is replaced when the sim's result changes).
    """
    memo = served.answers
    key = (est.prompt_tokens, est.output_tokens, token_budget, approximate, full)
    hit = memo.get(key)
    if hit is not None and hit[0] is est:
        return hit[1], hit[2]
    metrics = metrics_of(est, full=full)
    extra = served.cascade(est, approximate, token_budget)
    if len(memo) >= FRAGMENT_MEMO:
        memo.pop(next(iter(memo)))
    memo[key] = (est, metrics, extra)
    return metrics, extra


def usage(prompt_total: int, completion_total: int) -> UsageBody:
    return UsageBody(prompt_tokens=prompt_total, completion_tokens=completion_total,
                     total_tokens=prompt_total + completion_total)


def completion_body(frags: list[tuple[MetricsBody, CascadeInfo]], rid: str, created: int, model: str,
                    chat: bool, prompt_counts: list[int], output: int) -> CompletionBody | ChatCompletionBody:
    """The answer to ``len(frags)`` prompts (each choice carries its own ``metrics`` and
    ``cascade`` when there are several; the first prompt's are the answer's)."""
    several = len(frags) > 1
    use = usage(sum(prompt_counts), output * len(prompt_counts))
    metrics, extra = frags[0]
    if chat:
        return ChatCompletionBody(
            id=rid, object="chat.completion", created=created, model=model, usage=use, metrics=metrics, cascade=extra,
            choices=[ChatChoiceBody(index=i, message=AssistantMessage(role="assistant", content=""), logprobs=None,
                                    finish_reason="length", metrics=m if several else None,
                                    cascade=c if several else None)
                     for i, (m, c) in enumerate(frags)])
    return CompletionBody(
        id=rid, object="text_completion", created=created, model=model, usage=use, metrics=metrics, cascade=extra,
        choices=[CompletionChoiceBody(index=i, text="", logprobs=None, finish_reason="length",
                                      metrics=m if several else None, cascade=c if several else None)
                 for i, (m, c) in enumerate(frags)])


def token_chunk(rid: str, created: int, model: str, chat: bool, times: list[float], i: int) -> StreamChunk:
    """The streamed chunk of output token ``i`` (simulated times from arrival)."""
    last = i == len(times) - 1
    choice = ChunkChoice(index=0, logprobs=None, finish_reason="length" if last else None)
    if chat:
        choice.delta = ChunkDelta(role="assistant", content="") if i == 0 else ChunkDelta(content="")
    else:
        choice.text = ""
    t_ms = times[i]
    return StreamChunk(id=rid, object="chat.completion.chunk" if chat else "text_completion", created=created,
                       model=model, choices=[choice],
                       cascade_token=TokenTime(index=i, time_ms=t_ms, gap_ms=t_ms if i == 0 else t_ms - times[i - 1]))


def usage_chunk(rid: str, created: int, model: str, chat: bool, est: RequestEstimate) -> StreamChunk:
    """The last chunk of a stream with ``stream_options.include_usage``: the usage only."""
    return StreamChunk(id=rid, object="chat.completion.chunk" if chat else "text_completion", created=created,
                       model=model, choices=[], usage=usage(est.prompt_tokens, est.output_tokens))
