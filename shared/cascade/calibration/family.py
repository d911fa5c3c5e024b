"""Architecture families: the closest calibrated sibling of a GPU the calibration never saw.

A GPU without calibration data on a measurement kind is predicted with its spec file's
physics and the fitted ratios of its architecture (:meth:`Calibration.params_for`). What the
calibration *measured* about such a prediction depends on how the GPU differs from the
calibrated one it borrows from:

- a **same-compute sibling** (same architecture, SM count, boost clock and FP32 / tensor
  peaks within 3%: H200 <- H100, A100 PCIe <- A100 SXM, A100 PCIe 80GB <- 40GB) differs only
  in memory (bandwidth, capacity, L2) or board power: a prediction into it is "the sibling's
  accuracy plus a bandwidth transfer", and it keeps the sibling's fitted fixed per-kernel time
  (the launch path is the same silicon);
- a **lineage sibling** (same architecture with other SMs or clocks, e.g. H100 PCIe <- H100
  SXM, L40S <- L4; else the architecture it descends from: B200 <- H100, Ada <- Ampere) differs
  in compute too: its accuracy is the leave-one-GPU-out figure into an uncalibrated GPU, and
  the basis names the sibling and what differs.

:func:`sibling` picks it; :func:`cascade.calibration.accuracy.expected_accuracy` and
:func:`cascade.engine.models.fixed_times` use it.
"""

from __future__ import annotations

import math

import msgspec

from cascade.calibration import Calibration, measurement_context
from cascade.gpus.spec import GPUSpec

#: Architecture -> the architectures it descends from, closest first.
LINEAGE: dict[str, tuple[str, ...]] = {
    "blackwell": ("hopper", "ampere"), "hopper": ("ampere",), "ada": ("ampere", "turing"),
    "ampere": ("turing", "volta"), "turing": ("volta",), "volta": ("pascal",), "pascal": ("volta",),
}
#: Relative tolerance for "the same" compute figure.
SAME = 0.03


class Sibling(msgspec.Struct, frozen=True, kw_only=True):
    """The calibrated GPU an uncalibrated one borrows from, and how they differ."""

    id: str
    same_compute: bool
    """Same arch, SMs, boost clock and FP32 / tensor peaks (within 3%)."""
    differs: list[str]
    """What differs, for people: ``memory bandwidth 4800 vs 3350 GB/s``."""


def _tensor(spec: GPUSpec) -> float:
    return max(spec.tensor_tflops.values(), default=0.0)


def _close(a: float, b: float) -> bool:
    return (a == b == 0) or (min(a, b) > 0 and abs(a / b - 1.0) <= SAME)


def differences(spec: GPUSpec, other: GPUSpec) -> list[str]:
    """The spec figures that differ by more than 3% (``spec`` vs ``other``)."""
    fields = (("arch", "arch", ""), ("sms", "SMs", ""), ("boost_clock_mhz", "boost clock", " MHz"),
              ("fp32_tflops", "FP32 peak", " TFLOP/s"), ("memory_bandwidth_gbps", "memory bandwidth", " GB/s"),
              ("memory_gb", "memory", " GB"), ("l2_mb", "L2", " MB"), ("tdp_w", "board power", " W"))
    out: list[str] = []
    for field, label, unit in fields:
        a, b = getattr(spec, field), getattr(other, field)
        if isinstance(a, str) or isinstance(b, str):
            if a != b:
                out.append(f"{label} {a} vs {b}")
        elif not _close(float(a), float(b)):
            out.append(f"{label} {a:g} vs {b:g}{unit}")
    ta, tb = _tensor(spec), _tensor(other)
    if not _close(ta, tb):
        out.append(f"tensor peak {ta:g} vs {tb:g} TFLOP/s")
    return out


def same_compute(spec: GPUSpec, other: GPUSpec) -> bool:
    """Same architecture, SM count, boost clock and peaks (within 3%)."""
    return (spec.arch == other.arch and spec.sms == other.sms and _close(spec.boost_clock_mhz, other.boost_clock_mhz)
            and _close(spec.fp32_tflops, other.fp32_tflops) and _close(_tensor(spec), _tensor(other)))


def sibling(cal: Calibration, spec: GPUSpec, measurement: str | None, specs: dict[str, GPUSpec]) -> Sibling | None:
    """The closest GPU calibrated on the measurement's context (``specs``: id -> spec of the
    GPUs that may be chosen); None for a calibrated GPU or when no relative is calibrated."""
    context = measurement_context(measurement) or "kernel"
    pool = cal.contexts.get(context) if context in cal.contexts else list(cal.specs)
    if spec.id in (pool or ()):
        return None
    lineage = (spec.arch, *LINEAGE.get(spec.arch, ()))
    best: tuple[tuple[float, float, float, str], GPUSpec] | None = None
    for sid in pool or ():
        other = specs.get(sid)
        if other is None or other.arch not in lineage:
            continue
        gap = (0.0 if same_compute(spec, other) else 1.0, float(lineage.index(other.arch)),
               abs(math.log(spec.sms / other.sms)) + abs(math.log(spec.boost_clock_mhz / other.boost_clock_mhz))
               + 0.5 * abs(math.log(spec.memory_bandwidth_gbps / other.memory_bandwidth_gbps)), sid)
        if best is None or gap < best[0]:
            best = (gap, other)
    if best is None:
        return None
    other = best[1]
    return Sibling(id=other.id, same_compute=same_compute(spec, other), differs=differences(spec, other))
