"""Simulation results: the :class:`SimResult` record, how it is built, stored and read.

One finished simulation (one configuration x replica of a run) writes two
objects, under keys that depend only on the run and sim ids (a redelivered job
that redoes the work overwrites them with the same content):

- ``results/{run}/{sim}/result.json``: a :class:`SimResult` (msgspec JSON):
  end-to-end and per-step predictions, baseline and error, top kernels,
  totals by kernel family and the provenance (model, spec, calibration).
- ``results/{run}/{sim}/kernels.npz``: the bundle's :class:`KernelTable` plus
  the columns ``predicted_ns``, ``regime``, ``pred_start_ns``, ``pred_end_ns`` and
  ``extrapolation`` (per-kernel bits, see :func:`kernels_with_predictions`).

:func:`build_result` is pure (numpy in, Struct out); :func:`write_result`,
:func:`read_result` and :func:`read_kernels` do the S3 I/O.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

from cascade.calibration.accuracy import AccuracyEstimate
from cascade.engine.extrapolation import FLAGS_DTYPE
from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable

#: Extra columns a result's kernel table carries beside the bundle's columns.
PREDICTION_COLUMNS: tuple[str, ...] = ("predicted_ns", "regime", "pred_start_ns", "pred_end_ns", "extrapolation")
#: Top kernels kept in a result.
TOP_KERNELS = 20

NonNeg = Annotated[float, msgspec.Meta(ge=0)]


class StepResult(msgspec.Struct, frozen=True, kw_only=True):
    """Predicted timing of one step (one generation step of the traced loop)."""

    step: int
    """Step index from the trace (``-1``: kernels outside any step)."""
    kind: str = ""
    """'prefill', 'decode' or '' when the trace does not say."""
    tokens: int = 0
    """New tokens processed in the step (0 when unknown)."""
    batch: int = 1
    """Sequences in the step."""
    context: int = 0
    """Context length (tokens in the KV cache after the step; 0 when unknown)."""
    host_ns: NonNeg = 0.0
    """Step wall time not covered by predicted GPU work (host gaps kept from the trace)."""
    gpu_ns: NonNeg = 0.0
    """Sum of the step's predicted kernel durations."""
    start_ns: float = 0.0
    """Predicted start of the step (first kernel's launch or start), ns from trace start."""
    end_ns: float = 0.0
    """Predicted end of the step (last kernel's end), ns from trace start."""
    kernels: int = 0
    """Kernels in the step."""

    @property
    def wall_ns(self) -> float:
        """Predicted wall time of the step."""
        return max(0.0, self.end_ns - self.start_ns)


class KernelSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel name's total predicted time (top kernels of a result)."""

    name: str
    """Kernel name."""
    count: int
    """Launches of the kernel."""
    predicted_ns: float
    """Sum of predicted durations over its launches."""
    source_ns: float | None = None
    """Sum of measured source-GPU durations, when the trace had them."""
    regime: str = ""
    """Most common regime (compute, memory, latency, launch) of its launches."""
    family: str = ""
    """Op family (gemm, attention, norm, ...)."""
    share: float = 0.0
    """Fraction of the result's total predicted GPU time."""


class FamilyTotal(msgspec.Struct, frozen=True, kw_only=True):
    """Totals of one kernel family (gemm, attention, norm, ...)."""

    count: int
    predicted_ns: float
    source_ns: float | None = None
    share: float = 0.0


