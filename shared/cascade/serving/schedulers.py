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


class Sglang(msgspec.Struct, frozen=True, kw_only=True, tag="sglang", tag_field="kind"):
    """SGLang's scheduler (0.5.x, its defaults on 80-160 GB GPUs): each pass is all prefill or
    all decode, never both (``--enable-mixed-chunk`` off), and a prefill runs first whenever
    one can be formed.

    A prefill pass takes the request whose prompt is being chunked first (one at a time, its
    chunks back to back), then waiting requests in FCFS order while the chunk budget lasts and
    each fits the KV room left after reservations: every running request's remaining output
    (clipped to :attr:`clip_max_new_tokens`) x the new-token ratio, and each request admitted
    to this pass's prompt plus clipped output at full weight. A request that does not fit stops
    admission (head of line) and latches the batch full: no prefill is tried again until a
    request finishes or is retracted. A prompt longer than the chunk budget left is cut to it.
    Its first token comes at the end of the pass holding its last chunk. A decode pass runs
    every running request; where the KV room cannot take one more token each, requests are
    retracted (fewest output tokens first, the longest prompt on ties) to the queue's tail
    and later recompute prompt and output. The new-token ratio starts at
    :attr:`init_new_token_ratio`, falls linearly to its floor over
    :attr:`new_token_ratio_decay_steps` decode passes, is set after a retraction to what the
    survivors have decoded and is reset when the engine idles."""

    chunked_prefill_size: PosI = 8192
    """Prompt tokens one prefill pass takes (SGLang's default on GPUs of 90-160 GiB)."""
    max_prefill_tokens: PosI = 16384
    """Prompt tokens admitted to one pass (the first request may exceed it)."""
    max_running_requests: PosI | None = None
    """Most requests in the running batch; None: half the KV tokens, at most 4096 (SGLang's
    ``min(max_total_num_tokens // 2, req_to_token_pool size)``)."""
    init_new_token_ratio: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.7
    min_new_token_ratio_factor: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.14
    new_token_ratio_decay_steps: PosI = 600
    clip_max_new_tokens: PosI = 4096
    """An output's reservation is clipped to this many tokens."""
    overlap_schedule: bool = True
    """SGLang's overlap scheduler (on by default): the next pass is built while this one runs,
    so a request arriving during a pass joins the pass after the next."""


def sglang_mem_fraction_static(memory_gib: float, tp: int = 1, version: tuple[int, int, int] | None = None) -> float:
    """``mem_fraction_static`` that SGLang 0.5.x sets on a GPU of ``memory_gib`` (as nvidia-smi
    reports it) at tensor parallelism ``tp`` (``ServerArgs._handle_gpu_memory_settings``): from
    0.5.3 on, MiB reserved = max(512 + chunked prefill 8192 x 1.5 + CUDA-graph batch (256 below
    tp 4, else 512) x 2 + tp / 8 x 1024, 10240); before, ``9.5 + tp / 2`` GiB under 90 GiB and
    ``12 + tp / 2`` GiB up to 160 GiB. Rounded to 3 places as SGLang rounds it. These are
    SGLang's rules for boards of 80-160 GB (H100, H200); other boards get the same, an
    approximation (SGLang sizes smaller ones with a smaller chunk and reserve)."""
    mib = memory_gib * 1024
    if version is not None and version < (0, 5, 3):
        reserved = ((9.5 if memory_gib < 90 else 12.0) + tp / 2) * 1024
    else:
        reserved = max(512 + 8192 * 1.5 + (256 if tp < 4 else 512) * 2 + tp / 8 * 1024, 10240)
    return round((mib - reserved) / mib, 3)


SchedulerConfig = Vllm | Static | Sglang
