"""Finished sims usable as request models, kept current in memory for the api's hot paths.

:class:`SimModels` watches the ``cascade-sims`` and ``cascade-runs`` KV buckets, so
``GET /v1/models`` and every ``/v1`` estimate look models up in memory (several api
replicas each keep their own view, all fed by the same KV). A model is one finished
sim, named ``cascade/<trace>/<config>``; when a trace was simulated on a config
several times, the most recently finished sim wins.

Fitted step models are cached per sim (:class:`cascade.runs.estimates.StepModelCache`)
and refitted when the sim's record changes (a new result: new fingerprint). The
S3 copy at ``results/{run}/{sim}/stepmodel.json`` saves the refit after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from cascade.errors import CascadeError, ConflictError, NotFoundError, ValidationError
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.log import get_logger
from cascade.platform.runstore import load_or_fit, read_kernels, read_result
from cascade.platform.state import RunRecord, SimRecord, TraceRecord
from cascade.platform.storage import Storage
from cascade.runs.estimates import (
    SimStepModel,
    StepModelCache,
    engine_predictor,
    kernel_extrapolator,
    sim_fingerprint,
)
from cascade.runs.results import SimResult, steps_to_records
from cascade.serving.contexts import context_length
from services.api.paging import NewestFirst, Page, PageRequest
from services.api.trace_index import TraceIndex
from services.api.trace_index import install as install_traces

log = get_logger("cascade.api.models")

MODEL_PREFIX = "cascade"


def model_id(trace_id: str, config: str) -> str:
    """The /v1 model id of a (trace, config): ``cascade/<trace>/<config>``."""
    return f"{MODEL_PREFIX}/{trace_id}/{config}"


def parse_model_id(value: str, field: str = "model") -> tuple[str, str]:
    """(trace_id, config) of ``cascade/<trace>/<config>``; ValidationError otherwise."""
    parts = value.split("/")
    if len(parts) != 3 or parts[0] != MODEL_PREFIX or not parts[1] or not parts[2]:
        raise ValidationError(f"{value!r} is not a model id: expected cascade/<trace>/<config> "
                              "(see GET /v1/models)", field=field)
    return parts[1], parts[2]


@dataclasses.dataclass(frozen=True, slots=True)
class ModelEntry:
    """One finished sim usable as a request model."""

    id: str
    trace_id: str
    config: str
    sim: SimRecord
    run: RunRecord
    fingerprint: str = ""
    """:func:`sim_fingerprint` of ``sim`` (computed on creation when not given)."""
    workload: str = ""
    """The trace's workload text (names the model, hence its context window)."""

    def __post_init__(self) -> None:
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", sim_fingerprint(self.sim))

    @property
    def context_length(self) -> int:
        """Most tokens (prompt + output) one request may hold: the model's context window."""
        return context_length(self.workload)[0]

    @property
    def created(self) -> int:
        """Unix time the sim finished (OpenAI's ``created``)."""
        return int(self.sim.finished_at or self.run.updated_at or self.run.created_at or 0)


def _usable(sim: SimRecord, run: RunRecord | None) -> bool:
    if run is None or sim.state != "completed":
        return False
    return not run.provenance.read_only


_SIM_DEC = msgspec.json.Decoder(SimRecord)
_RUN_DEC = msgspec.json.Decoder(RunRecord)


