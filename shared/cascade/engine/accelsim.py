"""The ``accel-sim`` model: run a configured ``accel-sim.out`` on a trace directory and
read per-kernel ``gpu_sim_cycle`` from its output, converted with the core clock of
``-gpgpu_clock_domains``."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from cascade.engine import perf
from cascade.engine.models import ModelContext, ModelOutput, _names
from cascade.engine.workload import Workload
from cascade.errors import CascadeError, JobTimeoutError, TraceFormatError, ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

_KV = re.compile(r"^\s*(kernel_name|kernel_launch_uid|gpu_sim_cycle|gpu_sim_insn)\s*=\s*(\S+)")
_CLOCKS = re.compile(r"^\s*-gpgpu_clock_domains\s+([0-9.]+):([0-9.]+):([0-9.]+):([0-9.]+)")


@dataclass(frozen=True, slots=True)
class SimulatedKernel:
    """One kernel's statistics from an Accel-Sim run."""

    uid: int
    name: str
    cycles: int
    instructions: int
    core_clock_mhz: float

    @property
    def duration_ns(self) -> float:
        """Simulated duration: cycles at the core clock."""
        return self.cycles / self.core_clock_mhz * 1e3


def parse_accelsim_output(text: str, source: str = "<accel-sim output>") -> list[SimulatedKernel]:
    """Per-kernel results from ``accel-sim.out`` stdout (errors name the source and line)."""
    clock: float | None = None
    kernels: list[SimulatedKernel] = []
    current: dict[str, str] = {}
    start_line = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if clock is None:
            mc = _CLOCKS.match(line)
            if mc:
                clock = float(mc.group(1))
                continue
        m = _KV.match(line)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if key == "kernel_name":
            current = {"kernel_name": value}
            start_line = lineno
            continue
        if not current:
            continue
        current[key] = value
        if key == "gpu_sim_insn":
            if clock is None:
                raise TraceFormatError(source, lineno, "-gpgpu_clock_domains before the kernel statistics")
            try:
                kernels.append(SimulatedKernel(
                    uid=int(current.get("kernel_launch_uid", len(kernels) + 1)),
                    name=current["kernel_name"],
                    cycles=int(current["gpu_sim_cycle"]),
                    instructions=int(value),
                    core_clock_mhz=clock,
                ))
            except (KeyError, ValueError):
                raise TraceFormatError(source, start_line,
                                       "kernel_name, kernel_launch_uid, gpu_sim_cycle, gpu_sim_insn integers",
                                       str(current)) from None
            current = {}
    if not kernels:
        raise TraceFormatError(source, None, "at least one kernel's gpu_sim_cycle statistics")
    return kernels


async def run_accelsim(
    binary: str | Path,
    trace_dir: str | Path,
    config_files: list[str | Path],
    *,
    timeout_s: float = 3600.0,
) -> list[SimulatedKernel]:
    """Run ``accel-sim.out -trace DIR/kernelslist.g -config ...`` and parse its output."""
    kernelslist = Path(trace_dir) / "kernelslist.g"
    if not kernelslist.is_file():
        raise ValidationError(f"{kernelslist} does not exist", field="trace_dir")
    args = [str(binary), "-trace", str(kernelslist)]
    for cfg in config_files:
        args += ["-config", str(cfg)]
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    except OSError as exc:
        raise CascadeError(f"cannot start accel-sim {binary}: {exc}") from None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise JobTimeoutError(f"accel-sim ran past {timeout_s} s on {trace_dir}") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise CascadeError(f"accel-sim exited with {proc.returncode}: {text[-400:]}")
    return parse_accelsim_output(text, str(binary))


class AccelSimConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where accel-sim and its inputs are."""

    binary: str = ""
    """Path of ``accel-sim.out``."""
    trace_dir: str = ""
    """Trace directory with ``kernelslist.g``."""
    config_files: list[str] = []
    """``gpgpusim.config`` and ``trace.config`` of the target GPU."""
    timeout_s: float = 3600.0


class AccelSimModel:
    """Cycle-level simulation by Accel-Sim; kernels it did not report use ``analytical``."""

    name = "accel-sim"
    config_type = AccelSimConfig

    def predict(self, table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext) -> ModelOutput:
        cfg = ctx.config
        if not isinstance(cfg, AccelSimConfig) or not cfg.binary or not cfg.trace_dir:
            raise ValidationError("the accel-sim model needs AccelSimConfig(binary=..., trace_dir=..., "
                                  "config_files=[...])", field="config")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ValidationError("inside an event loop, await run_accelsim() and pass its results "
                                  "to predictions_from_simulation()", field="model")
        sims = asyncio.run(run_accelsim(cfg.binary, cfg.trace_dir, list(cfg.config_files),
                                        timeout_s=cfg.timeout_s))
        return predictions_from_simulation(table, w, target, ctx, sims)


def predictions_from_simulation(table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext,
                                sims: list[SimulatedKernel]) -> ModelOutput:
    """Map simulated kernels to table rows by ``kernel_id`` (else launch order)."""
    from cascade.engine.analytical import AnalyticalConfig, AnalyticalModel

    by_uid = {s.uid: s.duration_ns for s in sims}
    ids = table["kernel_id"]
    if not np.any(ids > 0):
        ids = np.arange(1, len(table) + 1)
    pred = np.array([by_uid.get(int(i), np.nan) for i in ids], dtype=np.float64)
    names = _names(len(table), AccelSimModel.name)
    regime = np.full(len(table), perf.COMPUTE, dtype=np.int8)
    missing = ~np.isfinite(pred)
    if missing.any():
        sub_ctx = ModelContext(ctx.source, ctx.calibration, AnalyticalConfig(), ctx.archs)
        out = AnalyticalModel().predict(table, w, target, sub_ctx)
        pred = np.where(missing, out.predicted_ns, pred)
        regime = np.where(missing, out.regime, regime).astype(np.int8)
        names[missing] = "analytical"
    return ModelOutput(np.maximum(pred, perf.roofline_ns(w, target)), regime, names)