class SimulatorProvenance(msgspec.Struct, frozen=True, kw_only=True):
    """The cycle-level simulator that produced a result's kernel times."""

    name: str
    """Simulator name (``Accel-Sim``)."""
    binary: str = ""
    """Path of the simulator binary that ran."""
    binary_sha256: str = ""
    config_id: str = ""
    """GPU configuration folder the simulator ran with."""
    config_dir: str = ""
    config_files: dict[str, str] = {}
    """Configuration file name -> sha256 (gpgpusim.config, trace.config, included files)."""
    core_clock_mhz: float = 0.0
    """Clock that turned cycles into times (the Accel-Sim config's core clock)."""
    kernels_listed: int = 0
    """Kernels the trace's kernelslist.g names."""
    kernels_simulated: int = 0
    """Table kernels whose time is the simulator's (the rest used the built-in model)."""
    cycles_total: int = 0
    """Sum of simulated cycles."""
    wall_s: float = 0.0
    """Seconds the simulator ran."""
    first_output_s: float | None = None
    """Seconds from starting the simulator to its first output line."""
    accelsim_config: str = ""
    """Accel-Sim config name that ran (e.g. ``SM6_TITANX``)."""
    config_relation: str = ""
    """How that config pairs with the GPU (``same chip``, ``closest``, ``folder``, ``setting``)."""
    config_reason: str = ""
    """Why that config serves this GPU."""
    config_dirs: list[str] = []
    """Every folder merged into the config (gpgpu-sim's and Accel-Sim's tested-cfgs)."""
    spec_clock_mhz: float = 0.0
    """Boost clock of the target GPU's spec, shown beside :attr:`core_clock_mhz`, not used: times
    are the simulated cycles at the config's core clock (``-gpgpu_clock_domains``), the clock
    the simulated machine ran at; its cycles would differ at another clock (DRAM and L2 run on
    their own), so they are not rescaled."""
    clock_note: str = ""
    """The clock the times are at and the spec's beside it, in words (empty when they agree)."""


