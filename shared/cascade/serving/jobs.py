"""Background serving scenarios as they are kept (:class:`JobRecord`, in the ``cascade-meta``
KV bucket) and shown (:class:`JobView`): the read model of ``GET /api/scenarios/{id}``.
Pure: the api stores and loads them."""

from __future__ import annotations

from typing import Literal

import msgspec

from cascade.serving.requests import ScenarioAnswer

#: A running job without a heartbeat for this long is reported failed.
STALE_AFTER_S = 60.0

JobState = Literal["queued", "running", "completed", "failed"]


class JobRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A background scenario, as kept in KV."""

    id: str
    state: JobState = "queued"
    created_at: float
    updated_at: float
    done: int = 0
    total: int = 0
    percent: float = 0.0
    model: str = ""
    sim: str = ""
    capacity_search: bool = False
    probes: int = 0
    error: str | None = None
    response_key: str | None = None
    instance: str = ""


class JobProgress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Requests simulated so far (and capacity-search probes run)."""

    done: int
    total: int
    percent: float
    probes: int


class JobView(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A background scenario: 202 answer of POST /api/scenarios, GET /api/scenarios/{id}."""

    id: str
    state: JobState
    progress: JobProgress
    model: str
    sim: str
    capacity_search: bool
    created_at: float
    updated_at: float
    error: str | None
    url: str
    response: ScenarioAnswer | msgspec.UnsetType = msgspec.UNSET
    """The answer, once completed (GET only)."""


def job_view(job: JobRecord, now: float, *, stale_after_s: float = STALE_AFTER_S,
             response: ScenarioAnswer | msgspec.UnsetType = msgspec.UNSET) -> JobView:
    """How a job is shown at ``now``: one queued or running without a heartbeat for
    ``stale_after_s`` is failed (its api instance stopped)."""
    state, error = job.state, job.error
    if state in ("queued", "running") and now - job.updated_at > stale_after_s:
        state = "failed"
        error = (f"no progress for {stale_after_s:g} s: the api instance running it stopped; "
                 "post the scenario again")
    return JobView(id=job.id, state=state, progress=JobProgress(done=job.done, total=job.total, percent=job.percent,
                                                                 probes=job.probes),
                   model=job.model, sim=job.sim, capacity_search=job.capacity_search, created_at=job.created_at,
                   updated_at=job.updated_at, error=error, url=f"/api/scenarios/{job.id}", response=response)
