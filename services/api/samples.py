"""Loading the bundled sample (``samples/opt125m-h100-e2e``) into the app's state.

:func:`load_sample_into_state` is idempotent: every record is created only if
absent (KV create), and the synthetic bundle is content-addressed, so starting
the api again (or several api replicas at once) never duplicates anything. It
is called at api start-up by :func:`install_sample_loader` (installed by the
``scenarios`` route module's ``setup``) unless ``CASCADE_SAMPLES=false``;
``cascade up`` runs the api, so it loads the sample the same way.

What it writes:

- trace ``sample-opt125m-h100-e2e`` (recorded, read-only, badge "Sample", state
  ready, its ``rerun_refusal`` message) and run ``sample-opt125m-h100-e2e``
  (completed, configs SM90_H100 / SM90_H200 / SM80_A100, model ``accel-sim``,
  badge "Sample") with one completed sim per config carrying the recorded
  simulated E2E;
  (the runs' results endpoint, ``services/api/routes/runs.py``, adds the recorded
  reference figures as ``reference`` for that run, straight from the sample folder);
- trace ``sample-opt125m-h100-e2e-synthetic`` (badge "synthetic", runnable):
  its bundle, built from the synthetic KernelTable with
  :class:`cascade.traces.bundle.BundleBuilder`, is uploaded to
  ``bundles/{trace}/{hash}/`` and the trace is ready with an empty baseline
  (every config is a counterfactual). ``POST /api/runs`` runs it on any config;
- run ``sample-opt125m-h100-e2e-synthetic-run`` (completed, badge "synthetic", the
  recorded run's configs): the synthetic replica simulated in this process at first start
  (:func:`cascade.runs.inprocess.simulate_in_process`, the simulators' engine calls, about
  20 ms a config), its results in S3 like any sim's, so the request simulator,
  ``/api/scenarios`` and ``/v1`` answer on the sample as soon as the api is up. The api
  waits for its own model index to see it before it starts listening.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import msgspec
from aiohttp import web

from cascade.errors import CascadeError, ConflictError
from cascade.gpus import default_registry
from cascade.ids import check_token
from cascade.platform import subjects
from cascade.platform.keys import bundle_prefix
from cascade.platform.log import get_logger
from cascade.platform.runstore import write_result
from cascade.platform.samples import DEFAULT_SAMPLE, Sample, load_sample
from cascade.platform.state import Provenance, RunRecord, SimRecord, TraceRecord
from cascade.platform.storage import Storage
from cascade.runs.inprocess import InProcessSim, simulate_in_process
from cascade.runs.plan import sim_id as plan_sim_id
from cascade.traces.bundle import KERNELS_NAME, MANIFEST_NAME, BundleBuilder, load_bundle
from services.api.appkeys import BUS, SETTINGS, STORAGE
from services.api.sim_models import SIM_MODELS

log = get_logger("cascade.api.samples")

class SampleLoadReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one load did: ids created now vs. already present."""

    sample: str
    created: list[str] = []
    existing: list[str] = []
    bundle_key: str = ""
    synthetic_run_id: str = ""
    """The synthetic replica's finished run (usable as a request model)."""


def recorded_sim_id(run_id: str, config: str) -> str:
    """Id of the recorded run's sim on one config."""
    return check_token(f"{run_id}-{config.lower()}", "sim_id")


def recorded_records(sample: Sample, now: float) -> tuple[TraceRecord, RunRecord, list[SimRecord]]:
    """The recorded trace, run and its per-config sims."""
    ref = sample.reference
    prov = Provenance(badge=ref.badge, source="sample-recorded", read_only=True,
                      rerun_refusal=ref.rerun_refusal,
                      description=f"{ref.title}. {' '.join(ref.caveats)}")
    source = next((r for r in ref.results if r.config == ref.trace.source_config), None)
    baseline = {"e2e_ms": source.real_mean_e2e_ms} if source and source.real_mean_e2e_ms else {}
    trace = TraceRecord(
        id=sample.recorded_trace_id, name=ref.title, source_gpu=ref.trace.source_config,
        kind="instructions", workload=ref.workload.description, state="ready", sealed=True,
        created_at=now, updated_at=now, baseline=baseline, provenance=prov,
        warnings=[(f"{ref.trace.instruction_traces_mb:g} MB of {ref.trace.tracer} traces are not "
                  "bundled: this trace can be viewed, not run")],
    )
    sims = [
        SimRecord(id=recorded_sim_id(sample.recorded_run_id, r.config), run_id=sample.recorded_run_id,
                  config=r.config, state="completed", percent=100.0, started_at=now, finished_at=now,
                  predicted_e2e_ns=r.simulated_mean_e2e_ms * 1e6, model=ref.kernel_model)
        for r in ref.results
    ]
    run = RunRecord(
        id=sample.recorded_run_id, trace_id=sample.recorded_trace_id,
        configs=[r.config for r in ref.results], replicas=1, model=ref.kernel_model,
        state="completed", created_at=now, updated_at=now, sim_ids=[s.id for s in sims],
        provenance=prov,
    )
    return trace, run, sims


