"""Creating a run: the one owner of a run's record and of its sims' jobs.

The api (``POST /api/runs``) and the orchestrator (a ``RunRequested`` whose record is missing)
both build the record with :func:`new_run`; the orchestrator builds the jobs with
:func:`sim_jobs`. The checks themselves are the domain's (:func:`cascade.runs.plan.plan_run`).
"""

from __future__ import annotations

import time
from typing import Any

from cascade.engine.registry import model_config
from cascade.gpus import GPUSpec
from cascade.platform.bus import Bus
from cascade.platform.messages.jobs import SimJob
from cascade.platform.messages.run import RunRequested
from cascade.platform.specstore import load_custom_specs
from cascade.platform.state import RunRecord, SimRecord, TraceRecord
from cascade.runs.plan import ReplayOptions, RunPlan, plan_run


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
