"""The simulator's ``accel-sim`` path: run the real Accel-Sim for one (config, replica).

1. the config's Accel-Sim folder from ``CASCADE_ACCELSIM_CONFIGS`` and the binary from
   ``CASCADE_ACCELSIM_BIN`` (refused, naming the setting, when either is missing here);
2. the trace's instruction files on local disk (:func:`cascade.platform.accelsim.fetch_instruction_trace`,
   once per trace per node);
3. ``accel-sim.out`` in its own process group and a fresh working directory holding every
   file of the config folder (relative includes resolve), stdout parsed as it is
   written: one ``SimProgress`` (with :class:`KernelSimulated`) per finished kernel, percent =
   kernels done / kernels listed; the run's cancel flag is checked while it runs and cancels
   (like the sim timeout) kill the process group;
4. cycles -> times at the config's core clock, kernels it did not simulate through the
   built-in model (flagged), the same timeline replay and results as the built-in models;
   per simulated kernel the result lists Accel-Sim's statistics (instructions, IPC,
   occupancy, L1D/L2 hit rates, DRAM bandwidth utilisation) beside the built-in ``auto``
   model's prediction for it, and ``kernels.npz`` carries them as ``sim_*`` columns.

Registered by the wiring (``services.simulator.start``) as the ``accel-sim`` path of
:mod:`services.simulator.ports`; it imports nothing of the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from cascade.engine.accelsim import AccelSimConfig, KernelStatistics, SimulatedKernel
from cascade.engine.extrapolation import FLAGS_DTYPE
from cascade.errors import CancelledRunError, JobTimeoutError
from cascade.platform.accelsim import (
    AccelSimGPUConfig,
    clean_workdir,
    discover_with,
    fetch_instruction_trace,
    require,
    run_accelsim,
    trace_cache_dir,
)
from cascade.platform.messages.jobs import SimJob
from cascade.platform.messages.sim import KernelSimulated, SimCompleted, SimProgress
from cascade.platform.runstore import write_result
from cascade.platform.state import TraceRecord
from cascade.runs.results import (
    AccelSimKernel,
    SimulatorProvenance,
    build_result,
    kernels_with_predictions,
)
from services.simulator.ports import SimulationPorts, SimulationRequest

CANCEL_CHECK_INTERVAL_S = 0.25
_BINARY_HASHES: dict[tuple[str, float, int], str] = {}


def _binary_sha256(path: str) -> str:
    import hashlib

    st = Path(path).stat()
    key = (path, st.st_mtime, st.st_size)
    if key not in _BINARY_HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _BINARY_HASHES[key] = h.hexdigest()
    return _BINARY_HASHES[key]


def gpu_config_for(settings: Any, target: Any) -> tuple[str, AccelSimGPUConfig]:
    """The binary and the Accel-Sim folder (hashed) of GPU spec ``target`` (built-in or custom:
    the same discovery the api offers and checks runs with), or ``ValidationError``."""
    setup = discover_with(settings, [target], hashes=True)
    require(setup, [target.id])
    return setup.binary, setup.configs[target.id]


def clock_note(config_mhz: float, spec_mhz: float, config: str) -> str:
    """The clock a run's times are at and the spec's beside it ('' when they agree)."""
    if not config_mhz or not spec_mhz or abs(config_mhz - spec_mhz) < 0.5:
        return ""
    return (f"times are Accel-Sim's cycles at {config}'s {config_mhz:g} MHz core clock "
            f"(-gpgpu_clock_domains, the clock the simulated machine ran at); at the spec's "
            f"{spec_mhz:g} MHz boost clock the same cycles would take {config_mhz / spec_mhz:.2f}x as long")


async def simulate_accelsim(service: SimulationPorts, request: SimulationRequest) -> None:
    """Run one sim through Accel-Sim (see the module docstring) and publish its result."""
    from cascade.engine import predict
    from services.simulator.engine import _REGIME_NAMES, replay_timeline

    job: SimJob = request.job
    trace: TraceRecord = request.trace
    inputs = request.inputs
    attempt, t0, log = request.attempt, request.t0, request.log

    settings = service.settings
    target = inputs.target
    binary, gpu = await asyncio.to_thread(gpu_config_for, settings, target)
    on_disk = await fetch_instruction_trace(service.storage, trace.id, trace.kind,
                                            trace_cache_dir(settings.data_path))
    log.info("instruction trace on disk", folder=on_disk.folder, kernels_listed=len(on_disk.kernel_ids),
             downloaded=on_disk.downloaded)
    listed = len(on_disk.kernel_ids)
    clock = gpu.core_clock_mhz or target.boost_clock_mhz
    work = settings.data_path / "work" / "accelsim" / f"{job.sim_id}-a{attempt}"
    done: list[SimulatedKernel] = []
    simulated_ns = 0.0
    sim_start = time.perf_counter()

    async def on_kernel(k: SimulatedKernel) -> None:
        nonlocal simulated_ns
        done.append(k)
        simulated_ns += k.duration_ns
        n_done = len(done)
        elapsed = time.perf_counter() - sim_start
        kid = k.kernel_id if k.kernel_id is not None else (
            on_disk.kernel_ids[k.uid - 1] if 0 < k.uid <= listed else None)
        await service.publish(job, "progress", SimProgress(
            sim_id=job.sim_id, run_id=job.run_id, kernels_done=min(n_done, listed),
            kernels_total=listed, percent=min(100.0, 100.0 * n_done / listed),
            simulated_ns=simulated_ns, eta_s=elapsed / n_done * max(0, listed - n_done),
            attempt=attempt, kernel=KernelSimulated(
                name=k.name, uid=k.uid, kernel_id=kid, cycles=k.cycles, instructions=k.instructions,
                ipc=k.ipc, sim_rate_ips=k.sim_rate_ips, duration_ns=k.duration_ns,
                occupancy_pct=k.occupancy_pct)))

    timeout = max(0.1, t0 + settings.sim_timeout_s - time.perf_counter())
    runner = asyncio.create_task(run_accelsim(
        binary, on_disk.kernelslist, gpu, work,
        timeout_s=timeout, on_kernel=on_kernel, core_clock_mhz=clock,
        on_start=lambda pid: log.info("accel-sim started", pid=pid, workdir=str(work))))
    try:
        while True:
            finished, _ = await asyncio.wait({runner}, timeout=CANCEL_CHECK_INTERVAL_S)
            if runner in finished:
                try:
                    outcome = runner.result()
                except JobTimeoutError as exc:
                    raise JobTimeoutError(
                        f"timed out after {settings.sim_timeout_s:g} s (CASCADE_SIM_TIMEOUT_S): {exc}"
                    ) from None
                break
            if await service.cancelled(job):
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
                clean_workdir(work)
                raise CancelledRunError(f"run {job.run_id} was cancelled; accel-sim was stopped")
    finally:
        if not runner.done():
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
    clean_workdir(work)
    def table_id(kernel_id: int | None, uid: int) -> int:
        return int(kernel_id if kernel_id is not None else (
            on_disk.kernel_ids[uid - 1] if 0 < uid <= listed else uid))

    by_id: dict[int, int] = {table_id(k.kernel_id, k.uid): k.cycles for k in outcome.kernels}
    stats_by_id = {table_id(st.kernel_id, st.uid): st for st in outcome.statistics}
    clock_used = outcome.kernels[0].core_clock_mhz if outcome.kernels else clock
    cfg = AccelSimConfig(simulated_cycles={str(k): c for k, c in by_id.items()},
                         core_clock_mhz=clock_used)
    table = inputs.table
    pred = await asyncio.to_thread(predict, table, target, source=inputs.source, model="accel-sim",
                                   config=cfg)
    predicted = pred.predicted_ns
    regime = _REGIME_NAMES[pred.regime.astype(np.int64)]
    flags = pred.flags if pred.flags is not None else np.zeros(len(table), dtype=FLAGS_DTYPE)
    used = Counter(str(m) for m in pred.models)
    replay = await asyncio.to_thread(replay_timeline, table, predicted)
    ids = np.asarray(table["kernel_id"], dtype=np.int64)
    if not np.any(ids > 0):
        ids = np.arange(1, len(table) + 1)
    cycles = np.array([by_id.get(int(i), -1) for i in ids], dtype=np.int64)
    builtin = await asyncio.to_thread(predict, table, target, source=inputs.source, model="auto")
    side_by_side = accelsim_kernels(ids, table, predicted, cycles, stats_by_id,
                                    builtin.predicted_ns, builtin.models)
    await service.publish(job, "progress", SimProgress(
        sim_id=job.sim_id, run_id=job.run_id, kernels_done=listed, kernels_total=listed,
        percent=100.0, simulated_ns=float(predicted.sum()), eta_s=0.0, attempt=attempt))
    wall = time.perf_counter() - t0
    simulator = SimulatorProvenance(
        name="Accel-Sim", binary=binary, binary_sha256=await asyncio.to_thread(_binary_sha256, binary),
        config_id=gpu.config_id, config_dir=gpu.folder, config_files=dict(gpu.files),
        core_clock_mhz=clock_used, kernels_listed=listed,
        kernels_simulated=int(np.count_nonzero(cycles >= 0)), cycles_total=int(sum(by_id.values())),
        wall_s=outcome.wall_s, first_output_s=outcome.first_line_s, accelsim_config=gpu.name,
        config_relation=gpu.relation, config_reason=gpu.reason, config_dirs=list(gpu.folders),
        spec_clock_mhz=target.boost_clock_mhz,
        clock_note=clock_note(clock_used, target.boost_clock_mhz, gpu.name),
    )
    result = build_result(
        run_id=job.run_id, sim_id=job.sim_id, trace_id=job.trace_id, config=target.id,
        replica=job.replica, model="accel-sim", spec_id=target.id, spec_hash=target.spec_hash(),
        source_spec_id=inputs.source_id, calibration=inputs.calibration_label(pred.provenance),
        table=table, predicted_ns=predicted, regime=regime, start_ns=replay.start_ns,
        end_ns=replay.end_ns, predicted_e2e_ns=replay.e2e_ns, steps=replay.steps,
        baseline_e2e_ns=inputs.baseline_e2e_ns, source_e2e_ns=inputs.source_e2e_ns,
        extrapolated=int(pred.extrapolated.sum()), extrapolation=pred.extrapolation_reasons,
        accuracy=inputs.accuracy(pred.provenance, used, flags, predicted), wall_s=wall, attempt=attempt,
        worker=service.worker, created_at=time.time(), simulator=simulator,
        accelsim_kernels=side_by_side,
    )
    kernels = kernels_with_predictions(table, predicted, regime, replay.start_ns, replay.end_ns, flags)
    kernels["sim_cycles"] = cycles
    for column, values in accelsim_columns(ids, stats_by_id).items():
        kernels[column] = values
    kernels["builtin_ns"] = np.asarray(builtin.predicted_ns, dtype=np.float64)
    key = await write_result(service.storage, result, kernels)
    await service.publish(job, "completed", SimCompleted(
        sim_id=job.sim_id, run_id=job.run_id, result_key=key, simulated_ns=result.gpu_busy_ns,
        wall_s=time.perf_counter() - t0, attempt=attempt, predicted_e2e_ns=result.predicted_e2e_ns,
        model=result.model), msg_id=f"{job.sim_id}:completed")
    log.info("simulation completed", model="accel-sim", kernels=len(table),
             simulated=simulator.kernels_simulated, e2e_ms=round(result.predicted_e2e_ns / 1e6, 3),
             accelsim_wall_s=round(outcome.wall_s, 3), wall_s=round(wall, 3), config=target.id)


#: kernels.npz columns of Accel-Sim's per-kernel statistics (NaN where it printed none).
STAT_COLUMNS = {"sim_instructions": "instructions", "sim_ipc": "ipc", "sim_occupancy_pct": "occupancy_pct",
                "sim_l1d_hit_rate": "l1d_hit_rate", "sim_l2_hit_rate": "l2_hit_rate",
                "sim_dram_bw_util": "dram_bw_util"}


def accelsim_columns(ids: np.ndarray, stats: dict[int, KernelStatistics]) -> dict[str, np.ndarray]:
    """Per table row (by ``ids``), Accel-Sim's statistics as float columns (:data:`STAT_COLUMNS`)."""
    out = {}
    for column, attr in STAT_COLUMNS.items():
        values = [getattr(stats[int(i)], attr) if int(i) in stats else None for i in ids]
        out[column] = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    return out


