"""Bodies of ``/api/runs``: the run request, the answers, the progress events and results."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from cascade.engine.registry import ModelConfig, model_names
from cascade.gpus import known_gpu_names
from cascade.platform.runevents import RunEventData, SimEventData
from cascade.platform.state import RunRecord, SimRecord, TraceRecord
from cascade.runs.plan import MAX_REPLICAS, ReplayOptions
from cascade.runs.summary import ConfigResult, RecordedReference

ModelName = Annotated[str, msgspec.Meta(extra_json_schema={"enum": model_names()})]
"""A kernel model by name, with its default settings (the names come from the model registry)."""
ConfigName = Annotated[str, msgspec.Meta(extra_json_schema={"enum": known_gpu_names()})]
"""A built-in GPU spec id or alias (a stored custom spec's name is accepted too)."""
InlineSpec = Annotated[dict[str, Any], msgspec.Meta(
    extra_json_schema={"$ref": "#/components/schemas/GPUSpec"})]
"""A custom GPU spec given inline."""


class CreateRun(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of POST /api/runs."""

    trace_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    """A ready trace."""
    configs: Annotated[list[ConfigName | InlineSpec], msgspec.Meta(min_length=1, max_length=64)]
    """GPU spec ids / aliases / custom spec names, or custom specs given inline."""
    replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)] = 1
    """Independent simulations per configuration."""
    model: ModelName | ModelConfig = "auto"  # type: ignore[valid-type]
    """Kernel model: a name, or ``{"kind": name, ...settings}``."""
    options: ReplayOptions = ReplayOptions()
    """Replay options (``chunk_delay_s`` paces a simulation, for demos and tests)."""
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    """Human label."""


class RunAccepted(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of POST /api/runs."""

    id: str
    state: str
    run: RunRecord


class RunList(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/runs: one page of runs, newest first."""

    runs: list[RunRecord]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page (null: this is the last)."""
    total: int = 0
    """Runs matching the filters, on every page together."""


class RunDetail(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of GET /api/runs/{id}: the run and each of its sims."""

    run: RunRecord
    sims: list[SimRecord]


class CancelAccepted(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of POST /api/runs/{id}/cancel."""

    id: str
    state: str
    cancel_requested: bool


#: ``event: sim`` (id: the event's sequence) and ``event: run`` (the whole RunRecord first
#: and when it changes, or a run event's fields).
SSE_EVENTS: dict[str | None, Any] = {"sim": SimEventData, "run": (RunRecord, RunEventData)}
CSV_CONTENT = {"text/csv": {"schema": {"type": "string"}}}
PARQUET_CONTENT = {"application/vnd.apache.parquet": {"schema": {"type": "string",
                                                                 "format": "binary"}}}


class TraceCoverage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What of the trace the results cover."""

    kernels_total: int
    kernels_prepared: int
    kernels_failed: int
    bundle_kernels: int
    partial: bool
    errors: list[str]
    warnings: list[str]

    @classmethod
    def of(cls, t: TraceRecord) -> TraceCoverage:
        """Kernels prepared of those uploaded, the failed ones and why, and the trace's warnings
        (skipped files, partial bundles)."""
        return cls(kernels_total=t.kernels_total, kernels_prepared=t.kernels_prepared,
                   kernels_failed=t.kernels_failed, bundle_kernels=t.bundle_kernels,
                   partial=t.kernels_failed > 0, errors=list(t.errors), warnings=list(t.warnings))


class RunResults(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GET /api/runs/{id}/results (JSON)."""

    run_id: str
    trace_id: str
    state: str
    configs: list[ConfigResult]
    reference: RecordedReference | None
    trace: TraceCoverage | None


class KernelRows(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GET /api/runs/{id}/results/{sim}/kernels (JSON): one page of per-kernel predictions."""

    run_id: str
    sim_id: str
    total: int
    offset: int
    limit: int
    columns: list[str]
    kernels: list[dict[str, str | int | float | bool | None]]
    """One object per kernel, keyed by ``columns`` (null: not known)."""
