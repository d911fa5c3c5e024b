"""Paged KV-cache capacity from the model shape and the GPU memory."""

from __future__ import annotations

from typing import Annotated

import msgspec

from cascade.errors import ValidationError

Pos = Annotated[int, msgspec.Meta(ge=1)]


class ModelShape(msgspec.Struct, frozen=True, kw_only=True):
    """What the KV cache of one model costs per token."""

    name: str = ""
    layers: Pos
    kv_heads: Pos
    """Key/value heads (GQA/MQA: fewer than attention heads)."""
    head_dim: Pos
    kv_dtype_bytes: Annotated[int, msgspec.Meta(ge=1, le=8)] = 2
    weights_bytes: Annotated[int, msgspec.Meta(ge=0)]
    """Bytes of weights resident on one replica's GPU."""

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes


class KVConfig(msgspec.Struct, frozen=True, kw_only=True):
    """KV-cache sizing of one replica (vLLM's gpu_memory_utilization semantics)."""

    model: ModelShape
    gpu_memory_bytes: Pos
    gpu_memory_utilization: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.9
    block_size: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 16
    """Tokens per KV block."""
    activation_reserve_bytes: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Memory kept for activations / CUDA graphs besides the weights."""
    num_gpu_blocks_override: Annotated[int, msgspec.Meta(ge=1, le=2**40)] | None = None
    """Use exactly this many blocks (vLLM's num_gpu_blocks_override)."""

    def num_blocks(self) -> int:
        """(memory x utilisation - weights - reserve) / KV bytes per token / block size."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        usable = (self.gpu_memory_bytes * self.gpu_memory_utilization
                  - self.model.weights_bytes - self.activation_reserve_bytes)
        blocks = int(usable // (self.model.kv_bytes_per_token * self.block_size))
        if blocks < 1:
            gib = 1 << 30
            raise ValidationError(
                f"no memory left for the KV cache: {self.gpu_memory_bytes / gib:.1f} GiB x "
                f"{self.gpu_memory_utilization} - {self.model.weights_bytes / gib:.1f} GiB of weights "
                f"- {self.activation_reserve_bytes / gib:.1f} GiB reserve < one block of "
                f"{self.model.kv_bytes_per_token * self.block_size} B ({self.gpu_memory_bytes} B x "
                f"{self.gpu_memory_utilization} - {self.model.weights_bytes} B - {self.activation_reserve_bytes} B): "
                "split the weights over more GPUs (tp / ep), serve them in a smaller dtype (quant), or "
                "pick a GPU with more memory", field="kv_config")
        return blocks


GiB = 1 << 30

#: Model shapes for examples, the CLI's --model and tests (weights in fp16).
MODEL_SHAPES: dict[str, ModelShape] = {
    "opt-125m": ModelShape(name="opt-125m", layers=12, kv_heads=12, head_dim=64,
                           weights_bytes=250_000_000),
    "llama-2-7b": ModelShape(name="llama-2-7b", layers=32, kv_heads=32, head_dim=128,
                             weights_bytes=13_500_000_000),
    "llama-3-8b": ModelShape(name="llama-3-8b", layers=32, kv_heads=8, head_dim=128,
                             weights_bytes=16_060_000_000),
}
