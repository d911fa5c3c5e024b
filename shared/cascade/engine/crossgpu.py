"""What a kernel's measured time on one GPU allows on another: the work a time implies where
the trace has none (:func:`infer_shapeless_work`), the physical bracket on the ratio
(:func:`ratio_bracket`, :func:`bracket_ns`), kernels starved of parallelism
(:func:`starved`), traffic-bound chains of kernels (:func:`chained`) and latency-bound ones."""

from __future__ import annotations

import numpy as np

from cascade import opfamilies
from cascade.calibration import ResolvedParams
from cascade.engine.extrapolation import (
    FLAGS_DTYPE,
    INFERRED_BLEND,
    INFERRED_FROM_NAME,
    SOURCE_UNCALIBRATED,
)
from cascade.engine.perf import (
    COMPUTE,
    LAUNCH,
    MEMORY,
    KernelTimes,
    family_bw_eff,
    launch_waves,
    peak_flops,
    streams_weights,
)
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec

#: A kernel whose measured time exceeds this many launch overheads is never launch-bound.
LONG_KERNEL_LAUNCHES = 4.0


def infer_shapeless_work(w: Workload, t_src: np.ndarray, src: GPUSpec, params: ResolvedParams,
                         fixed_src: float) -> tuple[Workload, np.ndarray]:
    """Give kernels with a measured time but no known work (no shapes, FLOPs or bytes) the work
    that time implies on the source, in the class their name says (:func:`opfamilies.work_class`):

    * compute-class (cuBLAS / cuDNN / CUTLASS / xmma GEMM and convolution, attention):
      ``flops = (t - fixed) x peak(dtype, tensor path the name says) x achievable fraction``;
    * memory-class (elementwise, reduction, norm, softmax, copy, index):
      ``bytes = (t - fixed) x DRAM bandwidth x the family's achievable fraction``;
    * blend (anything else): both, each alone taking ``t - fixed`` on the source, so the
      side that scales worse bounds it on the target.

    Only kernels that ran more than :data:`LONG_KERNEL_LAUNCHES` launch overheads are
    inferred (shorter ones are launch-bound as measured). Returns the completed workload
    and the extrapolation bits (:data:`INFERRED_FROM_NAME`, :data:`INFERRED_BLEND`).
    """
    n = len(w)
    flags = np.zeros(n, dtype=FLAGS_DTYPE)
    with np.errstate(invalid="ignore"):
        todo = ((w.flops <= 0) & (w.bytes <= 0) & np.isfinite(t_src)
                & (t_src > LONG_KERNEL_LAUNCHES * fixed_src))
    if not todo.any():
        return w, flags
    work_ns = np.where(todo, np.maximum(np.nan_to_num(t_src) - fixed_src, 0.0), 0.0)
    cls = opfamilies.work_class(w.family)
    rate = peak_flops(w, src) * np.where(w.tensor, params.tensor_eff, params.simt_eff)
    bw = src.bandwidth_bps * family_bw_eff(w, params)
    compute = todo & (cls != opfamilies.MEMORY_CLASS)
    memory = todo & (cls != opfamilies.COMPUTE_CLASS)
    flops = np.where(compute, work_ns * 1e-9 * rate, w.flops)
    nbytes = np.where(memory, work_ns * 1e-9 * bw, w.bytes)
    flags[todo & (cls != opfamilies.BLEND_CLASS)] = INFERRED_FROM_NAME
    flags[todo & (cls == opfamilies.BLEND_CLASS)] = INFERRED_BLEND
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    fields.update(flops=flops, bytes=nbytes)
    return Workload(**fields), flags


#: How much the achievable fraction of a peak (compute or bandwidth) may differ between two
#: GPUs on the same kernel: the bracket of :func:`ratio_bracket` is widened by this factor on
#: each side. In the measured FP32 data the largest GEMMs reach 85-93% of the FP32 peak on the
#: V100 and the A100 alike, and streaming kernels 60-90% of DRAM bandwidth: a spread of about
#: 1.2 between architectures, never the 2-8x a wrong regime gives.
ACHIEVABLE_SPREAD = 1.5

#: A kernel whose measured work (source time less its fixed launch or harness time) is under this
#: many microseconds is latency-bound: its ratio may follow the fixed-time, clock or DRAM latency
#: ratio; longer ones keep to the bracket of their work.
SHORT_KERNEL_US = 10.0


