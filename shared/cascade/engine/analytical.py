"""The ``analytical`` model: kernel time from instruction-trace features on the target.

Occupancy from registers / shared memory / threads / block limits; waves and the
critical SM's share of blocks (tail wave); per-unit throughput limits (issue,
FP32, FP16, FP64, INT, SFU, load/store, shared memory, tensor cores by dtype);
global traffic through L2 and DRAM with the footprint-versus-L2-capacity effect;
a latency floor from dependency chains; plus the fixed launch time. Kernels
without instruction features use the calibrated work model of
:mod:`cascade.engine.perf` (FLOPs, bytes, GEMM shape).
"""

from __future__ import annotations

import msgspec
import numpy as np

from cascade.calibration import Calibration
from cascade.calibration.accuracy import calibrated_in
from cascade.engine import convmath, extrapolation, perf
from cascade.engine.base import ModelContext, ModelOutput, model_column
from cascade.engine.workload import Workload
from cascade.gpus.accelsim import fp32_lanes_per_sm
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

#: Reuse-distance threshold of the ``reuse_le_l2`` feature, bytes (32K lines of 128 B).
_REUSE_L2_BYTES = 32768 * 128.0
#: Cycles of a dependent ALU instruction on the critical path.
_ALU_DEP_CYCLES = 6.0


#: The per-kernel model label of a kernel the analytical model predicted from its instruction-trace
#: features (one it predicted from its work is labelled ``analytical``): no protocol here measures
#: the features' accuracy, so a prediction of such kernels quotes none.
FEATURES_LABEL = "analytical:features"


class AnalyticalConfig(msgspec.Struct, frozen=True, kw_only=True, tag="analytical", tag_field="kind"):
    """Settings of the ``analytical`` model."""

    measurement: str = "device"
    """Fixed per-kernel time to add: ``"device"`` (default) is the spec's launch overhead, the
    same on every GPU of a kind, because an instruction trace times kernels on the device;
    a calibrated measurement kind (``"kernel"``, ``"neusight"``, see ScaledConfig.measurement)
    adds that harness's fitted per-call time instead (where the spec has one)."""


def fixed_kernel_ns(cfg: AnalyticalConfig, spec: GPUSpec, calibration: Calibration) -> float:
    """The fixed per-kernel time the analytical model adds on ``spec``."""
    if cfg.measurement == "device":
        return float(spec.launch_overhead_ns)
    fixed = calibration.floor_ns(cfg.measurement, spec)
    return float(spec.launch_overhead_ns if fixed is None else fixed)


def has_features(table: KernelTable) -> np.ndarray:
    """True where a kernel carries instruction-trace features."""
    wi = table["warp_insts"].astype(np.float64)
    return np.isfinite(wi) & (wi > 0)


def occupancy(table: KernelTable, spec: GPUSpec) -> tuple[np.ndarray, np.ndarray]:
    """(resident blocks per SM, threads per block) on a spec."""
    threads = (np.maximum(table["block_x"], 1) * np.maximum(table["block_y"], 1)
               * np.maximum(table["block_z"], 1)).astype(np.float64)
    threads = np.where(table["block_x"] > 0, threads, 256.0)
    return (perf.resident_blocks(threads, table["regs"].astype(np.float64),
                                 table["smem_bytes"].astype(np.float64), spec), threads)


