"""The GPU specification type: the figures a performance model needs about one GPU."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

import msgspec

_Frac = Annotated[float, msgspec.Meta(gt=0, le=1)]

#: Architecture generations Cascade knows, oldest first (``GPUSpec.arch``).
ARCHES: tuple[str, ...] = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")


class Efficiency(msgspec.Struct, frozen=True, kw_only=True):
    """Achievable fractions of the quoted peaks (defaults; calibration overrides them)."""

    simt: _Frac = 0.8
    """Fraction of the SIMT (CUDA-core) peak a well-tuned kernel sustains."""
    tensor: _Frac = 0.75
    """Fraction of the dense tensor-core peak a large GEMM sustains."""
    bandwidth: _Frac = 0.8
    """Fraction of the quoted DRAM bandwidth a streaming kernel sustains."""


class GPUSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Public specification of one GPU configuration (units in field names).

    Every figure carries physical plausibility bounds (``msgspec.Meta(ge, le)`` on the
    field): generous enough for GPUs a few generations past today's (B200: 148 SMs,
    8 TB/s, 2.25 PFLOP/s dense FP16), tight enough that a typo or a hostile value
    (1.2 M SMs, a negative clock, a 1e300 ns launch) is refused with the field and the
    range (:func:`plausibility_error`). Built-in and custom specs are checked alike;
    built-in ones also obey the cross-field rules of :func:`check_consistency`.
    """

    id: Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
    """Registry id, e.g. ``SM90_H100`` (a letter or digit, then letters, digits, ``_``, ``-``;
    at most 64)."""
    name: Annotated[str, msgspec.Meta(pattern=r"\S", max_length=200)]
    """Marketing name, e.g. ``NVIDIA H100 SXM5 80GB``."""
    arch: Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(ARCHES)})]
    """Architecture generation: one of :data:`ARCHES`."""
    sm_version: Annotated[int, msgspec.Meta(ge=10, le=200)]
    """Compute capability x 10 (80 for sm_80)."""
    aliases: list[str] = []
    """Device names drivers report (``nvidia-smi``/``torch.cuda.get_device_name``) and short names."""
    sms: Annotated[int, msgspec.Meta(ge=1, le=1_024)]
    """Streaming multiprocessors."""
    boost_clock_mhz: Annotated[float, msgspec.Meta(ge=100, le=5_000)]
    """Boost core clock the quoted peaks are computed at, MHz."""
    sustained_clock_mhz: Annotated[float, msgspec.Meta(ge=0, le=5_000)] = 0.0
    """Core clock a long, heavy compute kernel settles at under the board power limit, MHz;
    0 means the boost clock (boards whose power budget holds boost under load). Set for
    power-limited boards (70-75 W: T4, L4, P4) from the vendor's base clock, the clock
    guaranteed at TDP under full load; short kernels still run near boost
    (see :func:`cascade.engine.perf.clock_slowdown`)."""
    memory_gb: Annotated[float, msgspec.Meta(ge=0.5, le=4_096)]
    """Device memory, GB."""
    memory_type: str = ""
    """HBM2, HBM2e, HBM3, HBM3e, GDDR6, ..."""
    memory_bandwidth_gbps: Annotated[float, msgspec.Meta(ge=10, le=100_000)]
    """Quoted DRAM bandwidth, GB/s (1e9 bytes/s)."""
    l2_mb: Annotated[float, msgspec.Meta(ge=0.1, le=2_048)]
    """L2 cache size, MB."""
    l2_bandwidth_gbps: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)] = 0.0
    """L2 bandwidth, GB/s; 0 means 2.5 x DRAM bandwidth."""
    smem_per_sm_kb: Annotated[float, msgspec.Meta(ge=8, le=4_096)]
    """Maximum shared memory per SM, KB."""
    smem_per_block_kb: Annotated[float, msgspec.Meta(ge=8, le=4_096)]
    """Maximum shared memory per block (opt-in), KB."""
    regs_per_sm: Annotated[int, msgspec.Meta(ge=1_024, le=1_048_576)] = 65536
    """32-bit registers per SM."""
    max_regs_per_thread: Annotated[int, msgspec.Meta(ge=16, le=1_024)] = 255
    """Register limit per thread."""
    reg_alloc_unit: Annotated[int, msgspec.Meta(ge=1, le=4_096)] = 256
    """Register allocation granularity per warp."""
    max_threads_per_sm: Annotated[int, msgspec.Meta(ge=32, le=16_384)]
    """Resident threads per SM."""
    max_threads_per_block: Annotated[int, msgspec.Meta(ge=32, le=16_384)] = 1024
    """Threads per block limit."""
    max_blocks_per_sm: Annotated[int, msgspec.Meta(ge=1, le=256)]
    """Resident blocks per SM."""
    max_warps_per_sm: Annotated[int, msgspec.Meta(ge=1, le=512)]
    """Resident warps per SM."""
    schedulers_per_sm: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4
    """Warp schedulers per SM (each issues one warp instruction per cycle)."""
    sfu_per_sm: Annotated[int, msgspec.Meta(ge=1, le=1_024)] = 16
    """Special-function units per SM (lanes per cycle)."""
    ldst_per_sm: Annotated[int, msgspec.Meta(ge=1, le=1_024)] = 32
    """Load/store units per SM (lanes per cycle)."""
    fp32_tflops: Annotated[float, msgspec.Meta(ge=0.01, le=100_000)]
    """SIMT FP32 peak, TFLOP/s (FMA = 2 FLOPs)."""
    fp64_tflops: Annotated[float, msgspec.Meta(ge=0.001, le=100_000)]
    """SIMT FP64 peak, TFLOP/s."""
    fp16_tflops: Annotated[float, msgspec.Meta(ge=0.01, le=100_000)]
    """SIMT (non-tensor) FP16 peak, TFLOP/s."""
    int32_tops: Annotated[float, msgspec.Meta(ge=0.01, le=100_000)]
    """SIMT INT32 peak, TOP/s."""
    tensor_tflops: dict[str, Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]] = {}
    """Dense (no sparsity) tensor-core peaks by dtype, TFLOP/s or TOP/s: ``fp16``, ``bf16``,
    ``tf32``, ``fp8``, ``int8``, ``fp64``, and where the board has them ``fp4`` (NVFP4 / MXFP4,
    Blackwell) and ``int4`` (Turing / Ampere / Ada INT4 MMA). A dtype a board lacks is left out."""
    launch_overhead_ns: Annotated[float, msgspec.Meta(ge=10, le=1_000_000)] = 2000.0
    """Minimum device time of a kernel launch (empty kernel), ns."""
    dram_latency_ns: Annotated[float, msgspec.Meta(ge=10, le=100_000)] = 500.0
    """Unloaded DRAM access latency, ns."""
    tdp_w: Annotated[float, msgspec.Meta(ge=0, le=10_000)] = 0.0
    """Board power, W (informational)."""
    nvlink_gen: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0
    """NVLink generation (3 Ampere, 4 Hopper, 5 Blackwell); 0 = no NVLink."""
    nvlink_gbps: Annotated[float, msgspec.Meta(ge=0, le=10_000)] = 0.0
    """NVLink bandwidth per GPU per direction, GB/s (half the bidirectional figure NVIDIA
    quotes: A100 SXM 300, H100 SXM 450, B200 900); 0 = no NVLink."""
    nvlink_domain: Annotated[int, msgspec.Meta(ge=0, le=4_096)] = 0
    """GPUs one NVLink domain joins all-to-all through NVSwitch (8 for HGX boards, 72 for
    GB200 / GB300 NVL72; 2 for a bridged PCIe pair); 0 = no NVLink."""
    nvls: bool = False
    """NVLink SHARP (``multimem`` in-switch reductions, NCCL NVLS): NVSwitch gen 3 or later,
    i.e. Hopper HGX boards and later."""
    pcie_gen: Annotated[int, msgspec.Meta(ge=1, le=10)] = 4
    """PCIe generation of the host / peer link."""
    pcie_gbps: Annotated[float, msgspec.Meta(ge=0, le=1_000)] = 32.0
    """Host / peer PCIe bandwidth per direction, GB/s (x16: Gen3 ~16, Gen4 ~32, Gen5 ~64,
    Gen6 ~128)."""
    efficiency: Efficiency = Efficiency()
    """Default achievable fractions of the peaks."""
    sources: list[str] = []
    """Where the figures come from."""

    # ---- derived figures -------------------------------------------------------------
    @property
    def clock_hz(self) -> float:
        """Boost core clock, Hz."""
        return self.boost_clock_mhz * 1e6

    @property
    def sustained_clock_ratio(self) -> float:
        """Boost clock / sustained clock (>= 1; 1 when the board sustains boost)."""
        if self.sustained_clock_mhz <= 0:
            return 1.0
        return max(self.boost_clock_mhz / self.sustained_clock_mhz, 1.0)

    @property
    def bandwidth_bps(self) -> float:
        """DRAM bandwidth, bytes/s."""
        return self.memory_bandwidth_gbps * 1e9

    @property
    def l2_bytes(self) -> float:
        """L2 capacity, bytes."""
        return self.l2_mb * 1e6

    @property
    def l2_bandwidth_bps(self) -> float:
        """L2 bandwidth, bytes/s."""
        gbps = self.l2_bandwidth_gbps or 2.5 * self.memory_bandwidth_gbps
        return gbps * 1e9

    def simt_flops(self, dtype: str) -> float:
        """SIMT peak FLOP/s for a dtype (fp64, fp16/bf16, else fp32)."""
        if dtype == "fp64":
            return self.fp64_tflops * 1e12
        if dtype in ("fp16", "bf16"):
            return max(self.fp16_tflops, self.fp32_tflops) * 1e12
        if dtype == "int8":
            return self.int32_tops * 1e12
        return self.fp32_tflops * 1e12

    def tensor_flops(self, dtype: str) -> float:
        """Dense tensor-core peak FLOP/s for a dtype; 0 when the GPU has none for it."""
        return self.tensor_tflops.get(dtype, 0.0) * 1e12

    def peak_flops(self, dtype: str, tensor: bool) -> float:
        """The best peak a kernel of this dtype can reach (tensor path if asked and available)."""
        if tensor:
            t = self.tensor_flops(dtype)
            if t > 0:
                return t
        return self.simt_flops(dtype)

    def spec_hash(self) -> str:
        """Short stable hash of the spec's content (provenance of predictions)."""
        return hashlib.sha256(msgspec.json.encode(self)).hexdigest()[:16]


