"""Current-state records kept in the NATS KV buckets (traces, runs, sims).

These are the api's view of the world, shared by every service and api
replica. They are rebuilt from KV on restart; no state lives only in a
process's memory. Records are msgspec Structs; new fields get defaults.
Per-file and per-kernel details of big traces live under their own KV keys
(see the ingest service), so a record stays well under NATS's payload limit.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from cascade.runs.plan import ModelConfig, ReplayOptions

TraceKind = Literal["instructions", "timeline", "both"]
TraceStateName = Literal["receiving", "preparing", "ready", "incomplete", "failed"]
RunStateName = Literal["queued", "running", "completed", "partial", "failed", "cancelled"]
"""``partial``: every sim finished, some completed and some failed (each config's state is in the
run's results); ``failed``: none completed, or the run itself could not go on."""
SimStateName = Literal["queued", "running", "completed", "failed", "cancelled"]

TERMINAL_RUN_STATES: frozenset[str] = frozenset({"completed", "partial", "failed", "cancelled"})


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
    """Where a record came from: a sample, a synthetic replica, a user upload."""

    badge: str | None = None
    """Short label shown in the UI, e.g. "Sample" or "synthetic"."""
    source: str = "upload"
    """'upload', 'sample-recorded', 'sample-synthetic', 'import'."""
    description: str = ""
    read_only: bool = False
    """True for recorded samples: they can be viewed, never rerun or deleted."""
    rerun_refusal: str | None = None
    """Message given (409) when a read-only record is asked to run again."""


class TraceRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One trace: its identity, upload progress, preparation state and bundle."""

    id: str
    name: str
    source_gpu: str
    """GPU spec id the trace was captured on (resolved from a driver device name)."""
    kind: TraceKind = "instructions"
    workload: str = ""
    state: TraceStateName = "receiving"
    created_at: float = 0.0
    updated_at: float = 0.0
    sealed: bool = False
    expected_files: list[str] = []
    expected_kernels: int | None = None
    files_received: int = 0
    bytes_received: int = 0
    kernels_total: int = 0
    kernels_prepared: int = 0
    kernels_failed: int = 0
    missing: list[str] = []
    errors: list[str] = []
    warnings: list[str] = []
    bundle_key: str | None = None
    """S3 prefix of the ready bundle: bundles/{trace}/{hash}/."""
    bundle_hash: str | None = None
    baseline: dict[str, float] = {}
    """Measured baseline timings on the source GPU (e.g. e2e_ms, step means)."""
    provenance: Provenance = Provenance()
    sealed_at: float | None = None
    """Unix time the upload was sealed (start of the grace period for missing files)."""
    bundle_kernels: int = 0
    """Kernels in the ready bundle."""
    prepared_bytes: int = 0
    """Raw bytes prepare has read and prepared (each unit counted once, when it first succeeds)."""
    prepare_seconds: float = 0.0
    """Seconds prepare spent on those units (read, parse, store): prepared_bytes / this is
    its throughput."""


class SimRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One simulation: one (configuration, replica) of a run."""

    id: str
    run_id: str
    config: str
    """GPU spec id (or custom spec name) simulated."""
    replica: int = 0
    state: SimStateName = "queued"
    percent: float = 0.0
    kernels_done: int = 0
    kernels_total: int = 0
    simulated_ns: float = 0.0
    eta_s: float | None = None
    attempts: int = 0
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    result_key: str | None = None
    predicted_e2e_ns: float | None = None
    model: str | None = None
    worker: str = ""
    """Simulator process (host:pid or pod) holding the sim's current attempt."""


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One run: a trace simulated on a set of configurations x replicas."""

    id: str
    trace_id: str
    configs: list[str]
    replicas: int = 1
    model: str = "auto"
    """The kernel model's name (its settings: ``model_config``)."""
    model_config: ModelConfig | None = None  # type: ignore[valid-type]
    """The kernel model and its settings, as the sims' jobs carry them."""
    replay: ReplayOptions = ReplayOptions()
    """How simulators replay the timeline."""
    state: RunStateName = "queued"
    created_at: float = 0.0
    updated_at: float = 0.0
    sim_ids: list[str] = []
    error: str | None = None
    cancel_requested: bool = False
    provenance: Provenance = Provenance()
    custom_specs: dict[str, Annotated[dict[str, Any], msgspec.Meta(
        extra_json_schema={"$ref": "#/components/schemas/GPUSpec"})]] = {}
    """Custom GPU specs supplied inline with the request, by name."""
    jobs_published: bool = False
    """True once the orchestrator queued every sim's job (on restart it re-publishes otherwise)."""
    name: str = ""
    """Human label of the run."""
    finished_at: float | None = None
    """When the run reached a terminal state."""