def analytical_ns(table: KernelTable, w: Workload, spec: GPUSpec, ctx: ModelContext) -> tuple[np.ndarray, np.ndarray]:
    """(time ns, regime codes) from instruction features (rows without them give NaN)."""
    cfg = ctx.config if isinstance(ctx.config, AnalyticalConfig) else AnalyticalConfig()
    params = ctx.calibration.params_for(spec, ctx.archs, cfg.measurement)
    fixed = fixed_kernel_ns(cfg, spec, ctx.calibration)
    f = {c: np.nan_to_num(table[c].astype(np.float64), nan=0.0) for c in (
        "warp_insts", "insts_int", "insts_fp32", "insts_fp64", "insts_fp16", "insts_sfu",
        "insts_tensor", "tensor_flops", "insts_ld_global", "insts_st_global", "insts_local",
        "insts_atomic", "smem_accesses", "smem_bank_conflicts", "gmem_sectors", "footprint_lines",
        "warps", "insts_per_warp_mean", "local_bytes")}
    reuse_l1 = np.nan_to_num(table["reuse_le_l1"].astype(np.float64), nan=0.0)
    reuse_l2 = np.nan_to_num(table["reuse_le_l2"].astype(np.float64), nan=0.0)
    dep_chain = table["dep_chain"].astype(np.float64)
    bps, threads = occupancy(table, spec)
    blocks = w.blocks.copy()
    est_blocks = np.ceil(f["warps"] / np.ceil(threads / 32.0))
    blocks = np.where(np.isfinite(blocks), blocks, np.maximum(est_blocks, 1.0))
    clock = spec.clock_hz
    sms = float(spec.sms)
    # the critical SM runs ceil(blocks / sms) blocks: imbalance over a perfect spread
    per_sm = np.ceil(blocks / sms)
    imbalance = per_sm * sms / np.maximum(blocks, 1.0)
    simt = params.simt_eff
    lanes = fp32_lanes_per_sm(spec.sm_version)
    t_issue = f["warp_insts"] / (sms * spec.schedulers_per_sm * clock)
    t_fp32 = f["insts_fp32"] * 32.0 / (lanes * sms * clock * simt)
    t_fp16 = f["insts_fp16"] * 32.0 * 4.0 / (spec.fp16_tflops * 1e12 * simt)
    t_fp64 = f["insts_fp64"] * 32.0 * 2.0 / (spec.fp64_tflops * 1e12 * simt)
    t_int = f["insts_int"] * 32.0 / (spec.int32_tops * 1e12 * simt)
    t_sfu = f["insts_sfu"] * 32.0 / (spec.sfu_per_sm * sms * clock)
    gmem_insts = f["insts_ld_global"] + f["insts_st_global"] + f["insts_local"] + f["insts_atomic"]
    t_lsu = gmem_insts * 32.0 / (spec.ldst_per_sm * sms * clock)
    t_smem = (f["smem_accesses"] + f["smem_bank_conflicts"]) / (sms * clock)
    tensor_peak = perf.peak_flops(w, spec)
    # MMA instructions in a kernel not on the tensor path: FP16 tensor cores, else FP32 multiply-adds
    tensor_peak = np.where(w.tensor, tensor_peak, spec.tensor_flops("fp16") or perf.matmul_simt_flops(spec, "fp16"))
    t_tensor = f["tensor_flops"] / (tensor_peak * params.tensor_eff)
    pipes = np.maximum.reduce([t_issue, t_fp32, t_fp16, t_fp64, t_int, t_sfu, t_lsu, t_smem, t_tensor])
    t_compute = pipes * imbalance
    traffic = f["gmem_sectors"] * 32.0 + f["local_bytes"]
    footprint = f["footprint_lines"] * 128.0
    footprint = np.where(footprint > 0, footprint, traffic)
    l2_hit = np.clip(reuse_l2 * min(1.0, spec.l2_bytes / _REUSE_L2_BYTES), 0.0, 1.0)
    repeat = np.maximum(traffic - footprint, 0.0)
    dram = np.where(footprint <= spec.l2_bytes, footprint, footprint + repeat * (1.0 - l2_hit))
    l2_bytes = traffic * (1.0 - np.clip(reuse_l1, 0.0, 1.0))
    t_dram = dram / (spec.bandwidth_bps * params.bw_eff)
    t_l2 = l2_bytes / spec.l2_bandwidth_bps
    t_memory = np.maximum(t_dram, t_l2)
    frac_mem = gmem_insts / np.maximum(f["warp_insts"], 1.0)
    dep_cycles = _ALU_DEP_CYCLES + frac_mem * spec.dram_latency_ns * 1e-9 * clock
    chain = np.where(np.isfinite(dep_chain), dep_chain, 0.0)
    waves = np.ceil(blocks / (sms * bps))
    t_latency = chain * dep_cycles / clock * waves
    work = np.maximum.reduce([t_compute, t_memory, t_latency]) * 1e9
    total = fixed + work
    regime = np.where(t_compute >= t_memory, perf.COMPUTE, perf.MEMORY)
    regime = np.where(t_latency >= np.maximum(t_compute, t_memory), perf.LATENCY, regime)
    regime = np.where(fixed > work, perf.LAUNCH, regime).astype(np.int8)
    ok = has_features(table)
    return np.where(ok, total, np.nan), regime


