"""Creating and cancelling a run: the one owner of a run's record and of its sims' jobs.

The api (``POST /api/runs``: :func:`submit_run`) and the orchestrator (a ``RunRequested`` whose
record is missing) both build the record with :func:`new_run`; the orchestrator builds the jobs
with :func:`sim_jobs`. The checks themselves are the domain's (:func:`cascade.runs.plan.plan_run`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from cascade.engine.registry import model_config
from cascade.errors import ConflictError, NotFoundError, ValidationError
from cascade.gpus import GPUSpec
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.accelsim import MODEL as ACCELSIM
from cascade.platform.accelsim import discover_with, refuse_timeline_trace, require
from cascade.platform.bus import Bus
from cascade.platform.messages.jobs import SimJob
from cascade.platform.messages.run import RunCancelRequested, RunRequested
from cascade.platform.samples import refuse_rerun
from cascade.platform.settings import Settings
from cascade.platform.specstore import load_custom_specs
from cascade.platform.state import TERMINAL_RUN_STATES, RunRecord, SimRecord, TraceRecord
from cascade.runs.plan import ReplayOptions, RunPlan, new_run_id, plan_run


async def new_run(
    bus: Bus,
    *,
    run_id: str,
    trace_id: str,
    configs: list[str | dict[str, Any]],
    replicas: int,
    model: Any = "auto",
    replay: ReplayOptions | None = None,
    name: str = "",
    now: float | None = None,
    custom: dict[str, GPUSpec] | None = None,
) -> tuple[RunRecord, RunPlan]:
    """A new run's record (state ``queued``) and its plan, with the custom specs given (else
    read from KV)."""
    if custom is None:
        custom = await load_custom_specs(bus)
    plan = plan_run(run_id=run_id, trace_id=trace_id, configs=configs, replicas=replicas,
                    model=model, replay=replay, name=name, custom=custom)
    now = time.time() if now is None else now
    record = RunRecord(
        id=plan.run_id, trace_id=plan.trace_id, configs=plan.configs, replicas=plan.replicas,
        model=plan.model_name, model_config=plan.model, replay=plan.replay, state="queued",
        created_at=now, updated_at=now, sim_ids=[s for s, _, _ in plan.sims()],
        custom_specs=plan.custom_specs, name=plan.name,
    )
    return record, plan


def run_requested(record: RunRecord, plan: RunPlan) -> RunRequested:
    """The ``RunRequested`` event of a new run (configs inline where custom)."""
    return RunRequested(run_id=record.id, trace_id=record.trace_id,
                        configs=[plan.job_config(c) for c in plan.configs],
                        replicas=record.replicas, model=plan.model, replay=plan.replay,
                        name=record.name)


def sim_jobs(run: RunRecord, trace: TraceRecord) -> list[tuple[SimRecord, SimJob]]:
    """Every sim of a run with its job, configuration-major."""
    model = run.model_config if run.model_config is not None else model_config(run.model)
    out: list[tuple[SimRecord, SimJob]] = []
    for sid, config_id, replica in RunPlan(
            run_id=run.id, trace_id=run.trace_id, configs=run.configs, replicas=run.replicas,
            model=model, replay=run.replay, custom_specs=run.custom_specs).sims():
        out.append((
            SimRecord(id=sid, run_id=run.id, config=config_id, replica=replica, model=run.model),
            SimJob(run_id=run.id, sim_id=sid, trace_id=run.trace_id, bundle_key=trace.bundle_key or "",
                   config=run.custom_specs.get(config_id) or config_id, replica=replica,
                   model=model, replay=run.replay),
        ))
    return out


async def runnable_trace(bus: Bus, trace_id: str) -> TraceRecord:
    """The trace a new run simulates: it exists (404), is not a read-only sample and is ready (409)."""
    try:
        check_token(trace_id, "trace_id")
    except ValidationError:
        raise NotFoundError(f"no trace {trace_id!r}") from None
    entry = await (await bus.kv(subjects.KV_TRACES)).get(trace_id, TraceRecord)
    if entry is None:
        refuse_rerun(trace_id)
        raise NotFoundError(f"no trace {trace_id!r}")
    trace = entry.value
    if trace.provenance.read_only:
        raise ConflictError(
            trace.provenance.rerun_refusal
            or f"trace {trace.id} is a read-only recorded sample and cannot be simulated again",
            state="read-only")
    if trace.state != "ready" or not trace.bundle_key:
        raise ConflictError(
            f"trace {trace.id} is {trace.state}, not ready: runs need a prepared bundle "
            f"({trace.kernels_prepared}/{trace.kernels_total or trace.expected_kernels or '?'} "
            "kernels prepared)", state=trace.state)
    return trace


async def submit_run(
    bus: Bus,
    settings: Settings,
    *,
    trace_id: str,
    configs: list[str | dict[str, Any]],
    replicas: int,
    model: Any = "auto",
    replay: ReplayOptions | None = None,
    name: str = "",
    custom: dict[str, GPUSpec],
) -> RunRecord:
    """A new run of a ready trace: its record created in KV (state ``queued``) and
    ``RunRequested`` published (the record is removed again when that fails). Accel-sim runs
    are refused on a timeline-only trace and on configs the Accel-Sim setup cannot run."""
    trace = await runnable_trace(bus, trace_id)
    run_id = new_run_id()
    record, plan = await new_run(bus, run_id=run_id, trace_id=trace.id, configs=configs, replicas=replicas,
                                 model=model, replay=replay, name=name, custom=custom)
    if record.model == ACCELSIM:
        refuse_timeline_trace(trace.id, trace.kind)
        require(await asyncio.to_thread(discover_with, settings, list(custom.values())), record.configs)
    runs = await bus.kv(subjects.KV_RUNS)
    await runs.create(run_id, record)
    try:
        await bus.publish(subjects.RUN_REQUESTED, run_requested(record, plan), msg_id=f"{run_id}:requested")
    except BaseException:
        await runs.delete(run_id)
        raise
    return record


async def cancel_run(bus: Bus, run: RunRecord) -> RunRecord | None:
    """Ask for a run to stop: flag its record and publish ``RunCancelRequested``. A read-only
    sample or a finished run is a 409. Returns the record as flagged (None where it changed
    meanwhile and needed no flag)."""
    if run.provenance.read_only:
        raise ConflictError(run.provenance.rerun_refusal or f"run {run.id} is a read-only sample",
                            state="read-only")
    if run.state in TERMINAL_RUN_STATES:
        raise ConflictError(f"run {run.id} already finished ({run.state})", state=run.state)
    kv = await bus.kv(subjects.KV_RUNS)

    def flag(cur: RunRecord | None) -> RunRecord | None:
        if cur is None or cur.cancel_requested or cur.state in TERMINAL_RUN_STATES:
            return None
        return msgspec.structs.replace(cur, cancel_requested=True, updated_at=time.time())

    updated: RunRecord | None = await kv.mutate(run.id, RunRecord, flag)
    await bus.publish(subjects.run_event(run.id, "cancel"), RunCancelRequested(run_id=run.id),
                      msg_id=f"{run.id}:cancel")
    return updated