class SimModels:
    """In-memory index of finished sims (fed by KV watches) and their fitted step models."""

    def __init__(self, bus: Any, storage: Storage, traces: TraceIndex, *,
                 predictor: Any = None) -> None:
        self.bus = bus
        self.storage = storage
        self.traces = traces
        """Trace records (a sim of a deleted trace is not servable), from the api's trace index."""
        self.predictor = predictor
        """``(config, table) -> predicted ns per row`` for kernel-model extrapolation, or None."""
        self.cache = StepModelCache()
        self._sims: dict[str, SimRecord] = {}
        self._runs: NewestFirst[RunRecord] = NewestFirst(
            created=lambda r: r.created_at, state=lambda r: r.state,
            name=lambda r: f"{r.name}\n{r.trace_id}")
        """Run records by id, paged newest first."""
        self._applied: dict[str, int] = {"sims": 0, "runs": 0}
        """Revision of the last change applied, per bucket."""
        self._kvs: dict[str, Any] = {}
        self._unusable: dict[str, str] = {}
        """sim id -> fingerprint whose fit failed (left out of the model list)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._entries: list[ModelEntry] | None = None
        """Memo of :meth:`entries` (cleared on every change)."""
        self._by_id: dict[str, ModelEntry] = {}
        """Model id -> entry, rebuilt with :meth:`entries`."""
        self._changed = asyncio.Condition()
        self._notifying: set[asyncio.Task[None]] = set()
        self._loaded = {"sims": asyncio.Event(), "runs": asyncio.Event()}
        traces.on_record_change(self._trace_changed)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start watching the sims and runs buckets; returns once their current values are in."""
        self._kvs = {"sims": await self.bus.kv(subjects.KV_SIMS),
                     "runs": await self.bus.kv(subjects.KV_RUNS)}
        self._tasks = [
            asyncio.create_task(self._watch(kv, what), name=f"models:{what}")
            for what, kv in self._kvs.items()
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._loaded.values())), 60.0)

    async def stop(self) -> None:
        """Stop the watches (idempotent)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []

    async def _watch(self, kv: Any, what: str) -> None:
        while True:
            try:
                async with kv.watch_raw("*") as watcher:
                    async for entry in watcher:
                        if entry is None:
                            self._loaded[what].set()
                        else:
                            self._apply(what, entry)
                        if self._loaded[what].is_set():
                            async with self._changed:
                                self._changed.notify_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnects: watch again
                log.warning("model index watch failed, retrying", bucket=what, error=str(exc))
                await asyncio.sleep(1.0)

    def _trace_changed(self, _trace_id: str) -> None:
        # a trace added or deleted changes which sims are models: waiters re-check too (a trace
        # deleted after the last sims/runs change otherwise left wait_until to its timeout)
        self._entries = None
        with contextlib.suppress(RuntimeError):  # no running loop: nobody can be waiting
            task = asyncio.get_running_loop().create_task(self._notify())
            self._notifying.add(task)
            task.add_done_callback(self._notifying.discard)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _apply(self, what: str, entry: Any) -> None:
        key = entry.key
        self._applied[what] = max(self._applied[what], int(entry.revision or 0))
        self._entries = None
        deleted = entry.operation in ("DEL", "PURGE") or not entry.value
        if deleted:
            if what == "runs":
                self._runs.remove(key)
            else:
                self._sims.pop(key, None)
                self.cache.invalidate(key)
            return
        try:
            value = _DECODERS[what].decode(entry.value)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("skipping unreadable record", bucket=what, key=key, error=str(exc))
            return
        if what == "runs":
            self._runs.put(key, value)
            return
        self._sims[key] = value
        old = self.cache.peek(key, sim_fingerprint(value))
        if old is None:
            self.cache.invalidate(key)

    def _lookup(self, what: str) -> Callable[[str], Any]:
        return self._runs.get if what == "runs" else self._sims.get

    async def wait_until(self, predicate: Any, timeout: float = 10.0) -> None:
        """Wait (bounded) until ``predicate()`` holds after KV changes reach the index."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    # -- records (the KV buckets as this index last saw them) ------------------------------
    def loaded(self) -> bool:
        """True once the current values of every watched bucket are in."""
        return bool(self._tasks) and all(e.is_set() for e in self._loaded.values())

    def run_records(self) -> list[Any]:
        """Every RunRecord (a copy of the list; no KV round trip)."""
        return list(self._runs.values())

    def sim_records(self) -> list[SimRecord]:
        """Every SimRecord (a copy of the list; no KV round trip)."""
        return list(self._sims.values())

    def run_page(self, want: PageRequest) -> Page[RunRecord]:
        """One page of runs, newest first."""
        return self._runs.page(want)

    def sim_record(self, sim_id: str) -> Any:
        """The SimRecord ``sim_id`` as last seen, or None."""
        return self._sims.get(sim_id)

    def run_record(self, run_id: str) -> Any:
        """The RunRecord ``run_id`` as last seen, or None."""
        return self._runs.get(run_id)

    async def caught_up(self, what: str, key: str, predicate: Any, timeout: float = 2.0) -> bool:
        """Wait (bounded) until ``predicate(record)`` holds for ``key`` of ``what`` (runs, sims):
        a write this instance made is then visible to its reads. False on timeout."""
        lookup = self._lookup(what)
        try:
            await self.wait_until(lambda: predicate(lookup(key)), timeout=timeout)
        except TimeoutError:
            return False
        return True

    # -- lookups ---------------------------------------------------------------------------
    def entries(self) -> list[ModelEntry]:
        """Every usable model, one per (trace, config): the latest finished sim. Sorted by id."""
        if self._entries is None:
            self._entries = self._compute_entries()
            self._by_id = {e.id: e for e in self._entries}
        return self._entries

    def _compute_entries(self) -> list[ModelEntry]:
        best: dict[str, ModelEntry] = {}
        for sim in self._sims.values():
            run = self._runs.get(sim.run_id)
            if run is None or not _usable(sim, run):
                continue
            trace = self.traces.get(run.trace_id)
            if trace is None:
                continue  # the trace was deleted: nothing to describe the model by
            fp = sim_fingerprint(sim)
            if self._unusable.get(sim.id) == fp:
                continue
            entry = ModelEntry(id=model_id(run.trace_id, sim.config), trace_id=run.trace_id,
                               config=sim.config, sim=sim, run=run, fingerprint=fp,
                               workload=_workload_of(trace))
            prev = best.get(entry.id)
            if prev is None or (entry.sim.finished_at or 0, entry.sim.id) > (
                    prev.sim.finished_at or 0, prev.sim.id):
                best[entry.id] = entry
        return [best[k] for k in sorted(best)]

    async def _refresh(self, timeout: float = 2.0) -> None:
        """Wait (bounded) until every write made to the sims, runs and traces buckets before
        this call is applied (a miss right after a write may beat the watch): one stream-info
        request per bucket, no consumer."""
        targets = {what: await kv.last_revision() for what, kv in self._kvs.items()}
        await self.traces.sync(timeout)
        try:
            await self.wait_until(
                lambda: all(self._applied[w] >= t for w, t in targets.items()), timeout)
        except TimeoutError:
            log.warning("model index behind its buckets", targets=targets, applied=self._applied)
        self._entries = None

    def find(self, model: str) -> ModelEntry | None:
        """The entry of a model id from memory, or None."""
        if self._entries is None:
            self.entries()
        return self._by_id.get(model)

    async def by_model(self, model: str, *, field: str = "model") -> ModelEntry:
        """The entry of a model id; NotFoundError lists the known ids."""
        hit = self.find(model)
        if hit is not None:
            return hit
        parse_model_id(model, field)
        await self._refresh()
        hit = self.find(model)
        if hit is not None:
            return hit
        known = [e.id for e in self.entries()]
        raise NotFoundError(f"model {model!r} does not exist; known: {', '.join(known) or 'none'}"
                            " (a model is a finished sim: run a trace first)")

    async def by_sim(self, sim_id: str, *, field: str = "sim") -> ModelEntry:
        """The entry of one sim id (it must be finished and usable)."""
        check_token(sim_id, field)
        sim = self._sims.get(sim_id)
        if sim is None or sim.run_id not in self._runs:
            await self._refresh()
            sim = self._sims.get(sim_id)
        if sim is None:
            raise NotFoundError(f"no sim {sim_id!r}")
        run = self._runs.get(sim.run_id)
        if run is None:
            raise NotFoundError(f"sim {sim_id!r} belongs to an unknown run {sim.run_id!r}")
        if run.provenance.read_only:
            raise ConflictError(f"sim {sim_id!r} belongs to the recorded run {run.id!r}, which has no "
                                "per-step results to build a request model from; use a sim of the "
                                "synthetic replica instead", state="recorded")
        if sim.state != "completed":
            raise ConflictError(f"sim {sim_id!r} is {sim.state}, not completed", state=sim.state)
        trace = self.traces.get(run.trace_id)
        return ModelEntry(id=model_id(run.trace_id, sim.config), trace_id=run.trace_id,
                          config=sim.config, sim=sim, run=run,
                          workload=_workload_of(trace) if trace else "")

    async def by_run(self, run_id: str, config: str | None, *, field: str = "run") -> ModelEntry:
        """The latest finished sim of ``run_id`` on ``config`` (config optional for one-config runs)."""
        check_token(run_id, field)
        run = self._runs.get(run_id)
        if run is None:
            await self._refresh()
            run = self._runs.get(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id!r}")
        if config is None:
            if len(run.configs) != 1:
                raise ValidationError(f"run {run_id} has configs {', '.join(run.configs)}: say which",
                                      field="config")
            config = run.configs[0]
        if config not in run.configs:
            raise ValidationError(f"run {run_id} did not simulate {config!r}; it has "
                                  f"{', '.join(run.configs)}", field="config")
        sims = [s for s in self._sims.values()
                if s.run_id == run_id and s.config == config and s.state == "completed"]
        if not sims:
            raise ConflictError(f"run {run_id} has no finished sim on {config}", state=run.state)
        best = max(sims, key=lambda s: (s.finished_at or 0, s.id))
        return await self.by_sim(best.id, field=field)

    # -- step models -----------------------------------------------------------------------
    async def servable(self, *, concurrency: int = 4) -> list[ModelEntry]:
        """:meth:`entries` whose step model can be built (fitting, once, those not yet tried).

        A sim without per-step results fails its fit once and is then left out of
        :meth:`entries` too, so ``GET /v1/models`` lists only models that can answer.
        """
        entries = list(self.entries())
        if all(self.cache.peek(e.sim.id, e.fingerprint) is not None for e in entries):
            return entries  # every step model is fitted already: nothing to await
        gate = asyncio.Semaphore(concurrency)

        async def ok(entry: ModelEntry) -> bool:
            if self.cache.peek(entry.sim.id, entry.fingerprint) is not None:
                return True
            async with gate:
                try:
                    await self.step_model(entry)
                except CascadeError as exc:
                    log.info("model not servable", model=entry.id, error=str(exc))
                    return False
            return True

        flags = await asyncio.gather(*(ok(e) for e in entries))
        return [e for e, good in zip(entries, flags, strict=True) if good]

    async def step_model(self, entry: ModelEntry) -> SimStepModel:
        """The fitted step model of an entry's sim (memory, else S3 cache, else fit)."""
        fp = entry.fingerprint
        hit = self.cache.peek(entry.sim.id, fp)
        if hit is not None:
            return hit
        try:
            return await self.cache.get(entry.sim.id, fp, lambda: self._build(entry))
        except ValidationError as exc:
            self._unusable[entry.sim.id] = fp
            self._entries = None
            raise ConflictError(f"sim {entry.sim.id} cannot serve as a request model: {exc}",
                                state="no-steps") from None

    async def _build(self, entry: ModelEntry) -> SimStepModel:
        trace = await self._trace(entry.trace_id)
        workload = " ".join(x for x in (trace.workload, trace.name) if x) if trace else ""

        read: list[SimResult] = []

        async def result() -> SimResult:
            if not read:
                read.append(await read_result(self.storage, entry.sim.run_id, entry.sim.id))
            return read[0]

        async def records() -> list[Any]:
            return steps_to_records(await result())

        stored = await load_or_fit(self.storage, sim=entry.sim, trace_id=entry.trace_id,
                                   workload=workload, records=records)
        try:
            kernels = kernel_provenance(await result())
        except CascadeError as exc:
            log.warning("no kernel-model provenance", sim_id=entry.sim.id, error=str(exc))
            kernels = {}
        extrapolator = None
        if self.predictor is not None:
            try:
                table = await read_kernels(self.storage, entry.sim.run_id, entry.sim.id)
                spec_config = entry.sim.config

                def predict(t: Any) -> Any:
                    return self.predictor(spec_config, t)

                extrapolator = kernel_extrapolator(table, predict)
            except CascadeError as exc:
                log.warning("no kernel-model extrapolation", sim_id=entry.sim.id, error=str(exc))
        return SimStepModel(stored=stored, extrapolator=extrapolator, kernels=kernels)

    async def _trace(self, trace_id: str) -> TraceRecord | None:
        found = self.traces.get(trace_id)
        if found is None and await self.traces.sync():
            found = self.traces.get(trace_id)
        return found