def field_bounds() -> dict[str, tuple[float, float]]:
    """(low, high) of every bounded :class:`GPUSpec` field (``tensor_tflops`` per dtype)."""
    out: dict[str, tuple[float, float]] = {}
    for f in msgspec.inspect.type_info(GPUSpec).fields:  # type: ignore[attr-defined]
        t = f.type
        if isinstance(t, msgspec.inspect.DictType):
            t = t.value_type
        lo = getattr(t, "ge", None)
        hi = getattr(t, "le", None)
        if lo is not None and hi is not None:
            out[f.name] = (lo, hi)
    return out


def plausibility_error(message: str, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """(field, "a number from LOW to HIGH", value) for a msgspec bounds error, else None."""
    if "at `$." not in message:
        return None
    path = message.split("at `$.", 1)[1].split("`", 1)[0]
    name = path.split("[", 1)[0].split(".", 1)[0]
    bounds = field_bounds().get(name)
    if bounds is None or not any(op in message for op in (">=", "<=")):
        return None
    value = data.get(name)
    if isinstance(value, dict) and "[" in path:
        bad = {k: v for k, v in value.items()
               if not isinstance(v, (int, float)) or not bounds[0] <= v <= bounds[1]}
        value = bad or value
    return path, f"a number from {bounds[0]:g} to {bounds[1]:g}", value


def check_consistency(spec: GPUSpec) -> None:
    """Cross-field rules a real GPU obeys (ValueError naming the fields otherwise)."""
    if spec.smem_per_block_kb > spec.smem_per_sm_kb:
        raise ValueError(f"smem_per_block_kb ({spec.smem_per_block_kb:g}) must not exceed "
                         f"smem_per_sm_kb ({spec.smem_per_sm_kb:g})")
    if spec.sustained_clock_mhz > spec.boost_clock_mhz:
        raise ValueError(f"sustained_clock_mhz ({spec.sustained_clock_mhz:g}) must not exceed "
                         f"boost_clock_mhz ({spec.boost_clock_mhz:g})")
    if spec.max_threads_per_block > spec.max_threads_per_sm:
        raise ValueError(f"max_threads_per_block ({spec.max_threads_per_block}) must not exceed "
                         f"max_threads_per_sm ({spec.max_threads_per_sm})")
    if (spec.nvlink_gen > 0) != (spec.nvlink_gbps > 0):
        raise ValueError(f"nvlink_gen ({spec.nvlink_gen}) and nvlink_gbps ({spec.nvlink_gbps:g}) "
                         "must both be 0 (no NVLink) or both be set")
    if spec.nvlink_domain and not spec.nvlink_gen:
        raise ValueError(f"nvlink_domain ({spec.nvlink_domain}) needs NVLink (nvlink_gen > 0)")
    if spec.nvls and spec.nvlink_domain < 2:
        raise ValueError("nvls (NVLink SHARP) needs an NVSwitch domain (nvlink_domain >= 2)")
    if spec.max_threads_per_sm > spec.max_warps_per_sm * 32:
        raise ValueError(f"max_threads_per_sm ({spec.max_threads_per_sm}) must not exceed "
                         f"max_warps_per_sm x 32 ({spec.max_warps_per_sm * 32})")
