"""The GPU specification type: the figures a performance model needs about one GPU."""

from __future__ import annotations

import hashlib
from typing import Annotated

import msgspec

_Pos = Annotated[float, msgspec.Meta(gt=0)]
_PosInt = Annotated[int, msgspec.Meta(gt=0)]
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
    """Public specification of one GPU configuration (units in field names)."""

    id: str
    """Registry id, e.g. ``SM90_H100``."""
    name: str
    """Marketing name, e.g. ``NVIDIA H100 SXM5 80GB``."""
    arch: str
    """Architecture generation: one of :data:`ARCHES`."""
    sm_version: _PosInt
    """Compute capability x 10 (80 for sm_80)."""
    aliases: list[str] = []
    """Device names drivers report (``nvidia-smi``/``torch.cuda.get_device_name``) and short names."""
    sms: _PosInt
    """Streaming multiprocessors."""
    boost_clock_mhz: _Pos
    """Boost core clock the quoted peaks are computed at, MHz."""
    sustained_clock_mhz: float = 0.0
    """Core clock a long, heavy compute kernel settles at under the board power limit, MHz;
    0 means the boost clock (boards whose power budget holds boost under load). Set for
    power-limited boards (70-75 W: T4, L4, P4) from the vendor's base clock, the clock
    guaranteed at TDP under full load; short kernels still run near boost
    (see :func:`cascade.engine.perf.clock_slowdown`)."""
    memory_gb: _Pos
    """Device memory, GB."""
    memory_type: str = ""
    """HBM2, HBM2e, HBM3, HBM3e, GDDR6, ..."""
    memory_bandwidth_gbps: _Pos
    """Quoted DRAM bandwidth, GB/s (1e9 bytes/s)."""
    l2_mb: _Pos
    """L2 cache size, MB."""
    l2_bandwidth_gbps: float = 0.0
    """L2 bandwidth, GB/s; 0 means 2.5 x DRAM bandwidth."""
    smem_per_sm_kb: _Pos
    """Maximum shared memory per SM, KB."""
    smem_per_block_kb: _Pos
    """Maximum shared memory per block (opt-in), KB."""
    regs_per_sm: _PosInt = 65536
    """32-bit registers per SM."""
    max_regs_per_thread: _PosInt = 255
    """Register limit per thread."""
    reg_alloc_unit: _PosInt = 256
    """Register allocation granularity per warp."""
    max_threads_per_sm: _PosInt
    """Resident threads per SM."""
    max_threads_per_block: _PosInt = 1024
    """Threads per block limit."""
    max_blocks_per_sm: _PosInt
    """Resident blocks per SM."""
    max_warps_per_sm: _PosInt
    """Resident warps per SM."""
    schedulers_per_sm: _PosInt = 4
    """Warp schedulers per SM (each issues one warp instruction per cycle)."""
    sfu_per_sm: _PosInt = 16
    """Special-function units per SM (lanes per cycle)."""
    ldst_per_sm: _PosInt = 32
    """Load/store units per SM (lanes per cycle)."""
    fp32_tflops: _Pos
    """SIMT FP32 peak, TFLOP/s (FMA = 2 FLOPs)."""
    fp64_tflops: _Pos
    """SIMT FP64 peak, TFLOP/s."""
    fp16_tflops: _Pos
    """SIMT (non-tensor) FP16 peak, TFLOP/s."""
    int32_tops: _Pos
    """SIMT INT32 peak, TOP/s."""
    tensor_tflops: dict[str, float] = {}
    """Dense tensor-core peaks by dtype (fp16, bf16, tf32, fp8, int8, fp64), TFLOP/s or TOP/s."""
    launch_overhead_ns: _Pos = 2000.0
    """Minimum device time of a kernel launch (empty kernel), ns."""
    dram_latency_ns: _Pos = 500.0
    """Unloaded DRAM access latency, ns."""
    tdp_w: float = 0.0
    """Board power, W (informational)."""
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