def ratio_bracket(w_src: Workload, w_tgt: Workload, src: GPUSpec, target: GPUSpec,
                  sustained_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel, the least and the most that its work's time may scale by from ``src`` to
    ``target`` (target time / source time), whatever a model says: between the compute ratio
    of its path (FLOPs over the peak of its dtype and unit on each GPU, so a convolution moved
    to TF32 or a tensor kernel moved to CUDA cores scales by what it runs on) and the DRAM
    bandwidth ratio, and, for a working set that fits both L2s, the L2 bandwidth ratio.
    A power-limited board (``sustained_clock_mhz``) widens its compute side by its boost /
    sustained clock ratio (x ``sustained_scale``), and both ends by :data:`ACHIEVABLE_SPREAD`
    (the fraction of a peak two architectures reach on one kernel differs that much). Physics,
    no fitted efficiency: a name-based or fitted model may move inside it, never outside."""
    ps = peak_flops(w_src, src)
    pt = peak_flops(w_tgt, target)
    with np.errstate(invalid="ignore", divide="ignore"):
        known = (w_src.flops > 0) & (w_tgt.flops > 0)
        rc = np.where(known, (w_tgt.flops / pt) / (w_src.flops / ps), ps / pt)
    rc = np.where(np.isfinite(rc) & (rc > 0), rc, 1.0)
    slow_s = max(1.0, src.sustained_clock_ratio / max(sustained_scale, 1e-9))
    slow_t = max(1.0, target.sustained_clock_ratio / max(sustained_scale, 1e-9))
    rb = src.bandwidth_bps / target.bandwidth_bps
    # a grid that does not fill the GPU runs at its SMs' speed, not the whole GPU's
    rsm = rc * (target.sms / src.sms)
    lo = np.minimum(np.minimum(rc, rsm) / slow_s, rb) / ACHIEVABLE_SPREAD
    hi = np.maximum(np.maximum(rc, rsm) * slow_t, rb) * ACHIEVABLE_SPREAD
    with np.errstate(invalid="ignore"):
        fits = np.nan_to_num(w_src.bytes, nan=np.inf) <= min(src.l2_bytes, target.l2_bytes)
    rl2 = src.l2_bandwidth_bps / target.l2_bandwidth_bps
    lo = np.where(fits, np.minimum(lo, rl2), lo)
    hi = np.where(fits, np.maximum(hi, rl2), hi)
    return lo, hi


#: A GEMM whose measured source time is more than this factor off its source model ran a kernel
#: that physics does not explain (a library's serial K loop where another GPU's splits K, a
#: fallback kernel): its measured time says nothing of what the same work costs elsewhere, so
#: the bracket does not hold it.
UNEXPLAINED_FACTOR = 3.0


def bracket_applies(w: Workload, flags: np.ndarray, t_src: np.ndarray | None = None,
                    model_src: np.ndarray | None = None) -> np.ndarray:
    """Kernels a prediction must keep inside :func:`ratio_bracket`: every kernel but a GEMM that
    the target's fit covers (the target calibrated, its shape cell in the fit data, its path
    unchanged: no extrapolation bit but an uncalibrated source's), whose fitted library behaviour
    (tile choice, split-K, under-filled waves) is measured and may reach past the physics of
    peaks: it is the target's model that predicts such a GEMM (the source's measured deviation
    carries over by the fitted transfer exponent only). GEMVs and small-M
    GEMMs are always held to it (no GEMM grid reaches their regime's physics from the fit). A
    GEMM (not a GEMV) whose measured source time (``t_src``) is more than :data:`UNEXPLAINED_FACTOR`
    off the source model's (``model_src``) is not: the library ran something physics does not
    describe."""
    held = ~w.is_gemm | ((flags & ~SOURCE_UNCALIBRATED) != 0) | streams_weights(w)
    if t_src is not None and model_src is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            off = t_src / model_src
        odd = np.isfinite(off) & ((off > UNEXPLAINED_FACTOR) | (off < 1.0 / UNEXPLAINED_FACTOR))
        held &= ~(w.is_gemm & odd & ~streams_weights(w))
    return held


def bracket_ns(t_src: np.ndarray, fixed_src: float, fixed_tgt: float, lo: np.ndarray, hi: np.ndarray,
               latency_ratios: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The least and most target time of each measured kernel: its fixed (launch or harness)
    time on the target plus its measured work (source time less the source's fixed time) x the
    ratio bracket of :func:`ratio_bracket`. A kernel whose work is under :data:`SHORT_KERNEL_US` is
    latency-bound: it may also land anywhere its source time x the fixed-time ratio or any of
    ``latency_ratios`` (the clock ratio, the DRAM latency ratio: :func:`latency_ratios`) takes it,
    x :data:`ACHIEVABLE_SPREAD`. NaN where the source time is unknown."""
    work = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src, 0.0)
    low = fixed_tgt + work * lo
    high = fixed_tgt + work * hi
    # latency-bound: the work beyond the fixed (launch, harness) time is under a few microseconds
    short = np.isfinite(t_src) & (work < SHORT_KERNEL_US * 1e3)
    ratios = [*latency_ratios, *([fixed_tgt / fixed_src] if fixed_src > 0 else [])]
    if short.any() and ratios:
        low = np.where(short, np.minimum(low, t_src * min(ratios) / ACHIEVABLE_SPREAD), low)
        high = np.where(short, np.maximum(high, t_src * max(ratios) * ACHIEVABLE_SPREAD), high)
    unknown = ~np.isfinite(t_src) | (t_src <= 0)
    return np.where(unknown, np.nan, low), np.where(unknown, np.nan, high)


