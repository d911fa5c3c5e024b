"""Scheduler configs, registered by name; the implementations live in :mod:`.sim`."""

from __future__ import annotations

from typing import Annotated

import msgspec

PosI = Annotated[int, msgspec.Meta(ge=1)]


class Vllm(msgspec.Struct, frozen=True, kw_only=True, tag="vllm", tag_field="kind"):
    """Continuous batching with vLLM v1 semantics.

    Each step: running requests first, in admission order (a decode takes one
    token, a partially prefilled request its next chunk), then waiting requests
    in FCFS order while the token budget, ``max_num_seqs`` and free KV blocks
    allow. When a running request cannot get its blocks, the newest running
    request is preempted (its blocks freed; it goes back to the head of the
    queue and later recomputes prompt + generated tokens). No new request is
    admitted in a step that preempted.
    """

    max_num_batched_tokens: PosI = 8192
    """Token budget of one step."""
    max_num_seqs: PosI = 256
    """Most requests running at once."""
    enable_chunked_prefill: bool = True
    """Split prompts that exceed the remaining budget; off: a prompt waits for a step
    with budget for all of it."""
    long_prefill_token_threshold: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Cap on one request's prefill tokens per step (0 = no cap)."""
    async_scheduling: bool = True
    """vLLM's async scheduling (on by default in current vLLM; off in the 0.12 series and with
    pipeline parallelism): the next step is built while this one runs, so a request arriving
    during a step joins the step after the next, and a step's host work (scheduling, input
    preparation, output processing) hides behind the GPU's (a described model's step costs
    max(GPU, host), not GPU + host). A traced step law keeps the host time it measured."""


class Static(msgspec.Struct, frozen=True, kw_only=True, tag="static", tag_field="kind"):
    """Fixed batches run to completion: when a replica is idle it takes up to
    ``batch_size`` waiting requests (KV for prompt + output reserved up front),
    prefills them in one step and decodes until the longest is done; nobody
    joins mid-batch."""

    batch_size: PosI = 8
    drop_finished: bool = False
    """Finished sequences leave the decode batch (False: they stay as padding,
    as in padded static batching)."""


SchedulerConfig = Vllm | Static
