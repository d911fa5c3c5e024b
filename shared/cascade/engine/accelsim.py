"""The ``accel-sim`` model: per-kernel cycles from Accel-Sim's own output.

:class:`AccelSimOutputParser` reads ``accel-sim.out`` stdout one line at a time, as it is
written, and yields a :class:`SimulatedKernel` when a kernel's statistics block is complete
(``kernel_name`` .. ``gpu_sim_insn`` .. ``gpu_total_sim_rate``). Cycles become times at the
core clock of ``-gpgpu_clock_domains``. :func:`predictions_from_simulation` maps simulated
kernels onto a kernel table; rows Accel-Sim did not simulate use the ``analytical`` model and
carry the :data:`cascade.engine.extrapolation.NOT_SIMULATED` extrapolation bit.

Running the simulator (subprocess, process group, cancel, timeout) is platform work, in
:mod:`cascade.platform.accelsim`; this module does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from cascade.engine import extrapolation, perf
from cascade.engine.analytical import AnalyticalConfig, AnalyticalModel
from cascade.engine.base import ModelContext, ModelOutput, model_column
from cascade.engine.workload import Workload
from cascade.errors import TraceFormatError, ValidationError
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable

_KV = re.compile(r"^\s*(kernel_name|kernel_launch_uid|gpu_sim_cycle|gpu_sim_insn|gpu_ipc|gpu_occupancy|L2_BW)"
                 r"\s*=\s*([^\s%]+)")
_COUNTER = re.compile(r"^\s*(L1D_total_cache_accesses|L1D_total_cache_misses|L2_total_cache_accesses|"
                      r"L2_total_cache_misses|bwutil|total_CMD)\s*=\s*([0-9.eE+-]+|-?nan)\s*$")
_DRAM = re.compile(r"^DRAM\[(\d+)\]:")
#: Lines after which a kernel's statistics blocks are over.
_STATS_END = ("kernel_name", "Processing kernel", "launching kernel", "gpgpu_simulation_time")
_RATE = re.compile(r"^\s*gpu_total_sim_rate\s*=\s*(\d+)")
_CLOCKS = re.compile(r"^\s*-gpgpu_clock_domains\s+([0-9.]+):([0-9.]+):([0-9.]+):([0-9.]+)")
_PROCESSING = re.compile(r"^Processing kernel\s+(\S+)")
_LAUNCH = re.compile(r"^launching kernel name:\s*(\S+)\s+uid:\s*(\d+)")
_KERNEL_FILE = re.compile(r"kernel-(\d+)(?:-ctx_0x[0-9a-fA-F]+)?\.trace(?:g)?(?:\.xz)?$")


@dataclass(frozen=True, slots=True)
class SimulatedKernel:
    """One kernel's statistics from an Accel-Sim run."""

    uid: int
    """``kernel_launch_uid`` (1-based launch order in the simulation)."""
    name: str
    cycles: int
    """``gpu_sim_cycle``: core cycles the kernel took."""
    instructions: int
    """``gpu_sim_insn``: warp-lane instructions simulated."""
    core_clock_mhz: float
    ipc: float = 0.0
    """``gpu_ipc``."""
    sim_rate_ips: float = 0.0
    """``gpu_total_sim_rate``: simulated instructions per wall second so far."""
    kernel_id: int | None = None
    """N of the ``kernel-N.traceg`` file Accel-Sim was processing, when it said."""
    line: int = 0
    """Output line that completed the kernel's statistics."""
    occupancy_pct: float | None = None
    """``gpu_occupancy``: achieved occupancy, percent of the maximum warps."""
    l2_bw_gbps: float | None = None
    """``L2_BW``: L2 bandwidth the kernel used, GB/s."""

    @property
    def duration_ns(self) -> float:
        """Simulated duration: cycles at the core clock."""
        return self.cycles / self.core_clock_mhz * 1e3


class KernelStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What Accel-Sim printed for one kernel, per kernel.

    Cycles, instructions, IPC, occupancy and L2 bandwidth are Accel-Sim's per-kernel lines.
    The L1D, L2 and DRAM counters it prints add up over the whole run (its stats scripts diff
    them between kernels), so the rates here are from the differences to the previous
    kernel's counters: hit rate = 1 - misses / accesses; DRAM bandwidth utilisation = busy
    data-bus cycles / DRAM command cycles over every channel (``bwutil`` x ``total_CMD``).
    None where Accel-Sim printed nothing (or no accesses) for the kernel.
    """

    uid: int
    """``kernel_launch_uid``."""
    kernel_id: int | None = None
    """N of the ``kernel-N.traceg`` Accel-Sim processed, when it said."""
    name: str = ""
    cycles: int = 0
    """``gpu_sim_cycle``."""
    instructions: int = 0
    """``gpu_sim_insn``."""
    ipc: float = 0.0
    """``gpu_ipc``."""
    occupancy_pct: float | None = None
    """``gpu_occupancy`` (percent)."""
    l2_bw_gbps: float | None = None
    """``L2_BW`` (GB/s)."""
    l1d_accesses: int | None = None
    l1d_hit_rate: float | None = None
    """0..1, from ``L1D_total_cache_accesses`` / ``L1D_total_cache_misses``."""
    l2_accesses: int | None = None
    l2_hit_rate: float | None = None
    """0..1, from ``L2_total_cache_accesses`` / ``L2_total_cache_misses``."""
    dram_bw_util: float | None = None
    """0..1, DRAM data-bus utilisation over all channels (``bwutil`` per ``DRAM[i]``)."""


def _delta(cur: float | None, prev: float | None) -> float | None:
    if cur is None:
        return None
    if prev is None or cur < prev:  # first kernel, or counters that were reset
        return cur
    return cur - prev


def _hit_rate(accesses: float | None, misses: float | None) -> float | None:
    if accesses is None or misses is None or accesses <= 0:
        return None
    return max(0.0, min(1.0, 1.0 - misses / accesses))


def kernel_id_of_file(path: str) -> int | None:
    """N of a ``.../kernel-N[-ctx_0x..].traceg`` path (None for anything else)."""
    m = _KERNEL_FILE.search(path.strip())
    return int(m.group(1)) if m else None


def core_clock_of_config(text: str) -> float | None:
    """Core clock (MHz) from ``-gpgpu_clock_domains`` in gpgpusim.config text (None when absent)."""
    for line in text.splitlines():
        m = _CLOCKS.match(line)
        if m:
            return float(m.group(1))
    return None


class AccelSimOutputParser:
    """Incremental parser of ``accel-sim.out`` stdout: :meth:`feed` one line at a time.

    ``core_clock_mhz``: the clock to use when the output has not (yet) printed
    ``-gpgpu_clock_domains`` (e.g. from the config's gpgpusim.config).
    """

    def __init__(self, source: str = "<accel-sim output>", *, core_clock_mhz: float | None = None) -> None:
        self.source = source
        self.clock: float | None = None
        self.fallback_clock = core_clock_mhz
        self.lineno = 0
        self.kernels: list[SimulatedKernel] = []
        self._current: dict[str, str] = {}
        self._start_line = 0
        self._file_id: int | None = None
        self._launch_ids: dict[int, int | None] = {}
        self.statistics: list[KernelStatistics] = []
        """Per kernel, in output order, once its statistics blocks are over."""
        self._post: SimulatedKernel | None = None
        self._counters: dict[str, float] = {}
        self._dram: dict[int, tuple[float, float]] = {}
        self._channel: int | None = None
        self._bwutil: float | None = None
        self._prev: dict[str, float] = {}
        self._prev_dram: dict[int, tuple[float, float]] = {}

    def feed(self, line: str) -> SimulatedKernel | None:
        """Consume one output line; the kernel whose statistics it completes, if any."""
        self.lineno += 1
        if self._post is not None:
            if line.startswith(_STATS_END):
                self._close_statistics()
            else:
                self._post_line(line)
                return None
        if self.clock is None and line.startswith("-gpgpu_clock_domains"):
            mc = _CLOCKS.match(line)
            if mc:
                self.clock = float(mc.group(1))
                return None
        if line.startswith("Processing kernel"):
            mp = _PROCESSING.match(line)
            if mp:
                self._file_id = kernel_id_of_file(mp.group(1))
            return None
        if line.startswith("launching kernel name"):
            ml = _LAUNCH.match(line)
            if ml:
                self._launch_ids[int(ml.group(2))] = self._file_id
            return None
        if self._current and "gpu_sim_insn" in self._current and line.startswith("gpu_total_sim_rate"):
            mr = _RATE.match(line)
            kernel = self._complete(float(mr.group(1)) if mr else 0.0)
            self._post = kernel
            return kernel
        if not line.startswith(("kernel_name", "kernel_launch_uid", "gpu_sim_cycle", "gpu_sim_insn",
                                "gpu_ipc", "gpu_occupancy", "L2_BW")):
            return None
        m = _KV.match(line)
        if not m:
            return None
        key, value = m.group(1), m.group(2)
        if key == "kernel_name":
            done = self._complete(0.0) if "gpu_sim_insn" in self._current else None
            if done is not None:
                self._close_statistics(done)
            self._current = {"kernel_name": value}
            self._start_line = self.lineno
            return done
        if self._current:
            self._current[key] = value
        return None

    def finish(self) -> SimulatedKernel | None:
        """End of output: the last kernel if its statistics stopped before the sim rate."""
        if self._post is not None:
            self._close_statistics()
        if "gpu_sim_insn" in self._current:
            done = self._complete(0.0)
            self._close_statistics(done)
            return done
        return None

    def _post_line(self, line: str) -> None:
        """A line of the cache / DRAM / L2 blocks after a kernel's statistics."""
        if line.startswith("DRAM["):
            md = _DRAM.match(line)
            if md:
                self._channel = int(md.group(1))
                self._bwutil = None
            return
        m = _COUNTER.match(line)
        if not m:
            return
        key, raw = m.group(1), m.group(2)
        try:
            value = float(raw)
        except ValueError:
            return
        if value != value:  # nan
            return
        if key == "bwutil":
            self._bwutil = value
        elif key == "total_CMD":
            if self._channel is not None and self._bwutil is not None:
                self._dram[self._channel] = (round(self._bwutil * value), value)
                self._bwutil = None
        else:
            self._counters[key] = value

    def _close_statistics(self, kernel: SimulatedKernel | None = None) -> None:
        """The statistics of ``kernel`` (default: the one whose blocks were being read)."""
        k = kernel or self._post
        self._post = None
        if k is None:
            return
        cur, prev = self._counters, self._prev
        d = {key: _delta(cur.get(key), prev.get(key)) for key in (
            "L1D_total_cache_accesses", "L1D_total_cache_misses", "L2_total_cache_accesses",
            "L2_total_cache_misses")}
        busy = cmd = 0.0
        for ch, (b, c) in self._dram.items():
            pb, pc = self._prev_dram.get(ch, (0.0, 0.0))
            if c < pc:
                pb, pc = 0.0, 0.0
            busy += b - pb
            cmd += c - pc
        l1a, l2a = d["L1D_total_cache_accesses"], d["L2_total_cache_accesses"]
        self.statistics.append(KernelStatistics(
            uid=k.uid, kernel_id=k.kernel_id, name=k.name, cycles=k.cycles,
            instructions=k.instructions, ipc=k.ipc, occupancy_pct=k.occupancy_pct,
            l2_bw_gbps=k.l2_bw_gbps, l1d_accesses=None if l1a is None else int(l1a),
            l1d_hit_rate=_hit_rate(l1a, d["L1D_total_cache_misses"]),
            l2_accesses=None if l2a is None else int(l2a),
            l2_hit_rate=_hit_rate(l2a, d["L2_total_cache_misses"]),
            dram_bw_util=(max(0.0, min(1.0, busy / cmd)) if self._dram and cmd > 0 else None)))
        self._prev = {**prev, **cur}
        self._prev_dram = {**self._prev_dram, **self._dram}
        self._counters, self._dram = {}, {}
        self._channel = self._bwutil = None

    def _complete(self, rate: float) -> SimulatedKernel:
        cur, self._current = self._current, {}
        clock = self.clock or self.fallback_clock
        if clock is None or clock <= 0:
            raise TraceFormatError(self.source, self._start_line,
                                   "-gpgpu_clock_domains before the kernel statistics")
        try:
            uid = int(cur.get("kernel_launch_uid", len(self.kernels) + 1))
            kernel = SimulatedKernel(
                uid=uid, name=cur["kernel_name"], cycles=int(cur["gpu_sim_cycle"]),
                instructions=int(cur["gpu_sim_insn"]), core_clock_mhz=clock,
                ipc=float(cur.get("gpu_ipc", "0") or 0), sim_rate_ips=rate,
                kernel_id=self._launch_ids.get(uid), line=self.lineno,
                occupancy_pct=_number(cur.get("gpu_occupancy")), l2_bw_gbps=_number(cur.get("L2_BW")),
            )
        except (KeyError, ValueError):
            raise TraceFormatError(self.source, self._start_line,
                                   "kernel_name, kernel_launch_uid, gpu_sim_cycle, gpu_sim_insn integers",
                                   str(cur)) from None
        self.kernels.append(kernel)
        return kernel


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value == value else None


def parse_accelsim_output(text: str | Iterable[str], source: str = "<accel-sim output>",
                          *, core_clock_mhz: float | None = None) -> list[SimulatedKernel]:
    """Per-kernel results from a whole ``accel-sim.out`` stdout (errors name the source and line)."""
    parser = AccelSimOutputParser(source, core_clock_mhz=core_clock_mhz)
    lines = text.splitlines() if isinstance(text, str) else text
    for line in lines:
        parser.feed(line)
    parser.finish()
    if not parser.kernels:
        raise TraceFormatError(source, None, "at least one kernel's gpu_sim_cycle statistics")
    return parser.kernels


class AccelSimConfig(msgspec.Struct, frozen=True, kw_only=True, tag="accel-sim", tag_field="kind"):
    """What Accel-Sim simulated: cycles per kernel and the core clock they run at.

    Running the simulator is platform work (the simulator service, or
    :func:`cascade.platform.accelsim.simulate` for ``cascade predict`` and scripts), which
    fills this config; the model itself only maps the cycles onto the kernel table.
    """

    simulated_cycles: dict[str, int] = {}
    """Cycles per table ``kernel_id`` (a decimal string, as JSON object keys are)."""
    core_clock_mhz: float = 0.0
    """Core clock for ``simulated_cycles``."""


def _cycles_by_kernel(cycles: dict[str, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for key, value in cycles.items():
        if not key.isdigit() or len(key) > 18 or value < 0:
            raise ValidationError(f"expected a kernel id (digits) and cycles >= 0, got {key!r}: {value!r}",
                                  field="config.simulated_cycles")
        out[int(key)] = value
    return out


class AccelSimModel:
    """Cycle-level simulation by Accel-Sim; kernels it did not report use ``analytical``.

    The simulator service streams the binary's output itself
    (:func:`cascade.platform.accelsim.run_accelsim`) and passes the cycles in
    :class:`AccelSimConfig`; :func:`cascade.platform.accelsim.simulate` does the same without an
    event loop.
    """

    name = "accel-sim"
    config_type = AccelSimConfig

    def predict(self, table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext) -> ModelOutput:
        cfg = ctx.config
        if isinstance(cfg, AccelSimConfig) and cfg.simulated_cycles:
            if cfg.core_clock_mhz <= 0:
                raise ValidationError("expected the core clock (MHz > 0) of the simulated cycles",
                                      field="config.core_clock_mhz")
            done = [SimulatedKernel(uid=kid, name="", cycles=c, instructions=0,
                                    core_clock_mhz=cfg.core_clock_mhz, kernel_id=kid)
                    for kid, c in _cycles_by_kernel(cfg.simulated_cycles).items()]
            return predictions_from_simulation(table, w, target, ctx, done)
        raise ValidationError(
            "the accel-sim model maps simulated cycles onto the kernels: run the simulation first "
            "(a run with model accel-sim does, through the simulator service; in Python "
            "cascade.platform.accelsim.simulate(...) returns the AccelSimConfig to pass)",
            field="config.simulated_cycles")


def rows_of_simulated(table: KernelTable, sims: Sequence[SimulatedKernel],
                      listed_ids: Sequence[int] = ()) -> np.ndarray:
    """Per table row, the index into ``sims`` of its simulated kernel (-1: not simulated).

    A simulated kernel is matched by the ``kernel-N`` file Accel-Sim processed, else by the
    N of the ``uid``-th kernel ``listed_ids`` (kernelslist.g order), else by ``uid`` itself,
    against the table's ``kernel_id``; a table without kernel ids matches in launch order.
    """
    n = len(table)
    ids = np.asarray(table["kernel_id"], dtype=np.int64)
    if not np.any(ids > 0):
        ids = np.arange(1, n + 1)
    row_of: dict[int, int] = {}
    for row, known in enumerate(ids.tolist()):
        row_of.setdefault(int(known), row)
    out = np.full(n, -1, dtype=np.int64)
    for i, s in enumerate(sims):
        by_list = listed_ids[s.uid - 1] if 0 < s.uid <= len(listed_ids) else s.uid
        kid = s.kernel_id if s.kernel_id is not None else by_list
        hit = row_of.get(int(kid))
        if hit is not None:
            out[hit] = i
    return out


def predictions_from_simulation(table: KernelTable, w: Workload, target: GPUSpec, ctx: ModelContext,
                                sims: Sequence[SimulatedKernel],
                                listed_ids: Sequence[int] = ()) -> ModelOutput:
    """Simulated durations per table row; rows Accel-Sim did not simulate use ``analytical``
    and carry :data:`cascade.engine.extrapolation.NOT_SIMULATED` in their flags."""
    n = len(table)
    match = rows_of_simulated(table, sims, listed_ids)
    durations = np.array([s.duration_ns for s in sims], dtype=np.float64)
    pred = np.where(match >= 0, durations[np.maximum(match, 0)] if len(sims) else np.nan, np.nan)
    names = model_column(n, AccelSimModel.name)
    regime = np.full(n, perf.COMPUTE, dtype=np.int8)
    flags = np.zeros(n, dtype=extrapolation.FLAGS_DTYPE)
    missing = match < 0
    if missing.any():
        sub_ctx = ModelContext(ctx.source, ctx.calibration, AnalyticalConfig(), ctx.archs)
        out = AnalyticalModel().predict(table, w, target, sub_ctx)
        pred = np.where(missing, out.predicted_ns, pred)
        regime = np.where(missing, out.regime, regime).astype(np.int8)
        names[missing] = "analytical"
        base = out.flags if out.flags is not None else np.zeros(n, dtype=extrapolation.FLAGS_DTYPE)
        flags = np.where(missing, base | extrapolation.NOT_SIMULATED, 0).astype(extrapolation.FLAGS_DTYPE)
        pred = np.where(missing, np.maximum(pred, perf.roofline_ns(w, target)), pred)
    return ModelOutput(pred, regime, names, flags=flags)