#: A memory-class kernel whose modelled streaming time (its bytes at the fitted bandwidth
#: fraction) is under this fraction of its measured work on the source is starved of parallelism.
STARVED_FRACTION = 0.5


def starved(w: Workload, inferred: np.ndarray, single: np.ndarray, t_src: np.ndarray,
            fixed_src: float, ms: KernelTimes) -> np.ndarray:
    """Kernels bound by what a few blocks keep in flight, not by DRAM: memory-class but a gather (an
    embedding's time follows its chain of dependent loads), one kernel per row (``single``), bytes
    known (not inferred from the time), memory-bound in the source model, :data:`SHORT_KERNEL_US` of
    work or more (shorter ones are latency-bound, :func:`bracket_ns`), and reaching under
    :data:`STARVED_FRACTION` of that model's streaming rate on the source (a
    grid narrower than the GPU, one block looping over a long row: a LayerNorm over 16 rows of 4 M
    elements runs at 4% of an A100's bandwidth and takes the same time on a T4)."""
    work = np.nan_to_num(t_src, nan=0.0) - fixed_src
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = ms.work_ns / work
    streaming = (opfamilies.work_class(w.family) == opfamilies.MEMORY_CLASS) & (w.family != opfamilies.EMBEDDING)
    return (streaming & (inferred == 0) & (w.bytes > 0) & single & (work >= SHORT_KERNEL_US * 1e3)
            & np.isfinite(frac) & (frac < STARVED_FRACTION) & (ms.compute_ns < ms.memory_ns))


def starved_ns(w: Workload, t_src: np.ndarray, fixed_src: float, fixed_tgt: float, ms: KernelTimes,
               mt: KernelTimes, src: GPUSpec, target: GPUSpec) -> np.ndarray:
    """Target time of a :func:`starved` kernel: its streaming part as the target model has it, the
    rest of its measured work (what the blocks in flight could not hide) by the clock ratio x the
    ratio of whole waves its grid takes on each GPU (one SM's issue rate: a grid under one wave
    takes one on any GPU, however many SMs it has; a grid of many waves spreads over them). A grid
    of unknown size is taken to be under one wave on both (a harness row, a trace without launch
    shapes)."""
    rest = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src - ms.work_ns, 0.0)
    with np.errstate(invalid="ignore"):
        ws = np.maximum(np.ceil(np.nan_to_num(launch_waves(w, src), nan=1.0)), 1.0)
        wt = np.maximum(np.ceil(np.nan_to_num(launch_waves(w, target), nan=1.0)), 1.0)
    return fixed_tgt + mt.work_ns + rest * (src.clock_hz / target.clock_hz) * (wt / ws)


#: Host time PyTorch eager spends issuing each operator of a chain after the first (Python, dispatch
#: and launch): KernelBench's multi-operator rows that move almost nothing (a hinge loss over 1 KB:
#: four operators, 70-90 us a call against a one-operator floor of 25 us; cosine similarity, nine
#: operators, 140-205 us) spend about 15 us per extra operator, on every GPU.
CHAIN_ISSUE_US = 15.0
#: A chain is taken as device-bound on the source only when its measured work is this many times
#: the host's issue time (in between, the host may be what was timed).
CHAIN_DEVICE_MARGIN = 1.5
#: Steepness of the L2 hit fraction of a chain's intermediates against its working set over the
#: L2 capacity (:func:`l2_hit_fraction`).
L2_FIT_STEEPNESS = 4.0


