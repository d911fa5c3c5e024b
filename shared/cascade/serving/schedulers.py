"""Scheduler configs, registered by name; the implementations live in :mod:`.sim`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

if TYPE_CHECKING:
    from cascade.gpus.spec import GPUSpec

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

    max_num_batched_tokens: PosI | None = None
    """Token budget of one step; None: vLLM's default for the GPU (:func:`vllm_batch_defaults`:
    8192 on GPUs of 70 GiB and more but A100s, else 2048; without chunked prefill at least the
    model's context window)."""
    max_num_seqs: PosI | None = None
    """Most requests running at once; None: vLLM's default for the GPU (1024 on GPUs of 70 GiB
    and more but A100s, else 256; never above the token budget)."""
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


    def on_gpu(self, memory_bytes: float, gpu_name: str = "", *, context_tokens: int | None = None) -> Vllm:
        """These settings with the unset limits filled as ``vllm serve`` fills them on a GPU of
        ``memory_bytes`` named ``gpu_name`` (``EngineArgs.get_batch_defaults``, the OpenAI API
        server's context); ``context_tokens``: the model's context window, which without chunked
        prefill is the least budget vLLM sets."""
        tokens, seqs = vllm_batch_defaults(memory_bytes, gpu_name)
        if not self.enable_chunked_prefill and context_tokens:
            tokens = max(tokens, context_tokens)
        budget = self.max_num_batched_tokens or tokens
        return msgspec.structs.replace(self, max_num_batched_tokens=budget,
                                       max_num_seqs=self.max_num_seqs or min(seqs, budget))

    @property
    def limits(self) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs); unset ones as vLLM sets them on an 80 GB
        H100 (resolve with :meth:`on_gpu` where the GPU is known)."""
        budget = self.max_num_batched_tokens or LARGE_GPU_DEFAULTS[0]
        return budget, self.max_num_seqs or min(LARGE_GPU_DEFAULTS[1], budget)


#: vLLM's API-server batch defaults on a GPU of at least :data:`LARGE_GPU_GIB` GiB that is not an
#: A100 (H100, H200, B200, MI300X): (max_num_batched_tokens, max_num_seqs).
LARGE_GPU_DEFAULTS = (8192, 1024)
#: ... and on every other GPU (A100, L40S, and anything smaller).
SMALL_GPU_DEFAULTS = (2048, 256)
#: Device memory from which vLLM takes the larger defaults.
LARGE_GPU_GIB = 70


def device_of(spec: GPUSpec) -> tuple[float, str]:
    """A GPU spec as vLLM's defaults read the device: its memory in bytes (the catalogue's
    ``memory_gb`` as the GiB torch reports) and a name carrying its id and board name."""
    return spec.memory_gb * (1 << 30), f"{spec.id} {spec.name}"


def vllm_batch_defaults(memory_bytes: float, gpu_name: str = "") -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` uses when neither is given
    (vLLM 0.10-0.18 ``EngineArgs.get_batch_defaults``, OpenAI API server): the larger pair on
    GPUs of at least 70 GiB whose name does not say A100 (where a large budget was measured to
    lower throughput), else the smaller."""
    if memory_bytes >= LARGE_GPU_GIB * (1 << 30) and "a100" not in gpu_name.lower():
        return LARGE_GPU_DEFAULTS
    return SMALL_GPU_DEFAULTS


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