class AccelSimKernel(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel as Accel-Sim simulated it, beside the built-in model's prediction for it."""

    kernel_id: int
    """The table's ``kernel_id`` (N of ``kernel-N.traceg``)."""
    name: str = ""
    uid: int = 0
    """Accel-Sim's ``kernel_launch_uid``."""
    cycles: int = 0
    """``gpu_sim_cycle``."""
    instructions: int = 0
    """``gpu_sim_insn``."""
    ipc: float = 0.0
    """``gpu_ipc``."""
    occupancy_pct: float | None = None
    """``gpu_occupancy`` (percent)."""
    l1d_hit_rate: float | None = None
    """L1D hit rate, 0..1 (this kernel's accesses)."""
    l2_hit_rate: float | None = None
    """L2 hit rate, 0..1 (this kernel's accesses)."""
    dram_bw_util: float | None = None
    """DRAM data-bus utilisation, 0..1, over every channel."""
    l2_bw_gbps: float | None = None
    """``L2_BW`` (GB/s)."""
    simulated_ns: float = 0.0
    """Cycles at the config's core clock."""
    builtin_ns: float | None = None
    """The built-in model's prediction for the same kernel on the same GPU."""
    builtin_model: str = ""
    """The built-in model that predicted ``builtin_ns`` (``auto`` resolved)."""
    difference_pct: float | None = None
    """(builtin - simulated) / simulated x 100: where the built-in model disagrees."""


class SimResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one simulation (one configuration x replica of a run)."""

    run_id: str
    sim_id: str
    trace_id: str
    config: str
    """GPU spec id (or custom spec name) simulated."""
    replica: int = 0
    model: str
    """Kernel model actually used (``auto`` resolved)."""
    spec_id: str
    """Target spec id."""
    spec_hash: str
    """Hash of the target spec's content (custom specs included)."""
    source_spec_id: str = ""
    """Spec id of the GPU the trace was captured on."""
    calibration: str = ""
    """Calibration the model used (name or provenance string; '' for none)."""
    predicted_e2e_ns: float
    """Predicted end-to-end time of the traced workload."""
    gpu_busy_ns: float
    """Sum of predicted kernel durations."""
    source_e2e_ns: float | None = None
    """End-to-end time of the trace on its source GPU as captured (profiled), when known."""
    baseline_e2e_ns: float | None = None
    """Real (unprofiled) end-to-end time measured on this configuration, when the trace has one."""
    error_pct: float | None = None
    """(predicted - baseline) / baseline x 100 when a baseline exists."""
    counterfactual: bool = True
    """True when no measured baseline exists for this configuration."""
    steps: list[StepResult] = []
    """Per-step predictions, in step order."""
    top_kernels: list[KernelSummary] = []
    """Kernel names with the most predicted time, descending."""
    families: dict[str, FamilyTotal] = {}
    """Totals by kernel family."""
    regimes: dict[str, int] = {}
    """Kernels per regime."""
    kernel_count: int = 0
    extrapolated: int = 0
    """Kernels whose prediction the model flagged as extrapolated."""
    extrapolation: dict[str, int] = {}
    """Kernels per extrapolation reason (:data:`cascade.engine.extrapolation.EXTRAPOLATION_REASONS`)."""
    accuracy: AccuracyEstimate | None = None
    """The calibration's measured error for this source/target situation and its basis."""
    wall_s: float = 0.0
    """Wall-clock seconds the simulation took."""
    attempt: int = 1
    """Delivery attempt that produced the result."""
    worker: str = ""
    """Simulator process that produced it."""
    created_at: float = 0.0
    simulator: SimulatorProvenance | None = None
    """The cycle-level simulator behind the kernel times (model ``accel-sim``), else None."""
    accelsim_kernels: list[AccelSimKernel] = []
    """Per simulated kernel (model ``accel-sim``): Accel-Sim's statistics and the built-in
    model's prediction beside it, in table order (at most :data:`MAX_ACCELSIM_KERNELS`)."""



# --------------------------------------------------------------------------- building

#: Simulated kernels listed in a result document at most (all are in ``kernels.npz``).
MAX_ACCELSIM_KERNELS = 2000


def _family_names(table: KernelTable) -> np.ndarray:
    from cascade.opfamilies import FAMILIES, families

    codes = families(table["op"], table["name"])
    return np.asarray(FAMILIES, dtype=object)[codes.astype(np.int64)] if len(codes) else np.zeros(0, object)


def _mode(values: np.ndarray) -> str:
    if len(values) == 0:
        return ""
    uniq, counts = np.unique(values.astype(str), return_counts=True)
    return str(uniq[int(np.argmax(counts))])


def summarize_kernels(
    table: KernelTable, predicted_ns: np.ndarray, regime: np.ndarray, *, top: int = TOP_KERNELS
) -> tuple[list[KernelSummary], dict[str, FamilyTotal], dict[str, int]]:
    """Top kernel names by predicted time, totals by family, and kernels per regime."""
    n = len(table)
    total = float(predicted_ns.sum()) if n else 0.0
    source = table["duration_ns"]
    has_source = bool(n) and bool(np.any(~np.isnan(source)))
    src = np.nan_to_num(source, nan=0.0)
    fams = _family_names(table)
    names = table["name"].astype(str)
    top_list: list[KernelSummary] = []
    if n:
        uniq, inverse = np.unique(names, return_inverse=True)
        inverse = inverse.reshape(-1)
        sums = np.bincount(inverse, weights=predicted_ns, minlength=len(uniq))
        counts = np.bincount(inverse, minlength=len(uniq))
        src_sums = np.bincount(inverse, weights=src, minlength=len(uniq))
        order = np.argsort(-sums, kind="stable")[:top]
        for u in order:
            rows = inverse == u
            top_list.append(KernelSummary(
                name=str(uniq[u]), count=int(counts[u]), predicted_ns=float(sums[u]),
                source_ns=float(src_sums[u]) if has_source else None,
                regime=_mode(regime[rows]), family=_mode(fams[rows]),
                share=float(sums[u] / total) if total > 0 else 0.0,
            ))
    families: dict[str, FamilyTotal] = {}
    for fam in sorted(set(fams.tolist())):
        rows = fams == fam
        p = float(predicted_ns[rows].sum())
        families[str(fam)] = FamilyTotal(
            count=int(rows.sum()), predicted_ns=p,
            source_ns=float(src[rows].sum()) if has_source else None,
            share=p / total if total > 0 else 0.0,
        )
    regimes: dict[str, int] = {}
    if n:
        uniq_r, counts_r = np.unique(regime.astype(str), return_counts=True)
        regimes = {str(r): int(c) for r, c in zip(uniq_r, counts_r, strict=True)}
    return top_list, families, regimes


def step_sequences(kind: str, tokens: int, step_batch: int) -> int:
    """Sequences in a step: the trace's ``step_batch`` when it has one, else one per token of
    a decode step (each sequence makes one token) and one for a prefill. Never the GEMM
    ``batch`` column, which counts matrices."""
    if step_batch > 0:
        return step_batch
    return tokens if kind == "decode" and tokens > 0 else 1


def steps_from_table(
    table: KernelTable, predicted_ns: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray
) -> list[StepResult]:
    """Per-step results from predicted per-kernel durations and start/end times.

    A step spans from its first kernel's launch (or predicted start, whichever is
    earlier) to its last kernel's predicted end; ``host_ns`` is that span minus the
    step's GPU time where positive. Kernels without a step (``-1``) form step -1
    only when the trace has no steps at all.
    """
    n = len(table)
    if n == 0:
        return []
    step = table["step"]
    if not np.any(step >= 0):
        step = np.zeros(n, dtype=np.int64)
    launch = table["host_launch_ns"]
    begin = np.where(np.isnan(launch), start_ns, np.fmin(launch, start_ns))
    kinds = table["step_kind"]
    tokens = table["step_tokens"]
    context = table["step_context"]
    seqs = table["step_batch"]  # not the GEMM "batch" column: that counts matrices, not sequences
    out: list[StepResult] = []
    valid = step >= 0
    ids, inverse = np.unique(step[valid], return_inverse=True)
    inverse = inverse.reshape(-1)
    idx_valid = np.flatnonzero(valid)
    gpu = np.bincount(inverse, weights=predicted_ns[valid], minlength=len(ids))
    counts = np.bincount(inverse, minlength=len(ids))
    first = np.full(len(ids), np.inf)
    last = np.full(len(ids), -np.inf)
    np.minimum.at(first, inverse, begin[valid])
    np.maximum.at(last, inverse, end_ns[valid])
    first_row = np.full(len(ids), n, dtype=np.int64)
    np.minimum.at(first_row, inverse, idx_valid)
    for i, s in enumerate(ids):
        r = int(first_row[i])
        wall = float(last[i] - first[i])
        tok = int(tokens[r]) if tokens[r] > 0 else 0
        b = step_sequences(str(kinds[r]), tok, int(seqs[r]))
        out.append(StepResult(
            step=int(s), kind=str(kinds[r]), tokens=tok, batch=b,
            context=int(context[r]) if context[r] > 0 else 0,
            host_ns=max(0.0, wall - float(gpu[i])), gpu_ns=float(gpu[i]),
            start_ns=float(first[i]), end_ns=float(last[i]), kernels=int(counts[i]),
        ))
    return out


def error_pct(predicted_ns: float, baseline_ns: float | None) -> float | None:
    """(predicted - baseline) / baseline x 100, or None without a positive baseline."""
    if baseline_ns is None or baseline_ns <= 0:
        return None
    return (predicted_ns - baseline_ns) / baseline_ns * 100.0


def build_result(
    *,
    run_id: str,
    sim_id: str,
    trace_id: str,
    config: str,
    replica: int,
    model: str,
    spec_id: str,
    spec_hash: str,
    table: KernelTable,
    predicted_ns: np.ndarray,
    regime: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    predicted_e2e_ns: float,
    steps: Sequence[StepResult] | None = None,
    source_spec_id: str = "",
    calibration: str = "",
    baseline_e2e_ns: float | None = None,
    source_e2e_ns: float | None = None,
    extrapolated: int = 0,
    extrapolation: dict[str, int] | None = None,
    accuracy: AccuracyEstimate | None = None,
    wall_s: float = 0.0,
    attempt: int = 1,
    worker: str = "",
    created_at: float = 0.0,
    simulator: SimulatorProvenance | None = None,
    accelsim_kernels: Sequence[AccelSimKernel] = (),
) -> SimResult:
    """Assemble a :class:`SimResult` from per-kernel predictions (numpy arrays, table order)."""
    n = len(table)
    for name, arr in (("predicted_ns", predicted_ns), ("regime", regime),
                      ("start_ns", start_ns), ("end_ns", end_ns)):
        if len(arr) != n:
            raise ValidationError(f"has {len(arr)} values for {n} kernels", field=name)
    top, families, regimes = summarize_kernels(table, predicted_ns, regime)
    step_list = list(steps) if steps is not None else steps_from_table(table, predicted_ns, start_ns, end_ns)
    err = error_pct(predicted_e2e_ns, baseline_e2e_ns)
    return SimResult(
        run_id=run_id, sim_id=sim_id, trace_id=trace_id, config=config, replica=replica,
        model=model, spec_id=spec_id, spec_hash=spec_hash, source_spec_id=source_spec_id,
        calibration=calibration, predicted_e2e_ns=float(predicted_e2e_ns),
        gpu_busy_ns=float(predicted_ns.sum()) if n else 0.0,
        source_e2e_ns=source_e2e_ns, baseline_e2e_ns=baseline_e2e_ns, error_pct=err,
        counterfactual=err is None, steps=step_list, top_kernels=top, families=families,
        regimes=regimes, kernel_count=n, extrapolated=int(extrapolated), wall_s=float(wall_s),
        extrapolation=dict(extrapolation or {}), accuracy=accuracy,
        attempt=attempt, worker=worker, created_at=created_at, simulator=simulator,
        accelsim_kernels=list(accelsim_kernels)[:MAX_ACCELSIM_KERNELS],
    )


def kernels_with_predictions(
    table: KernelTable, predicted_ns: np.ndarray, regime: np.ndarray,
    start_ns: np.ndarray, end_ns: np.ndarray, flags: np.ndarray | None = None,
) -> KernelTable:
    """The bundle's table plus the prediction columns (what ``kernels.npz`` holds);
    ``extrapolation`` holds each kernel's extrapolation bits
    (:data:`cascade.engine.extrapolation.EXTRAPOLATION_REASONS`, 0 = inside the calibration)."""
    cols = dict(table.as_dict())
    cols["predicted_ns"] = np.asarray(predicted_ns, dtype=np.float64)
    cols["regime"] = np.asarray(regime, dtype=object)
    cols["pred_start_ns"] = np.asarray(start_ns, dtype=np.float64)
    cols["pred_end_ns"] = np.asarray(end_ns, dtype=np.float64)
    cols["extrapolation"] = (np.zeros(len(table), dtype=FLAGS_DTYPE) if flags is None
                             else np.asarray(flags, dtype=FLAGS_DTYPE))
    return KernelTable(cols, n=len(table))


def steps_to_records(result: SimResult) -> list[Any]:
    """The result's steps as :class:`cascade.serving.stepmodel.StepRecord` (for the step model).

    Steps without a kind or token count (traces without step markers) are skipped.
    """
    from cascade.serving.stepmodel import StepRecord

    out = []
    for s in result.steps:
        if s.tokens < 1:
            continue
        if s.kind == "prefill":
            kind: Literal["prefill", "decode"] = "prefill"
        elif s.kind == "decode":
            kind = "decode"
        else:
            continue
        out.append(StepRecord(
            kind=kind, tokens=s.tokens, batch=max(1, s.batch),
            context=max(1, s.context or s.tokens), host_ns=s.host_ns, gpu_ns=s.gpu_ns,
        ))
    return out


# --------------------------------------------------------------------------- storage I/O

_RESULT_DECODER = msgspec.json.Decoder(SimResult)


def encode_result(result: SimResult) -> bytes:
    """JSON bytes of a result."""
    return msgspec.json.encode(result)


def decode_result(data: bytes, *, what: str = "result.json") -> SimResult:
    """A result from JSON bytes; :class:`ValidationError` naming ``what`` when malformed."""
    try:
        return _RESULT_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise ValidationError(f"malformed {what}: {exc}", field=what) from None


def kernels_npz_bytes(kernels: KernelTable) -> bytes:
    """A kernel table as ``.npz`` bytes."""
    buf = io.BytesIO()
    kernels.save_npz(buf)
    return buf.getvalue()