def synthetic_bundle(sample: Sample) -> tuple[str, bytes, bytes]:
    """(hash, manifest.json, kernels.npz) of the synthetic replica (deterministic)."""
    manifest = sample.synthetic_manifest
    workload = (f"{manifest.workload.get('model', 'facebook/opt-125m')} eager greedy generation "
                "(synthetic replica)")
    builder = BundleBuilder(trace_id=sample.synthetic_trace_id, source_gpu=manifest.source_gpu,
                            workload=workload, kind="timeline")
    builder.add_timeline(sample.synthetic_table, key=manifest.timeline)
    return builder.finalize()


@functools.lru_cache(maxsize=4)
def _sample_with_bundle(name: str, root: str | None) -> tuple[Sample, tuple[str, bytes, bytes]]:
    """The sample and its synthetic bundle, read and built once per process: files that ship
    with the code, ~0.5 s of CPU, and the api loads the sample at every start (a first start
    built the bundle twice: to store it and to simulate it)."""
    sample = load_sample(name, root=root)
    return sample, synthetic_bundle(sample)


def synthetic_record(sample: Sample, bundle_hash: str, kernels: int, now: float) -> TraceRecord:
    """The synthetic replica's TraceRecord (ready, empty baseline)."""
    manifest = sample.synthetic_manifest
    workload = (f"{manifest.workload.get('model', 'facebook/opt-125m')} eager greedy generation "
                "(synthetic replica)")
    return TraceRecord(
        id=sample.synthetic_trace_id, name=f"{sample.name} synthetic replica",
        source_gpu=manifest.source_gpu, kind="timeline", workload=workload, state="ready",
        sealed=True, created_at=now, updated_at=now, kernels_total=kernels,
        kernels_prepared=kernels, bundle_key=bundle_prefix(sample.synthetic_trace_id, bundle_hash),
        bundle_hash=bundle_hash, bundle_kernels=kernels, baseline={},
        provenance=Provenance(badge=manifest.label, source="sample-synthetic", read_only=False,
                              description=manifest.description),
    )


#: Worker named in the first-start results of the synthetic replica.
FIRST_START_WORKER = "api:first-start"


def synthetic_run_configs(sample: Sample) -> list[str]:
    """GPU configs the synthetic replica is simulated on at first start: the recorded run's."""
    return [r.config for r in sample.reference.results]


def simulate_synthetic(sample: Sample, manifest: bytes, npz: bytes, now: float
                       ) -> list[InProcessSim]:
    """The synthetic replica's bundle simulated on every config of :func:`synthetic_run_configs`
    (CPU-bound: call it in a thread)."""
    bundle = load_bundle((manifest, npz))
    registry = default_registry()
    source = registry.resolve(bundle.manifest.source_gpu)
    out = []
    for config in synthetic_run_configs(sample):
        target = registry.resolve(config)
        if target is None:
            raise ConflictError(f"sample {sample.name!r} names GPU config {config!r}, which is not "
                                "in the built-in catalogue")
        out.append(simulate_in_process(
            bundle.kernels, target, source=source, run_id=sample.synthetic_run_id,
            sim_id=plan_sim_id(sample.synthetic_run_id, config, 0),
            trace_id=sample.synthetic_trace_id, worker=FIRST_START_WORKER, created_at=now))
    return out


def synthetic_run_records(sample: Sample, sims: list[InProcessSim], result_keys: list[str],
                          now: float) -> tuple[RunRecord, list[SimRecord]]:
    """The finished run of the synthetic replica and its sims (labelled: badge "synthetic")."""
    manifest = sample.synthetic_manifest
    records = [
        SimRecord(id=s.result.sim_id, run_id=sample.synthetic_run_id, config=s.result.config,
                  state="completed", percent=100.0, kernels_done=len(s.kernels),
                  kernels_total=len(s.kernels), simulated_ns=s.result.gpu_busy_ns, attempts=1,
                  started_at=now, finished_at=now, result_key=key,
                  predicted_e2e_ns=s.result.predicted_e2e_ns, model=s.result.model,
                  worker=FIRST_START_WORKER)
        for s, key in zip(sims, result_keys, strict=True)
    ]
    configs = [r.config for r in records]
    run = RunRecord(
        id=sample.synthetic_run_id, trace_id=sample.synthetic_trace_id, configs=configs,
        replicas=1, model="auto", state="completed", created_at=now, updated_at=now,
        finished_at=now, sim_ids=[r.id for r in records], jobs_published=True,
        name=f"{sample.name} synthetic replica on {', '.join(configs)}",
        provenance=Provenance(
            badge=manifest.label, source="sample-synthetic", read_only=False,
            description=("Simulated by the app at first start from the synthetic replica "
                         "(estimated timeline, not a measurement), so the request simulator "
                         "and /v1 answer on the sample right away.")),
    )
    return run, records