def l2_hit_fraction(nbytes: np.ndarray, spec: GPUSpec) -> np.ndarray:
    """Fraction of a kernel chain's intermediate traffic served by L2: each kernel reads what the
    one before wrote, and that stays in L2 when one kernel's working set (about the chain's own
    inputs and outputs, ``nbytes``) fits: 1 / (1 + (set / L2)^4), half at a set the size of L2."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        h = 1.0 / (1.0 + (np.nan_to_num(nbytes, nan=np.inf) / spec.l2_bytes) ** L2_FIT_STEEPNESS)
    return np.where(np.isfinite(h), h, 0.0)


def chain_bandwidth(nbytes: np.ndarray, spec: GPUSpec) -> np.ndarray:
    """Bandwidth (bytes/s) a chain's intermediate traffic moves at: L2 for the part that hits
    (:func:`l2_hit_fraction`), DRAM for the rest."""
    h = l2_hit_fraction(nbytes, spec)
    return 1.0 / ((1.0 - h) / spec.bandwidth_bps + h / spec.l2_bandwidth_bps)


#: Most traffic a kernel of a chain moves, in passes over the chain's own inputs and outputs (an
#: elementwise kernel reads one or two operands of the chain's size and writes one): a device time
#: that implies more was not spent moving data (a scan's dependent steps, a loss's launches over a
#: few kilobytes).
CHAIN_MAX_PASSES = 4.0


def chained(w: Workload, inferred: np.ndarray, kernels: np.ndarray, t_src: np.ndarray,
            fixed_src: float, src: GPUSpec, target: GPUSpec) -> np.ndarray:
    """Rows that time a traffic-bound chain of memory-class kernels: ``kernels`` > 1 and bytes
    known (a harness timing an operator that dispatches several, like MinGPT's GELU), their bytes
    the chain's inputs and outputs only, so that its intermediates move through L2 or DRAM as they
    fit. The chain's measured work must be device time (over :data:`CHAIN_DEVICE_MARGIN` x the
    host's issue time of its extra operators) that its traffic explains: at the bandwidth of the
    level that holds its intermediates on the source (:func:`chain_bandwidth`), at most
    :data:`CHAIN_MAX_PASSES` passes over its bytes per kernel."""
    # a gather follows its chain of loads; a reduction's later kernels work on reduced data (a
    # loss, a scan): neither's time is passes over its bytes
    streaming = ((opfamilies.work_class(w.family) == opfamilies.MEMORY_CLASS) & (w.family != opfamilies.EMBEDDING)
                 & (w.family != opfamilies.REDUCE))
    work = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src, 0.0)
    issue = np.maximum(kernels - 1, 0) * CHAIN_ISSUE_US * 1e3
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # a byte count near 0: not a chain
        passes = work * 1e-9 * chain_bandwidth(w.bytes, src) / w.bytes
        on_target = work * chain_bandwidth(w.bytes, src) / chain_bandwidth(w.bytes, target)
    return (streaming & (inferred == 0) & (w.bytes > 0) & (kernels > 1)
            & (np.minimum(work, on_target) >= CHAIN_DEVICE_MARGIN * issue) & np.isfinite(passes)
            & (passes <= CHAIN_MAX_PASSES * kernels))


def chain_ns(w: Workload, kernels: np.ndarray, t_src: np.ndarray, fixed_src: float, fixed_tgt: float,
             src: GPUSpec, target: GPUSpec) -> np.ndarray:
    """Target time of a :func:`chained` row: its measured work is the traffic of its kernels at the
    bandwidth of the level that held its intermediates on the source, moved at the target's
    (:func:`chain_bandwidth`), but no less than the host's issue time of its extra operators
    (:data:`CHAIN_ISSUE_US` each, the same on any GPU)."""
    work = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src, 0.0)
    issue = np.maximum(kernels - 1, 0) * CHAIN_ISSUE_US * 1e3
    ratio = chain_bandwidth(w.bytes, src) / chain_bandwidth(w.bytes, target)
    return fixed_tgt + np.maximum(issue, work * ratio)


def latency_ratios(src: GPUSpec, target: GPUSpec) -> tuple[float, float]:
    """Target / source time of a latency-bound kernel: the clock ratio (a dependent chain of
    instructions) and the DRAM latency ratio (a dependent chain of loads)."""
    return src.clock_hz / target.clock_hz, target.dram_latency_ns / src.dram_latency_ns


def never_launch_bound(regime: np.ndarray, times: KernelTimes, t_src: np.ndarray,
                       fixed_src: float) -> np.ndarray:
    """Regimes with ``launch`` replaced by compute/memory for kernels that ran more than
    :data:`LONG_KERNEL_LAUNCHES` launch overheads on the source."""
    with np.errstate(invalid="ignore"):
        long = np.isfinite(t_src) & (t_src > LONG_KERNEL_LAUNCHES * fixed_src)
    bound = np.where(times.compute_ns >= times.memory_ns, COMPUTE, MEMORY)
    return np.where((regime == LAUNCH) & long, bound, regime).astype(np.int8)
