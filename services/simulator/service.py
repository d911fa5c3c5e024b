"""Simulator: runs one (configuration, replica) simulation per job.

Pulls :class:`SimJob` items from ``cascade.jobs.sim`` (durable work-queue
consumer ``sim-jobs``, explicit ack, in-progress heartbeats while it works,
``job_max_deliver`` deliveries), then:

1. skips the job if its sim is already final or its run was cancelled;
2. publishes ``SimStarted``; loads the bundle from the local content-addressed
   cache (:func:`cascade.platform.bundlecache.fetch_bundle` downloads only what is
   missing); resolves the target spec (built-in id or inline custom spec);
3. predicts kernel durations in chunks (in a worker thread), publishing
   ``SimProgress`` after every chunk that crosses a percent and at least once
   per second (kernels done/total, simulated time so far, ETA), and checking
   the run's cancel flag in KV between chunks (-> ``SimCancelled``);
   a model with its own simulation path (:mod:`services.simulator.ports`; the wiring
   registers ``accel-sim``: :mod:`services.simulator.accelsim`) runs that path instead;
4. replays the timeline, writes ``results/{run}/{sim}/result.json`` and
   ``kernels.npz`` (same keys on every attempt), publishes ``SimCompleted``
   and acks.

A failing attempt is retried by redelivery; after the last one (or on a
permanent error such as an unknown spec) ``SimFailed`` carries the error. A
killed worker's job is redelivered after ``job_ack_wait_s`` and redone.

Job option ``chunk_delay_s`` (seconds slept after each chunk) paces a
simulation for tests and demos.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from cascade.engine.extrapolation import FLAGS_DTYPE
from cascade.errors import (
    AccelSimError,
    CancelledRunError,
    ConfigError,
    JobTimeoutError,
    TraceFormatError,
    UnknownGPUError,
    UnknownNameError,
    ValidationError,
)
from cascade.gpus.registry import GPURegistry, default_registry
from cascade.platform import subjects
from cascade.platform.bundlecache import cache_dir_for, fetch_bundle
from cascade.platform.bus import Consumer, Delivery
from cascade.platform.messages.jobs import SimJob
from cascade.platform.messages.sim import (
    SimCancelled,
    SimCompleted,
    SimFailed,
    SimProgress,
    SimStarted,
)
from cascade.platform.runstore import write_result
from cascade.platform.runtime import ServiceContext
from cascade.platform.specstore import load_custom_specs
from cascade.platform.state import RunRecord, SimRecord, TraceRecord
from cascade.runs.plan import spec_of_job_config
from cascade.runs.results import build_result, kernels_with_predictions
from services.simulator.ports import SimulationPaths, SimulationRequest

if TYPE_CHECKING:
    from services.simulator.engine import SimulationInputs

#: Errors that no retry can fix: reported at once as SimFailed.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    ValidationError, ConfigError, UnknownGPUError, UnknownNameError, TraceFormatError,
    JobTimeoutError, AccelSimError,
)
TERMINAL_SIM_STATES = frozenset({"completed", "failed", "cancelled"})
#: Most chunks a simulation is split into (one per percent) and fewest kernels per chunk.
MAX_CHUNKS = 100
MIN_CHUNK = 64
PROGRESS_INTERVAL_S = 1.0
CANCEL_CHECK_INTERVAL_S = 0.25


class SimulatorService:
    """The simulator's job handler, wired to the work queue by :meth:`start`.

    ``once``: take exactly one job (waiting at most ``idle_timeout_s`` for it),
    then stop the service (the local and Kubernetes backends' mode). Otherwise
    pull jobs until stopped (``pool``). ``paths``: simulation paths by model name (a job of
    another model uses the built-in chunked prediction).
    """

    name = "simulator"

    def __init__(
        self,
        ctx: ServiceContext,
        *,
        once: bool = False,
        idle_timeout_s: float = 60.0,
        worker_label: str = "",
        paths: SimulationPaths | None = None,
    ) -> None:
        self.ctx = ctx
        self.paths = dict(paths or {})
        self.bus = ctx.bus
        self.storage = ctx.require_storage()
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="simulator")
        self.once = once
        self.idle_timeout_s = idle_timeout_s
        self.worker = f"{socket.gethostname()}:{os.getpid()}" + (f"/{worker_label}" if worker_label else "")
        self.started = False
        self.jobs_done = 0
        self.jobs_failed = 0
        self.first_progress_s: float | None = None
        self._t0 = time.perf_counter()
        self.handled = asyncio.Event()

    async def start(self) -> None:
        """Open KV and start pulling jobs (one-shot or pool)."""
        self.runs_kv = await self.bus.kv(subjects.KV_RUNS)
        self.sims_kv = await self.bus.kv(subjects.KV_SIMS)
        self.traces_kv = await self.bus.kv(subjects.KV_TRACES)
        self.ctx.add_stats(self.stats)
        consumer = await self.ctx.run_worker(
            subjects.JOB_SIM, subjects.DURABLE_SIM_JOBS, SimJob, self.handle,
            concurrency=1, on_exhausted=self.on_exhausted, permanent=PERMANENT_ERRORS,
            limit=1 if self.once else None,
            idle_timeout_s=self.idle_timeout_s if self.once else None,
        )
        if self.once:
            self.ctx.spawn(self._finish_once(consumer), name="simulator-once")
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "simulator", "started": self.started, "worker": self.worker,
                "jobs_done": self.jobs_done, "jobs_failed": self.jobs_failed, "once": self.once}

    # ------------------------------------------------------------------ one-shot mode

    async def _finish_once(self, consumer: Consumer[Any]) -> None:
        """One-job mode: stop the service once the job was handled (or none arrived)."""
        try:
            stop = asyncio.create_task(self.ctx.stop.wait())
            done = asyncio.create_task(consumer.done.wait())
            await asyncio.wait({stop, done}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            done.cancel()
            if consumer.taken == 0:
                self.log.info("no job arrived, exiting", idle_timeout_s=self.idle_timeout_s)
        finally:
            self.handled.set()
            self.ctx.stop.set()

    # ------------------------------------------------------------------ the job

    async def on_exhausted(self, job: SimJob, error: BaseException, attempts: int) -> None:
        """Report a sim that failed for good (last attempt, or a permanent error)."""
        self.jobs_failed += 1
        message = str(error) or type(error).__name__
        await self.bus.publish(
            subjects.sim_event(job.sim_id, "failed"),
            SimFailed(sim_id=job.sim_id, run_id=job.run_id, error=message, attempts=attempts),
            msg_id=f"{job.sim_id}:failed",
        )
        self.log.error("simulation failed", run_id=job.run_id, sim_id=job.sim_id,
                       attempts=attempts, error=message)

    async def cancelled(self, job: SimJob) -> bool:
        """True when the job's run (or sim) was cancelled (KV)."""
        run = await self.runs_kv.get(job.run_id, RunRecord)
        if run is not None and (run.value.cancel_requested or run.value.state == "cancelled"):
            return True
        sim = await self.sims_kv.get(job.sim_id, SimRecord)
        return sim is not None and sim.value.state == "cancelled"

    async def handle(self, job: SimJob, delivery: Delivery) -> None:
        """Simulate one job (see the module docstring); returns normally when done or cancelled."""
        log = self.log.bind(run_id=job.run_id, sim_id=job.sim_id, trace_id=job.trace_id,
                            attempt=delivery.attempt)
        t0 = time.perf_counter()
        sim = await self.sims_kv.get(job.sim_id, SimRecord)
        if sim is not None and sim.value.state in TERMINAL_SIM_STATES:
            log.info("sim already final, job skipped", state=sim.value.state)
            return
        try:
            await self._check_cancel(job)
            trace = await self._trace(job)
            total = trace.kernels_total
            await self.publish(job, "started", SimStarted(
                sim_id=job.sim_id, run_id=job.run_id, attempt=delivery.attempt, worker=self.worker,
                kernels_total=total))
            await self.publish(job, "progress", SimProgress(
                sim_id=job.sim_id, run_id=job.run_id, kernels_done=0, kernels_total=total,
                percent=0.0, attempt=delivery.attempt))
            self._first_progress()
            inputs = await self._load(job, trace)
            path = self.paths.get(job.model_name)
            if path is not None:
                await path(self, SimulationRequest(job=job, trace=trace, inputs=inputs,
                                                   attempt=delivery.attempt, t0=t0, log=log))
            else:
                await self._simulate(job, inputs, delivery.attempt, t0, log)
        except CancelledRunError as exc:
            await self.publish(job, "cancelled", SimCancelled(
                sim_id=job.sim_id, run_id=job.run_id, reason=str(exc)), msg_id=f"{job.sim_id}:cancelled")
            log.info("simulation cancelled")
            return
        self.jobs_done += 1

    async def _check_cancel(self, job: SimJob) -> None:
        if await self.cancelled(job):
            raise CancelledRunError(f"run {job.run_id} was cancelled")

    async def publish(self, job: SimJob, kind: str, message: Any, msg_id: str | None = None) -> None:
        """Publish a sim event for ``job``."""
        await self.bus.publish(subjects.sim_event(job.sim_id, kind), message, msg_id=msg_id)

    def _first_progress(self) -> None:
        if self.first_progress_s is None:
            self.first_progress_s = time.perf_counter() - self._t0
            self.log.info("first progress event", seconds_since_start=round(self.first_progress_s, 3))

    async def _trace(self, job: SimJob) -> TraceRecord:
        entry = await self.traces_kv.get(job.trace_id, TraceRecord)
        if entry is None:
            raise ValidationError(f"trace {job.trace_id} does not exist", field="trace_id")
        return entry.value

    async def _load(self, job: SimJob, trace: TraceRecord) -> SimulationInputs:
        # The engine is imported after the first progress event (start-up latency), and its
        # built-in models are registered here, not from two worker threads at once.
        from cascade.engine import model_names
        from services.simulator.engine import load_inputs

        model_names()
        if not trace.bundle_key:
            raise ValidationError(f"trace {job.trace_id} has no bundle ({trace.state})", field="trace_id")
        if job.bundle_key and trace.bundle_key.rstrip("/") != job.bundle_key.rstrip("/"):
            trace = msgspec.structs.replace(trace, bundle_key=job.bundle_key,
                                            bundle_hash=job.bundle_key.rstrip("/").rsplit("/", 1)[-1])
        folder = await fetch_bundle(self.storage, trace, cache_dir_for(self.settings.data_path))
        target = spec_of_job_config(job.config)
        registry = default_registry()
        name = trace.source_gpu
        if name and registry.resolve(name) is None:  # a custom spec (POST /api/configs) as source
            custom = await load_custom_specs(self.bus)
            registry = GPURegistry([*registry, *custom.values()])
        return await asyncio.to_thread(load_inputs, folder, trace, target, job.model_name, registry)

    async def _simulate(
        self, job: SimJob, inputs: SimulationInputs, attempt: int, t0: float, log: Any
    ) -> None:
        from services.simulator.engine import predict_chunk, replay_timeline

        table = inputs.table
        n = len(table)
        delay = job.replay.chunk_delay_s
        chunk = max(MIN_CHUNK, math.ceil(n / MAX_CHUNKS)) if delay == 0 else max(1, math.ceil(n / MAX_CHUNKS))
        predicted = np.zeros(n, dtype=np.float64)
        regime = np.empty(n, dtype=object)
        regime[:] = ""
        flags = np.zeros(n, dtype=FLAGS_DTYPE)
        deadline = t0 + self.settings.sim_timeout_s
        last_progress = 0.0
        last_percent = -1
        last_cancel_check = time.perf_counter()
        provenance: Any = None
        extrapolated = 0
        reasons: Counter[str] = Counter()
        used: Counter[str] = Counter()
        sim_start = time.perf_counter()

        async def progress(done: int) -> None:
            nonlocal last_progress, last_percent
            now = time.perf_counter()
            percent = 100.0 * done / n if n else 100.0
            elapsed = now - sim_start
            eta = (elapsed / done * (n - done)) if done else None
            await self.publish(job, "progress", SimProgress(
                sim_id=job.sim_id, run_id=job.run_id, kernels_done=done, kernels_total=n,
                percent=min(100.0, percent), simulated_ns=float(predicted[:done].sum()),
                eta_s=eta, attempt=attempt))
            last_progress, last_percent = now, int(percent)

        done = 0
        while done < n:
            stop = min(n, done + chunk)
            part = table.take(slice(done, stop))
            out = await asyncio.to_thread(predict_chunk, part, inputs, job.model)
            predicted[done:stop] = out.predicted_ns
            regime[done:stop] = out.regime
            extrapolated += out.extrapolated
            reasons.update(out.reasons)
            used.update(out.models)
            flags[done:stop] = out.flags
            provenance = out.provenance
            done = stop
            now = time.perf_counter()
            if now > deadline:
                raise JobTimeoutError(
                    f"timed out after {self.settings.sim_timeout_s:g} s (CASCADE_SIM_TIMEOUT_S)")
            percent = int(100 * done / n)
            if done < n and (percent > last_percent or now - last_progress >= PROGRESS_INTERVAL_S):
                await progress(done)
            if delay:
                await asyncio.sleep(delay)
            if time.perf_counter() - last_cancel_check >= CANCEL_CHECK_INTERVAL_S or delay:
                last_cancel_check = time.perf_counter()
                await self._check_cancel(job)
        replay = await asyncio.to_thread(replay_timeline, table, predicted)
        await progress(n)
        wall = time.perf_counter() - t0
        result = build_result(
            run_id=job.run_id, sim_id=job.sim_id, trace_id=job.trace_id,
            config=inputs.target.id, replica=job.replica,
            model=inputs.model_label(provenance), spec_id=inputs.target.id,
            spec_hash=inputs.target.spec_hash(), source_spec_id=inputs.source_id,
            calibration=inputs.calibration_label(provenance), table=table,
            predicted_ns=predicted, regime=regime, start_ns=replay.start_ns, end_ns=replay.end_ns,
            predicted_e2e_ns=replay.e2e_ns, steps=replay.steps,
            baseline_e2e_ns=inputs.baseline_e2e_ns, source_e2e_ns=inputs.source_e2e_ns,
            extrapolated=extrapolated, extrapolation=dict(reasons),
            accuracy=inputs.accuracy(provenance, used, flags, predicted), wall_s=wall, attempt=attempt, worker=self.worker,
            created_at=time.time(),
        )
        kernels = kernels_with_predictions(table, predicted, regime, replay.start_ns, replay.end_ns, flags)
        key = await write_result(self.storage, result, kernels)
        await self.publish(job, "completed", SimCompleted(
            sim_id=job.sim_id, run_id=job.run_id, result_key=key, simulated_ns=result.gpu_busy_ns,
            wall_s=time.perf_counter() - t0, attempt=attempt,
            predicted_e2e_ns=result.predicted_e2e_ns, model=result.model,
        ), msg_id=f"{job.sim_id}:completed")
        log.info("simulation completed", kernels=n, e2e_ms=round(result.predicted_e2e_ns / 1e6, 3),
                 wall_s=round(wall, 3), config=inputs.target.id)
