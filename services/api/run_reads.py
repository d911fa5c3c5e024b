"""Reads of runs for ``/api/runs``: a run and its sims as KV holds them now (answered from the
KV-fed index wherever it cannot be behind), the sims' results (cached: a result never changes
once written) and the results summary built from them."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from aiohttp import web

from cascade.errors import NotFoundError, ValidationError
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.runstore import read_result
from cascade.platform.samples import recorded_reference
from cascade.platform.state import TERMINAL_RUN_STATES, RunRecord, SimRecord, TraceRecord
from cascade.runs.plan import plan_sims
from cascade.runs.results import SimResult
from cascade.runs.summary import run_config_results, with_reference
from services.api.appkeys import BUS, STORAGE
from services.api.schemas.runs import RunResults, TraceCoverage
from services.api.sim_models import install as install_models
from services.api.sim_models import sim_models

#: Sim results one api process keeps.
MAX_CACHED_RESULTS = 512
RESULT_CACHE: web.AppKey[OrderedDict[tuple[str, str], SimResult]] = web.AppKey("run_result_cache", OrderedDict)


async def current_run(app: web.Application, run_id: str) -> RunRecord:
    """The run as KV holds it now: a client that saw the run finish in its event stream must
    not then read it as still running from the KV-fed index, which can trail the record by a
    moment. So an unfinished (or unseen) run is one direct KV get; a run the index already
    shows finished is served from the index: its state never changes again (the orchestrator
    ends a run once; runs are not deleted), and the busiest read costs no KV round trip."""
    try:
        check_token(run_id, "run_id")
    except ValidationError:
        raise NotFoundError(f"no run {run_id!r}") from None
    models = sim_models(app)
    if models.loaded():
        seen: RunRecord | None = models.run_record(run_id)
        if seen is not None and seen.state in TERMINAL_RUN_STATES:
            return seen
    kv = await app[BUS].kv(subjects.KV_RUNS)
    entry = await kv.get(run_id, RunRecord)
    if entry is None:
        raise NotFoundError(f"no run {run_id!r}")
    value: RunRecord = entry.value
    return value


async def run_sims(app: web.Application, run: RunRecord) -> list[SimRecord]:
    """The run's sims from the KV-fed index, re-read from KV where the index has not seen them
    or, for a finished run, still shows them unfinished (the index trails KV); the rest planned."""
    models = sim_models(app)
    known: dict[str, SimRecord] = {}
    if models.loaded():
        known = {s: r for s in run.sim_ids if (r := models.sim_record(s)) is not None}
    stale = [s for s in run.sim_ids if s not in known
             or (run.state in TERMINAL_RUN_STATES and known[s].state not in TERMINAL_RUN_STATES)]
    if stale:
        kv = await app[BUS].kv(subjects.KV_SIMS)
        for sid, entry in zip(stale, await asyncio.gather(*(kv.get(s, SimRecord) for s in stale)),
                              strict=True):
            if entry is not None:
                known[sid] = entry.value
    planned = {s: (c, r) for s, c, r in plan_sims(run.id, run.configs, run.replicas)}
    out = []
    for sid in run.sim_ids:
        if sid in known:
            out.append(known[sid])
        else:
            config, replica = planned.get(sid, ("", 0))
            out.append(SimRecord(id=sid, run_id=run.id, config=config, replica=replica, model=run.model))
    return out


async def sim_result(app: web.Application, run_id: str, sim_id: str) -> SimResult:
    """One sim's result document (from the cache, else S3)."""
    cache = app[RESULT_CACHE]
    key = (run_id, sim_id)
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    result = await read_result(app[STORAGE], run_id, sim_id)
    cache[key] = result
    while len(cache) > MAX_CACHED_RESULTS:
        cache.popitem(last=False)
    return result


async def run_results(app: web.Application, run: RunRecord, *,
                      coverage: bool = True) -> tuple[RunResults, dict[str, SimResult]]:
    """The run's results per configuration and replica (a recorded sample's figures where it
    has no result files) and, with ``coverage``, what of the trace they cover; with the result
    documents they were built from (a completed sim whose result cannot be read has none)."""
    sims = await run_sims(app, run)
    completed = [s for s in sims if s.state == "completed"]
    loaded = await asyncio.gather(*(sim_result(app, run.id, s.id) for s in completed), return_exceptions=True)
    results = {s.id: r for s, r in zip(completed, loaded, strict=True) if isinstance(r, SimResult)}
    configs = run_config_results(run.configs, sims, results)
    reference = recorded_reference(run.id)
    if reference is not None:
        configs = [with_reference(c, reference) for c in configs]
    trace = await (await app[BUS].kv(subjects.KV_TRACES)).get(run.trace_id, TraceRecord) if coverage else None
    return RunResults(run_id=run.id, trace_id=run.trace_id, state=run.state, configs=configs, reference=reference,
                      trace=TraceCoverage.of(trace.value) if trace is not None else None), results


def install(app: web.Application) -> None:
    """The KV-fed run/sim index and the per-app result cache (idempotent)."""
    install_models(app)
    if RESULT_CACHE not in app:
        app[RESULT_CACHE] = OrderedDict()
