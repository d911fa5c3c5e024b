"""Orchestrator: turns run requests into simulation jobs and tracks them to the end.

Consumes (durable consumers on the ``CASCADE`` stream):

- ``cascade.run.requested`` (:class:`RunRequested`): creates the run record if the
  api did not, one :class:`SimRecord` per (configuration, replica) in KV, publishes
  ``SimQueued`` and one :class:`SimJob` per sim to ``cascade.jobs.sim`` with
  ``Nats-Msg-Id`` = sim id (so re-publishing is de-duplicated), then asks the
  backend for capacity.
- ``cascade.run.{run}.cancel`` (:class:`RunCancelRequested`): marks unfinished sims
  cancelled, tells the backend to stop their workers, ends the run ``cancelled``.
- ``cascade.sim.{sim}.{started,progress,completed,failed,cancelled}``: updates
  the sim (compare-and-set in KV) and the run; when every sim is final it
  publishes ``RunCompleted`` (all completed), ``RunFailed`` (some failed) or
  ``RunStateChanged(cancelled)``.

A sweep enforces ``settings.sim_timeout_s`` on running sims. On start the
orchestrator reloads every unfinished run from KV: runs whose jobs were never
published get them published (msg-id de-duplication makes that safe), finished
sims of an unfinished run finish it, and tracking resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from cascade.errors import CascadeError, ConflictError
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.bus import Delivery
from cascade.platform.messages.jobs import SimJob
from cascade.platform.messages.run import (
    RunCancelRequested,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunRequested,
    RunStateChanged,
)
from cascade.platform.messages.sim import (
    SimCancelled,
    SimCompleted,
    SimEvent,
    SimFailed,
    SimProgress,
    SimQueued,
    SimStarted,
)
from cascade.platform.runs import new_run, sim_jobs
from cascade.platform.runtime import ServiceContext
from cascade.platform.state import TERMINAL_RUN_STATES, RunRecord, SimRecord, TraceRecord
from services.orchestrator.backends import Backend, SimRef, create_backend

TERMINAL_SIM_STATES = frozenset({"completed", "failed", "cancelled"})


@dataclass
class SimTrack:
    """In-memory index of one unfinished sim (rebuilt from KV on start)."""

    run_id: str
    state: str
    started_at: float | None = None
    worker: str = ""


class OrchestratorService:
    """The orchestrator's handlers, wired to the bus by :meth:`start`.

    Collaborators come from the :class:`~cascade.platform.runtime.ServiceContext`
    (bus, storage, settings, stop event, exit stack); ``backend`` overrides the
    one named by ``settings.orchestrator_backend`` (tests pass their own).
    """

    name = "orchestrator"

    def __init__(self, ctx: ServiceContext, *, backend: Backend | None = None) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.settings = ctx.settings
        self.log = ctx.log.bind(component="orchestrator")
        self.open: dict[str, SimTrack] = {}
        self.backend = backend or create_backend(
            self.settings.orchestrator_backend, self.settings, self.demand
        )
        self.started = False
        self.runs_started = 0
        self.runs_finished = 0
        self.timeouts = 0

    # ------------------------------------------------------------------ lifecycle

    def demand(self) -> int:
        """Unfinished sims (queued or running): the capacity the backend should provide."""
        return len(self.open)

    async def start(self) -> None:
        """Open KV, start the backend, resume unfinished runs, subscribe, start the sweep."""
        self.runs_kv = await self.bus.kv(subjects.KV_RUNS)
        self.sims_kv = await self.bus.kv(subjects.KV_SIMS)
        self.traces_kv = await self.bus.kv(subjects.KV_TRACES)
        await self.backend.start()
        self.ctx.stack.push_async_callback(self.backend.stop)
        await self.resume()
        await self.ctx.subscribe(
            subjects.RUN_EVENTS, RunEvent, self.on_run_event,
            durable=subjects.DURABLE_ORCHESTRATOR_RUNS, deliver_new=True, concurrency=4,
            on_exhausted=self.on_run_event_exhausted,
        )
        await self.ctx.subscribe(
            subjects.SIM_EVENTS, SimEvent, self.on_sim_event,
            durable=subjects.DURABLE_ORCHESTRATOR_SIMS, deliver_new=True, concurrency=8,
        )
        self.ctx.spawn(self._sweep(), name="orchestrator-sweep")
        self.ctx.add_stats(self.stats)
        self.started = True

    def stats(self) -> dict[str, Any]:
        """Service-specific figures merged into the micro ``status``/``STATS`` answers."""
        return {"role": "orchestrator", "started": self.started, "open_sims": len(self.open),
                "runs_started": self.runs_started, "runs_finished": self.runs_finished,
                "timeouts": self.timeouts, **self.backend.stats()}

    async def resume(self) -> None:
        """Reload unfinished runs from KV and carry each one forward."""
        runs = await self.runs_kv.values(RunRecord)
        resumed = 0
        for run in runs.values():
            if run.state in TERMINAL_RUN_STATES or run.provenance.read_only:
                continue
            resumed += 1
            try:
                if not run.jobs_published:
                    await self.plan_run(run)
                    continue
                for sim in await self._sims_of(run):
                    if sim.state not in TERMINAL_SIM_STATES:
                        self.open[sim.id] = SimTrack(run.id, sim.state, sim.started_at, sim.worker)
                if run.cancel_requested:
                    await self.cancel_run(run.id, "cancel requested before restart")
                else:
                    await self.maybe_finish(run.id)
            except CascadeError as exc:
                await self.fail_run(run.id, f"cannot resume run: {exc}")
        if resumed:
            self.log.info("resumed unfinished runs", runs=resumed, open_sims=len(self.open))
            await self.backend.submit([])

    # ------------------------------------------------------------------ runs

    async def on_run_event(self, event: RunEvent, delivery: Delivery) -> None:
        """Handle run requests and cancel requests (the orchestrator's own events are ignored)."""
        match event:
            case RunRequested():
                await self.on_run_requested(event)
            case RunCancelRequested():
                await self.cancel_run(event.run_id, event.reason or "cancelled on request")
            case _:
                return

    async def on_run_event_exhausted(self, event: RunEvent, error: BaseException, attempts: int) -> None:
        """A run request that cannot be handled fails its run visibly (never dropped)."""
        if isinstance(event, RunRequested):
            await self.fail_run(event.run_id, f"cannot start the run: {error}")

    async def on_run_requested(self, req: RunRequested) -> None:
        """Create the run record if needed, then plan and queue its sims."""
        check_token(req.run_id, "run_id")
        entry = await self.runs_kv.get(req.run_id, RunRecord)
        if entry is None:
            record, _ = await new_run(self.bus, run_id=req.run_id, trace_id=req.trace_id,
                                      configs=req.configs, replicas=req.replicas, model=req.model,
                                      replay=req.replay, name=req.name)
            with contextlib.suppress(ConflictError):
                await self.runs_kv.create(req.run_id, record)
            entry = await self.runs_kv.get(req.run_id, RunRecord)
        assert entry is not None
        run = entry.value
        if run.state in TERMINAL_RUN_STATES or run.jobs_published:
            return
        await self.plan_run(run)

    async def plan_run(self, run: RunRecord) -> None:
        """Create the sims in KV, publish their jobs (de-duplicated by sim id), ask for capacity."""
        log = self.log.bind(run_id=run.id, trace_id=run.trace_id)
        if run.cancel_requested:
            await self._finish(run.id, "cancelled", reason="cancelled before it started")
            return
        trace_entry = await self.traces_kv.get(run.trace_id, TraceRecord)
        trace = trace_entry.value if trace_entry is not None else None
        if trace is None or trace.state != "ready" or not trace.bundle_key:
            state = "missing" if trace is None else trace.state
            await self.fail_run(run.id, f"trace {run.trace_id} is {state}, not ready to simulate")
            return
        jobs: list[SimJob] = []
        now = time.time()
        for record, job in sim_jobs(run, trace):
            sid = record.id
            with contextlib.suppress(ConflictError):
                await self.sims_kv.create(sid, record)
            current = await self.sims_kv.get(sid, SimRecord)
            if current is not None and current.value.state in TERMINAL_SIM_STATES:
                continue
            self.open.setdefault(sid, SimTrack(run.id, "queued"))
            jobs.append(job)
        items: list[tuple[str, Any, str | None]] = []
        for job in jobs:
            cfg = job.config if isinstance(job.config, str) else str(job.config.get("id", ""))
            items.append((subjects.sim_event(job.sim_id, "queued"),
                          SimQueued(sim_id=job.sim_id, run_id=run.id, config=cfg, replica=job.replica),
                          f"{job.sim_id}:queued"))
            items.append((subjects.JOB_SIM, job, job.sim_id))
        if items:
            await self.bus.publish_many(items)
        sim_ids = [record.id for record, _ in sim_jobs(run, trace)]

        def mark(cur: RunRecord | None) -> RunRecord | None:
            if cur is None or cur.jobs_published:
                return None
            return _replace(cur, jobs_published=True, sim_ids=sim_ids, updated_at=now)

        await self.runs_kv.mutate(run.id, RunRecord, mark)
        self.runs_started += 1
        log.info("run queued", sims=len(sim_ids), jobs=len(jobs), backend=self.backend.name)
        await self.backend.submit(jobs)
        await self.maybe_finish(run.id)

    async def cancel_run(self, run_id: str, reason: str) -> None:
        """Cancel every unfinished sim of the run and end it ``cancelled``."""
        entry = await self.runs_kv.get(run_id, RunRecord)
        if entry is None or entry.value.state in TERMINAL_RUN_STATES:
            return

        def flag(cur: RunRecord | None) -> RunRecord | None:
            if cur is None or cur.cancel_requested:
                return None
            return _replace(cur, cancel_requested=True, updated_at=time.time())

        run = await self.runs_kv.mutate(run_id, RunRecord, flag)
        assert run is not None
        refs: list[SimRef] = []
        for sim in await self._sims_of(run):
            if sim.state in TERMINAL_SIM_STATES:
                continue
            changed = await self._set_sim_final(sim.id, "cancelled", error=None)
            if changed is not None:
                refs.append(SimRef(sim_id=sim.id, run_id=run_id, worker=sim.worker))
                await self.bus.publish(subjects.sim_event(sim.id, "cancelled"),
                                       SimCancelled(sim_id=sim.id, run_id=run_id, reason=reason),
                                       msg_id=f"{sim.id}:cancelled")
        if refs:
            await self.backend.cancel(refs)
        await self._finish(run_id, "cancelled", reason=reason)

    async def fail_run(self, run_id: str, error: str) -> None:
        """End a run ``failed`` with ``error`` (its unfinished sims are cancelled)."""
        entry = await self.runs_kv.get(run_id, RunRecord)
        if entry is None or entry.value.state in TERMINAL_RUN_STATES:
            return
        for sim in await self._sims_of(entry.value):
            if sim.state not in TERMINAL_SIM_STATES:
                await self._set_sim_final(sim.id, "cancelled", error=error)
        await self._finish(run_id, "failed", error=error)

    async def maybe_finish(self, run_id: str) -> None:
        """Finish the run when every sim is final: completed, failed (some failed) or cancelled."""
        entry = await self.runs_kv.get(run_id, RunRecord)
        if entry is None or entry.value.state in TERMINAL_RUN_STATES or not entry.value.jobs_published:
            return
        sims = await self._sims_of(entry.value)
        if len(sims) < len(entry.value.sim_ids) or any(
            s.state not in TERMINAL_SIM_STATES for s in sims
        ):
            return
        failed = [s for s in sims if s.state == "failed"]
        completed = sum(1 for s in sims if s.state == "completed")
        if entry.value.cancel_requested:
            await self._finish(run_id, "cancelled", reason="cancelled on request")
        elif failed:
            detail = "; ".join(f"{s.id}: {s.error or 'failed'}" for s in failed[:5])
            # some configs completed: the run is partial (their results stand), not failed
            await self._finish(run_id, "partial" if completed else "failed",
                               error=f"{len(failed)} of {len(sims)} sims failed: {detail}",
                               completed=completed, failed=len(failed))
        else:
            await self._finish(run_id, "completed", completed=completed, failed=0)

    async def _finish(
        self, run_id: str, state: str, *, error: str | None = None, reason: str = "",
        completed: int = 0, failed: int = 0,
    ) -> None:
        moved: dict[str, str] = {}

        def change(cur: RunRecord | None) -> RunRecord | None:
            moved.clear()
            if cur is None or cur.state in TERMINAL_RUN_STATES:
                return None
            moved["previous"] = cur.state
            now = time.time()
            return _replace(cur, state=state, error=error, updated_at=now, finished_at=now)

        await self.runs_kv.mutate(run_id, RunRecord, change)
        if not moved:
            return
        for sid in [s for s, t in self.open.items() if t.run_id == run_id]:
            self.open.pop(sid, None)
        self.runs_finished += 1
        subject_kind, message = {
            "completed": ("completed", RunCompleted(run_id=run_id, sims_completed=completed,
                                                    sims_failed=failed)),
            "partial": ("completed", RunCompleted(run_id=run_id, sims_completed=completed,
                                                  sims_failed=failed)),
            "failed": ("failed", RunFailed(run_id=run_id, error=error or "failed")),
        }.get(state, ("state", RunStateChanged(run_id=run_id, state=state,
                                              previous=moved["previous"], reason=reason)))
        await self.bus.publish(subjects.run_event(run_id, subject_kind), message,
                               msg_id=f"{run_id}:final")
        self.log.info("run finished", run_id=run_id, state=state, error=error)

    async def _mark_running(self, run_id: str) -> None:
        moved: list[str] = []

        def change(cur: RunRecord | None) -> RunRecord | None:
            moved.clear()
            if cur is None or cur.state != "queued":
                return None
            moved.append(cur.state)
            return _replace(cur, state="running", updated_at=time.time())

        await self.runs_kv.mutate(run_id, RunRecord, change)
        if moved:
            await self.bus.publish(subjects.run_event(run_id, "state"),
                                   RunStateChanged(run_id=run_id, state="running", previous="queued"),
                                   msg_id=f"{run_id}:running")

    # ------------------------------------------------------------------ sims

    async def on_sim_event(self, event: SimEvent, delivery: Delivery) -> None:
        """Apply a simulator's event to the sim record and the run."""
        match event:
            case SimStarted():
                await self._update_sim(event.sim_id, lambda s: _started(s, event))
                track = self.open.get(event.sim_id)
                if track is not None:
                    track.state, track.started_at, track.worker = "running", time.time(), event.worker
                await self._mark_running(event.run_id)
            case SimProgress():
                await self._update_sim(event.sim_id, lambda s: _progress(s, event))
            case SimCompleted():
                if await self._update_sim(event.sim_id, lambda s: _completed(s, event)) is not None:
                    self.open.pop(event.sim_id, None)
                    await self.maybe_finish(event.run_id)
            case SimFailed():
                if await self._set_sim_final(event.sim_id, "failed", error=event.error,
                                             attempts=event.attempts) is not None:
                    await self.maybe_finish(event.run_id)
            case SimCancelled():
                if await self._set_sim_final(event.sim_id, "cancelled", error=None) is not None:
                    await self.maybe_finish(event.run_id)
            case _:
                return

    async def _update_sim(self, sim_id: str, change: Any) -> SimRecord | None:
        """CAS-update a sim unless it is final; returns the new record when it changed."""
        changed: list[SimRecord] = []

        def guarded(cur: SimRecord | None) -> SimRecord | None:
            changed.clear()
            if cur is None or cur.state in TERMINAL_SIM_STATES:
                return None
            new: SimRecord | None = change(cur)
            if new is not None and new != cur:
                changed.append(new)
                return new
            return None

        await self.sims_kv.mutate(sim_id, SimRecord, guarded)
        return changed[0] if changed else None

    async def _set_sim_final(
        self, sim_id: str, state: str, *, error: str | None, attempts: int | None = None
    ) -> SimRecord | None:
        def change(cur: SimRecord) -> SimRecord:
            return _replace(cur, state=state, error=error, finished_at=time.time(), eta_s=None,
                            attempts=max(cur.attempts, attempts or 0))

        new = await self._update_sim(sim_id, change)
        if new is not None:
            self.open.pop(sim_id, None)
        return new

    async def _sims_of(self, run: RunRecord) -> list[SimRecord]:
        out = []
        for sid in run.sim_ids:
            entry = await self.sims_kv.get(sid, SimRecord)
            if entry is not None:
                out.append(entry.value)
        return out

    # ------------------------------------------------------------------ timeouts

    async def _sweep(self) -> None:
        interval = max(0.2, min(2.0, self.settings.sim_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.enforce_timeouts()
            except CascadeError as exc:
                self.log.warning("timeout sweep failed", error=str(exc))

    async def enforce_timeouts(self, now: float | None = None) -> list[str]:
        """Fail running sims older than ``sim_timeout_s``; returns their ids."""
        now = time.time() if now is None else now
        limit = self.settings.sim_timeout_s
        expired = [(sid, t) for sid, t in list(self.open.items())
                   if t.started_at is not None and now - t.started_at > limit]
        for sid, track in expired:
            error = f"timed out after {limit:g} s (CASCADE_SIM_TIMEOUT_S)"
            if await self._set_sim_final(sid, "failed", error=error) is not None:
                self.timeouts += 1
                await self.bus.publish(subjects.sim_event(sid, "failed"),
                                       SimFailed(sim_id=sid, run_id=track.run_id, error=error),
                                       msg_id=f"{sid}:failed")
                await self.backend.cancel([SimRef(sim_id=sid, run_id=track.run_id,
                                                  worker=track.worker)])
                await self.maybe_finish(track.run_id)
        return [sid for sid, _ in expired]


# --------------------------------------------------------------------------- pure updates


R = TypeVar("R", bound=msgspec.Struct)


def _replace(record: R, **changes: Any) -> R:
    return msgspec.structs.replace(record, **changes)


def _started(cur: SimRecord, ev: SimStarted) -> SimRecord:
    if ev.attempt < cur.attempts:
        return cur
    fresh = ev.attempt > cur.attempts
    return _replace(
        cur, state="running", attempts=ev.attempt, worker=ev.worker,
        started_at=cur.started_at or ev.at,
        kernels_total=ev.kernels_total or cur.kernels_total, error=None,
        percent=0.0 if fresh else cur.percent, kernels_done=0 if fresh else cur.kernels_done,
    )


def _progress(cur: SimRecord, ev: SimProgress) -> SimRecord:
    if ev.attempt < cur.attempts:
        return cur
    newer_attempt = ev.attempt > cur.attempts
    percent = ev.percent if newer_attempt else max(cur.percent, ev.percent)
    if not newer_attempt and ev.percent < cur.percent:
        return _replace(cur, state="running")
    return _replace(
        cur, state="running", attempts=max(cur.attempts, ev.attempt), percent=percent,
        kernels_done=ev.kernels_done, kernels_total=ev.kernels_total,
        simulated_ns=ev.simulated_ns, eta_s=ev.eta_s, started_at=cur.started_at or ev.at,
    )


def _completed(cur: SimRecord, ev: SimCompleted) -> SimRecord:
    return _replace(
        cur, state="completed", percent=100.0, kernels_done=cur.kernels_total or cur.kernels_done,
        simulated_ns=ev.simulated_ns, eta_s=0.0, result_key=ev.result_key,
        predicted_e2e_ns=ev.predicted_e2e_ns, model=ev.model or cur.model,
        attempts=max(cur.attempts, ev.attempt), finished_at=ev.at, error=None,
    )