_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {"sims": _SIM_DEC, "runs": _RUN_DEC}


def _workload_of(trace: TraceRecord) -> str:
    return " ".join(x for x in (trace.workload, trace.name) if x)


def kernel_provenance(result: SimResult) -> dict[str, Any]:
    """How a sim's kernel times were predicted (model, spec, calibration, expected accuracy,
    extrapolated kernels): the ``kernels`` of a /v1 answer's ``cascade`` object."""
    return {"model": result.model, "spec_id": result.spec_id, "spec_hash": result.spec_hash,
            "source_spec_id": result.source_spec_id, "calibration": result.calibration,
            "accuracy": msgspec.to_builtins(result.accuracy) if result.accuracy else None,
            "extrapolated": result.extrapolated, "kernel_count": result.kernel_count,
            "extrapolation": dict(result.extrapolation)}


SIM_MODELS = web.AppKey("sim_models", SimModels)


def sim_models(app: web.Application) -> SimModels:
    """The app's model index (see :func:`install`)."""
    return app[SIM_MODELS]


def install(app: web.Application) -> SimModels:
    """Create the app's model index once (idempotent; call from a route module's sync ``setup``);
    it starts with the app and stops at cleanup."""
    if SIM_MODELS in app:
        return app[SIM_MODELS]
    from services.api.appkeys import BUS, STORAGE, install_running

    traces = install_traces(app)  # first: its cleanup context starts before this one
    return install_running(app, SIM_MODELS, lambda: SimModels(app[BUS], app[STORAGE], traces,
                                                              predictor=engine_predictor()))