def target_work(w: Workload, names: np.ndarray, target: GPUSpec, source: GPUSpec | None
                ) -> tuple[Workload, np.ndarray]:
    """The kernels' work as ``target`` runs it, for a model with no measured time to scale (the
    same move the scaled model makes on its target side, :func:`cascade.engine.convmath.target_math`):
    a tensor kernel of a dtype ``target`` has no tensor cores for on its CUDA cores
    (:func:`cascade.engine.perf.on_spec`, flagged ``OFF_TENSOR``), and FP32 convolutions on TF32
    tensor cores where PyTorch's cuDNN puts them (:func:`cascade.engine.convmath.cudnn_math`, flagged
    ``TF32_CONV``). A name that pins a convolution to FP32 CUDA-core math (``scudnn``) is kept
    only where ``source``, the GPU the trace ran on, is of ``target``'s SM design: on another
    design cuDNN picks that GPU's own kernels. Returns the workload and the flag bits."""
    on = perf.on_spec(w, target)
    flags = np.where(w.tensor & ~on.tensor, extrapolation.OFF_TENSOR, 0).astype(extrapolation.FLAGS_DTYPE)
    same_design = source is not None and source.sm_version == target.sm_version
    moved, charged = convmath.cudnn_math(on, names, target, measured=same_design)
    flags |= np.where(charged & ~w.tensor, extrapolation.TF32_CONV, 0).astype(extrapolation.FLAGS_DTYPE)
    return moved, flags


class AnalyticalModel:
    """Instruction-feature model on the target (see module doc); no source times needed."""

    name = "analytical"
    config_type = AnalyticalConfig

    def predict(self, table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext) -> ModelOutput:
        cfg = ctx.config if isinstance(ctx.config, AnalyticalConfig) else AnalyticalConfig()
        pred, regime = analytical_ns(table, w, target, ctx)
        missing = ~np.isfinite(pred)
        # the work as the target runs it (what the scaled model's target side runs too): FP32
        # convolutions on TF32 tensor cores where PyTorch's cuDNN puts them, tensor kernels of a
        # dtype the target lacks on its CUDA cores
        w_t, moved = target_work(w, table["name"], target, ctx.source)
        if missing.any():
            cal = ctx.calibration
            fixed = fixed_kernel_ns(cfg, target, cal)
            times = perf.kernel_times(w_t, target, cal.params_for(target, ctx.archs, cfg.measurement), cal, fixed,
                                      perf.target_tiles(w_t, target, cal, ctx.source))
            pred = np.where(missing, times.total_ns, pred)
            regime = np.where(missing, times.regime, regime).astype(np.int8)
        # the work as counted cannot run faster (an instruction trace's kernel ran as it is traced)
        pred = np.maximum(pred, np.where(missing, perf.roofline_ns(w_t, target), perf.roofline_ns(w, target)))
        # instruction features carry no shape: only the target's own calibration matters
        fitted = calibrated_in(ctx.calibration, target.id, cfg.measurement)
        flags = np.full(len(w), 0 if fitted else extrapolation.TARGET_UNCALIBRATED, dtype=extrapolation.FLAGS_DTYPE)
        flags |= np.where(missing, moved, 0).astype(extrapolation.FLAGS_DTYPE)
        if missing.any():  # a convolution or pooling window from its work: whichever algorithm cuDNN picks there
            names = table["name"]
            window = (convmath.window_kinds(w, names) > 0) | convmath.convolution_kernels(w, names)
            flags |= np.where(missing & window, extrapolation.WINDOW, 0).astype(extrapolation.FLAGS_DTYPE)
        # which rows the instruction features predicted, and which their work (FLOPs, bytes,
        # shapes: the figure the end-to-end protocol measures for a prediction from the work alone)
        names = model_column(len(w), self.name)
        names[~missing] = FEATURES_LABEL
        counts = {k: int(v) for k, v in ((self.name, missing.sum()), (FEATURES_LABEL, (~missing).sum())) if v}
        return ModelOutput(pred, regime, names, flags, counts)