async def _create(kv: Any, key: str, value: Any, report: dict[str, list[str]]) -> bool:
    try:
        await kv.create(key, value)
    except ConflictError:
        report["existing"].append(key)
        return False
    report["created"].append(key)
    return True


async def load_sample_into_state(bus: Any, storage: Storage, *, name: str = DEFAULT_SAMPLE,
                                 root: str | None = None) -> SampleLoadReport:
    """Put the sample's traces, run, sims, reference and synthetic bundle into KV and S3.

    Create-if-absent throughout: a second call (a restart, another replica) changes nothing.
    """
    sample, synthetic = await asyncio.to_thread(_sample_with_bundle, name, root)
    now = time.time()
    traces = await bus.kv(subjects.KV_TRACES)
    runs = await bus.kv(subjects.KV_RUNS)
    sims_kv = await bus.kv(subjects.KV_SIMS)
    report: dict[str, list[str]] = {"created": [], "existing": []}

    trace, run, sims = recorded_records(sample, now)
    await _create(traces, subjects.kv_key(trace.id), trace, report)
    for sim in sims:
        await _create(sims_kv, subjects.kv_key(sim.id), sim, report)
    await _create(runs, subjects.kv_key(run.id), run, report)

    existing = await traces.get(subjects.kv_key(sample.synthetic_trace_id), TraceRecord)
    if (existing is not None and existing.value.bundle_key
            and await storage.head(existing.value.bundle_key + MANIFEST_NAME) is not None):
        report["existing"].append(sample.synthetic_trace_id)
        prefix = existing.value.bundle_key
    else:
        # build (deterministic, content-addressed) and upload when the bundle is not in S3
        bundle_hash, manifest, npz = synthetic
        prefix = bundle_prefix(sample.synthetic_trace_id, bundle_hash)
        if await storage.head(prefix + MANIFEST_NAME) is None:
            await storage.put_bytes(prefix + KERNELS_NAME, npz)
            await storage.put_bytes(prefix + MANIFEST_NAME, manifest, content_type="application/json")
        kernels = int(msgspec.json.decode(manifest).get("kernel_count", 0))
        await _create(traces, subjects.kv_key(sample.synthetic_trace_id),
                      synthetic_record(sample, bundle_hash, kernels, now), report)
    await _synthetic_run(bus, storage, sample, synthetic, runs, sims_kv, now, report)
    out = SampleLoadReport(sample=name, created=report["created"], existing=report["existing"],
                           bundle_key=prefix, synthetic_run_id=sample.synthetic_run_id)
    log.info("sample loaded", sample=name, created=len(out.created), existing=len(out.existing))
    return out


async def _synthetic_run(bus: Any, storage: Storage, sample: Sample,
                         synthetic: tuple[str, bytes, bytes], runs: Any, sims_kv: Any,
                         now: float, report: dict[str, list[str]]) -> None:
    """Simulate the synthetic replica and record its finished run, unless the run exists."""
    if await runs.get(subjects.kv_key(sample.synthetic_run_id), RunRecord) is not None:
        report["existing"].append(sample.synthetic_run_id)
        return
    _, manifest, npz = synthetic
    sims = await asyncio.to_thread(simulate_synthetic, sample, manifest, npz, now)
    keys = [await write_result(storage, s.result, s.kernels) for s in sims]
    run, records = synthetic_run_records(sample, sims, keys, now)
    for rec in records:
        if not await _create(sims_kv, subjects.kv_key(rec.id), rec, report):
            await sims_kv.put(subjects.kv_key(rec.id), rec)  # a run deleted, its sims left
    await _create(runs, subjects.kv_key(run.id), run, report)


SAMPLE_REPORT = web.AppKey("sample_report", dict)


def install_sample_loader(app: web.Application) -> None:
    """Load the sample when the app starts, unless ``settings.samples`` is false.

    A failure (S3 or NATS unavailable) is logged and the api serves anyway; the
    next start tries again.
    """
    if not app[SETTINGS].samples or SAMPLE_REPORT in app:
        return
    app[SAMPLE_REPORT] = {}

    async def on_startup(app: web.Application) -> None:
        try:
            report = await load_sample_into_state(app[BUS], app[STORAGE])
        except CascadeError as exc:
            log.error("could not load the sample", error=str(exc))
            app[SAMPLE_REPORT]["error"] = str(exc)
            return
        app[SAMPLE_REPORT].update(msgspec.to_builtins(report))
        if SIM_MODELS in app:  # listen only once /v1 and the request simulator see the sample
            models = app[SIM_MODELS]
            try:
                await models.wait_until(lambda: any(
                    e.run.id == report.synthetic_run_id for e in models.entries()), timeout=10.0)
            except TimeoutError:
                log.warning("the sample's synthetic run is not in the model index yet",
                            run_id=report.synthetic_run_id)

    app.on_startup.append(on_startup)