def accelsim_kernels(ids: np.ndarray, table: Any, predicted: np.ndarray, cycles: np.ndarray,
                     stats: dict[int, KernelStatistics], builtin_ns: np.ndarray,
                     builtin_models: Any) -> list[AccelSimKernel]:
    """Per simulated table row: Accel-Sim's statistics beside the built-in model's prediction."""
    names = table["name"] if "name" in table else [""] * len(ids)
    out = []
    for row, kid in enumerate(ids.tolist()):
        if cycles[row] < 0:
            continue
        st = stats.get(int(kid))
        sim_ns = float(predicted[row])
        b = float(builtin_ns[row])
        out.append(AccelSimKernel(
            kernel_id=int(kid), name=str(names[row]), uid=st.uid if st else 0, cycles=int(cycles[row]),
            instructions=st.instructions if st else 0, ipc=st.ipc if st else 0.0,
            occupancy_pct=st.occupancy_pct if st else None, l1d_hit_rate=st.l1d_hit_rate if st else None,
            l2_hit_rate=st.l2_hit_rate if st else None, dram_bw_util=st.dram_bw_util if st else None,
            l2_bw_gbps=st.l2_bw_gbps if st else None, simulated_ns=sim_ns,
            builtin_ns=b if np.isfinite(b) else None, builtin_model=str(builtin_models[row]),
            difference_pct=(b - sim_ns) / sim_ns * 100.0 if sim_ns > 0 and np.isfinite(b) else None))
    return out
