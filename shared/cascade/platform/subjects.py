"""Every NATS subject, stream, KV bucket, header, queue group and durable name.

Defined once here; nothing else spells a subject literally.

Subject tree::

    cascade.trace.{trace_id}.{kind}     trace events            (stream CASCADE)
    cascade.run.requested               new run requests        (stream CASCADE)
    cascade.run.{run_id}.{kind}         run events              (stream CASCADE)
    cascade.sim.{sim_id}.{kind}         sim events (progress..) (stream CASCADE)
    cascade.s3.events                   S3 bucket notifications (stream CASCADE)
    cascade.jobs.prepare                prepare jobs            (stream CASCADE_JOBS, work queue)
    cascade.jobs.sim                    simulation jobs         (stream CASCADE_JOBS, work queue)
    cascade.svc.{service}.{endpoint}    request/reply endpoints of the NATS micro services
                                        (NOT stored: a stream would answer requests with acks)

JetStream streams may not overlap, so the event stream lists its families
explicitly instead of ``cascade.>``.
"""

from __future__ import annotations

from cascade.errors import ValidationError
from cascade.ids import check_token

PREFIX = "cascade"

# --- streams ---------------------------------------------------------------
EVENTS_STREAM = "CASCADE"
JOBS_STREAM = "CASCADE_JOBS"

TRACE_EVENTS = f"{PREFIX}.trace.>"
RUN_EVENTS = f"{PREFIX}.run.>"
SIM_EVENTS = f"{PREFIX}.sim.>"
S3_EVENTS = f"{PREFIX}.s3.events"
EVENTS_SUBJECTS: tuple[str, ...] = (TRACE_EVENTS, RUN_EVENTS, SIM_EVENTS, S3_EVENTS)

JOBS = f"{PREFIX}.jobs.>"
JOBS_SUBJECTS: tuple[str, ...] = (JOBS,)
JOB_PREPARE = f"{PREFIX}.jobs.prepare"
JOB_SIM = f"{PREFIX}.jobs.sim"

RUN_REQUESTED = f"{PREFIX}.run.requested"

# --- KV buckets -----------------------------------------------------------
KV_TRACES = "cascade-traces"
KV_RUNS = "cascade-runs"
KV_SIMS = "cascade-sims"
KV_META = "cascade-meta"
"""Small shared facts: schema version, sample bootstrap markers, per-service notes."""
KV_BUCKETS: tuple[str, ...] = (KV_TRACES, KV_RUNS, KV_SIMS, KV_META)

# --- headers --------------------------------------------------------------
HDR_MSG_ID = "Nats-Msg-Id"
HDR_MSG_TYPE = "Cascade-Type"
HDR_SERVICE = "Cascade-Service"
HDR_TRACE_ID = "Cascade-Trace-Id"
HDR_RUN_ID = "Cascade-Run-Id"
HDR_SIM_ID = "Cascade-Sim-Id"

# --- services, queue groups, durable consumers --------------------------
SERVICES: tuple[str, ...] = ("ingest", "prepare", "orchestrator", "simulator", "api")
SVC_PREFIX = f"{PREFIX}.svc"

QUEUE_INGEST = "cascade-ingest"
QUEUE_PREPARE = "cascade-prepare"
QUEUE_ORCHESTRATOR = "cascade-orchestrator"
QUEUE_SIMULATOR = "cascade-simulator"
QUEUE_API = "cascade-api"

DURABLE_PREPARE_JOBS = "prepare-jobs"
DURABLE_SIM_JOBS = "sim-jobs"
DURABLE_INGEST_S3 = "ingest-s3-events"
DURABLE_INGEST_TRACES = "ingest-trace-events"
DURABLE_INGEST_SEALS = "ingest-seal-events"
DURABLE_ORCHESTRATOR_RUNS = "orchestrator-run-events"
DURABLE_ORCHESTRATOR_SIMS = "orchestrator-sim-events"
DURABLE_API_EVENTS = "api-events"

# --- event kinds ------------------------------------------------------------
TRACE_KINDS: tuple[str, ...] = (
    "created", "file", "kernel", "kernel-failed", "sealed", "bundle", "state", "failed", "deleted",
    "uploaded",
)
RUN_KINDS: tuple[str, ...] = ("cancel", "state", "completed", "failed")
SIM_KINDS: tuple[str, ...] = ("queued", "started", "progress", "completed", "failed", "cancelled")

def _kind(kind: str, known: tuple[str, ...], family: str) -> str:
    if kind != "*" and kind not in known:
        raise ValidationError(f"unknown {family} event kind {kind!r}; known: {', '.join(known)}")
    return kind


def trace_event(trace_id: str, kind: str) -> str:
    """``cascade.trace.{trace_id}.{kind}`` (``trace_id``/``kind`` may be ``*``)."""
    tid = trace_id if trace_id == "*" else check_token(trace_id, "trace_id")
    return f"{PREFIX}.trace.{tid}.{_kind(kind, TRACE_KINDS, 'trace')}"


def trace_events(trace_id: str) -> str:
    """Every event of one trace: ``cascade.trace.{trace_id}.>``."""
    return f"{PREFIX}.trace.{check_token(trace_id, 'trace_id')}.>"


def run_event(run_id: str, kind: str) -> str:
    """``cascade.run.{run_id}.{kind}`` (``run_id``/``kind`` may be ``*``)."""
    rid = run_id if run_id == "*" else check_token(run_id, "run_id")
    return f"{PREFIX}.run.{rid}.{_kind(kind, RUN_KINDS, 'run')}"


def run_events(run_id: str) -> str:
    """Every event of one run: ``cascade.run.{run_id}.>``."""
    return f"{PREFIX}.run.{check_token(run_id, 'run_id')}.>"


def sim_event(sim_id: str, kind: str) -> str:
    """``cascade.sim.{sim_id}.{kind}`` (``sim_id``/``kind`` may be ``*``)."""
    sid = sim_id if sim_id == "*" else check_token(sim_id, "sim_id")
    return f"{PREFIX}.sim.{sid}.{_kind(kind, SIM_KINDS, 'sim')}"


def sim_events(sim_id: str) -> str:
    """Every event of one sim: ``cascade.sim.{sim_id}.>``."""
    return f"{PREFIX}.sim.{check_token(sim_id, 'sim_id')}.>"


def sim_progress(sim_id: str) -> str:
    """``cascade.sim.{sim_id}.progress``."""
    return sim_event(sim_id, "progress")


def micro_name(service: str) -> str:
    """Name of a Cascade service in NATS micro discovery (``$SRV.*``): ``cascade-{service}``."""
    return f"{PREFIX}-{check_token(service, 'service')}"


def svc_endpoint(service: str, endpoint: str) -> str:
    """Request/reply subject of one micro endpoint: ``cascade.svc.{service}.{endpoint}``."""
    return f"{SVC_PREFIX}.{check_token(service, 'service')}.{check_token(endpoint, 'endpoint')}"


def kv_key(*parts: str) -> str:
    """A KV key made of id tokens joined by ``.`` (e.g. ``kv_key(trace_id, "files", name_hash)``)."""
    return ".".join(check_token(p, "key part") for p in parts)
