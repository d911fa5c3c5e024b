"""Planning a run: GPU configurations, custom specs kept in KV, sim ids.

Shared by the api (validates a request and creates the run), the
orchestrator (creates the sims and their jobs) and the simulator (resolves a
job's spec). Sim ids are a pure function of the run id, the configuration and
the replica, so every service (and a redelivered request) computes the same ones.

Custom GPU specs added with ``POST /api/configs`` live in the ``cascade-meta``
KV bucket under ``gpus.{spec_id}`` (the spec as a JSON object), so every api
replica and simulator agrees on them. A run that uses one carries it inline in
its jobs, so a later change to the stored spec does not change a running run.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from cascade.errors import ConflictError, UnknownGPUError, ValidationError
from cascade.gpus import GPURegistry, GPUSpec, default_registry, normalize_name, spec_from_mapping
from cascade.gpus.registry import suggest_gpus
from cascade.ids import check_token

#: Kernel models a run may ask for (``auto`` lets the engine pick).
MODELS: tuple[str, ...] = ("auto", "analytical", "scaled", "roofline", "accel-sim")
#: Upper bound of ``replicas`` in one run request.
MAX_REPLICAS = 64
#: Upper bound of configurations x replicas in one run.
MAX_SIMS = 512

SLUG = re.compile(r"[^A-Za-z0-9_\-]+")


def new_run_id() -> str:
    """A fresh run id (``run-`` + 12 hex digits)."""
    return f"run-{uuid.uuid4().hex[:12]}"


def sim_id(run_id: str, config_id: str, replica: int) -> str:
    """Deterministic id of one (configuration, replica) of a run."""
    slug = SLUG.sub("_", config_id).strip("_").lower()[:40] or "gpu"
    return check_token(f"{run_id}-{slug}-r{replica}", "sim_id")


def plan_sims(run_id: str, config_ids: list[str], replicas: int) -> list[tuple[str, str, int]]:
    """``(sim_id, config_id, replica)`` for every sim of a run, configuration-major."""
    return [(sim_id(run_id, c, r), c, r) for c in config_ids for r in range(replicas)]


def spec_mapping(spec: GPUSpec) -> dict[str, Any]:
    """A spec as a JSON-able mapping (what jobs and KV carry)."""
    out: dict[str, Any] = msgspec.to_builtins(spec)
    return out


@dataclass(frozen=True)
class ResolvedConfig:
    """One configuration of a run request, resolved to a spec."""

    config_id: str
    """Spec id used in records and results."""
    spec: GPUSpec
    inline: dict[str, Any] | None
    """The spec as a mapping when it is custom (jobs carry it inline), else None."""

    @property
    def job_ref(self) -> str | dict[str, Any]:
        """What a SimJob's ``config`` carries: the id of a built-in spec or the custom mapping."""
        return self.inline if self.inline is not None else self.config_id


def resolve_config(
    ref: str | dict[str, Any],
    *,
    custom: dict[str, GPUSpec] | None = None,
    registry: GPURegistry | None = None,
    where: str = "config",
) -> ResolvedConfig:
    """Resolve a spec id / alias / custom spec name, or validate an inline custom spec.

    Unknown names raise :class:`UnknownGPUError` listing every known id (built-in
    and custom); a malformed inline spec raises ``ConfigError`` naming ``where``.
    """
    registry = registry or default_registry()
    custom = custom or {}
    if isinstance(ref, dict):
        spec = spec_from_mapping(ref, where)
        builtin = registry.resolve(spec.id)
        if builtin is not None and builtin != spec:
            raise ConflictError(
                f"{where}: id {spec.id!r} is a built-in spec; give the custom spec another id",
                state="builtin",
            )
        return ResolvedConfig(spec.id, spec, None if builtin is not None else spec_mapping(spec))
    if not isinstance(ref, str) or not ref.strip():
        raise ValidationError("expected a GPU spec id or a spec object", field=where)
    builtin_spec = registry.resolve(ref)
    if builtin_spec is not None:
        return ResolvedConfig(builtin_spec.id, builtin_spec, None)
    wanted = normalize_name(ref)
    for cid, cspec in custom.items():
        if wanted in (normalize_name(cid), *(normalize_name(a) for a in cspec.aliases)):
            return ResolvedConfig(cspec.id, cspec, spec_mapping(cspec))
    raise UnknownGPUError(ref, [*registry.ids(), *custom],
                          suggestions=suggest_gpus(registry, ref, extra=custom))


def spec_of_job_config(ref: str | dict[str, Any], registry: GPURegistry | None = None) -> GPUSpec:
    """The spec a job's ``config`` names (a built-in id, or an inline custom mapping)."""
    if isinstance(ref, dict):
        return spec_from_mapping(ref, "job config")
    return (registry or default_registry()).get(ref)
