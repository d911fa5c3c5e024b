"""Planning a run: GPU configurations, the kernel model and its settings, sim ids.

:func:`plan_run` is the one place a run's configuration is checked and put together (a
:class:`RunPlan`); the platform stores it (:func:`cascade.platform.runs.new_run`) for the api
(which validates a request and creates the run) and the orchestrator (which creates the sims
and their jobs); the simulator resolves a job's spec with :func:`spec_of_job_config`. Sim ids are a pure function of the run id, the configuration and
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
from typing import Annotated, Any

import msgspec

from cascade.engine.registry import ModelConfig, model_config, model_name, model_names

__all__ = ["MAX_REPLICAS", "MAX_SIMS", "ModelConfig", "ReplayOptions", "RunPlan", "new_run_id",
           "plan_run", "plan_sims", "resolve_config", "sim_id", "spec_of_job_config"]
from cascade.errors import ConflictError, UnknownGPUError, ValidationError
from cascade.gpus import GPURegistry, GPUSpec, default_registry, normalize_name, spec_from_mapping
from cascade.gpus.registry import accelsim_config_hint, suggest_gpus
from cascade.ids import check_token

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
                          suggestions=suggest_gpus(registry, ref, extra=custom),
                          hint=accelsim_config_hint(ref))


def spec_of_job_config(ref: str | dict[str, Any], registry: GPURegistry | None = None) -> GPUSpec:
    """The spec a job's ``config`` names (a built-in id, or an inline custom mapping)."""
    if isinstance(ref, dict):
        return spec_from_mapping(ref, "job config")
    return (registry or default_registry()).get(ref)


class ReplayOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a simulator replays the timeline (not what it predicts)."""

    chunk_delay_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.0
    """Seconds to wait between chunks of kernels: paces a simulation (demos and tests)."""


class RunPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A checked run configuration: what to simulate, on what, with which model."""

    run_id: str
    trace_id: str
    configs: list[str]
    """Resolved spec ids, in request order."""
    replicas: int
    model: ModelConfig  # type: ignore[valid-type]
    """The kernel model and its settings (a tagged union: ``{"kind": "auto"}``, ...)."""
    replay: ReplayOptions = ReplayOptions()
    custom_specs: dict[str, dict[str, Any]] = {}
    """Custom specs used, inline, by id (jobs carry them so a later change does not apply)."""
    name: str = ""

    @property
    def model_name(self) -> str:
        """The model's registered name."""
        return model_name(self.model)

    def sims(self) -> list[tuple[str, str, int]]:
        """``(sim_id, config_id, replica)`` of every sim."""
        return plan_sims(self.run_id, self.configs, self.replicas)

    def job_config(self, config_id: str) -> str | dict[str, Any]:
        """What a sim job carries for ``config_id``: the id, or the custom spec inline."""
        return self.custom_specs.get(config_id) or config_id


def plan_run(
    *,
    run_id: str,
    trace_id: str,
    configs: list[str | dict[str, Any]],
    replicas: int,
    model: Any = "auto",
    replay: ReplayOptions | None = None,
    name: str = "",
    custom: dict[str, GPUSpec] | None = None,
    registry: GPURegistry | None = None,
) -> RunPlan:
    """Check and assemble a run's configuration (ValidationError / UnknownGPUError name the field).

    ``configs`` are spec ids, aliases, custom spec names or inline specs; ``model`` a model name,
    a ``{"kind": name, ...}`` mapping or a model config Struct.
    """
    check_token(run_id, "run_id")
    if not 1 <= replicas <= MAX_REPLICAS:
        raise ValidationError(f"expected 1..{MAX_REPLICAS} replicas", field="replicas")
    if len(configs) * replicas > MAX_SIMS:
        raise ValidationError(
            f"{len(configs)} configs x {replicas} replicas is over the limit of "
            f"{MAX_SIMS} simulations per run", field="replicas")
    if isinstance(model, str) and model not in model_names():
        raise ValidationError(f"unknown kernel model {model!r}; known: {', '.join(model_names())}",
                              field="model")
    resolved = [resolve_config(c, registry=registry, custom=custom, where=f"configs[{i}]")
                for i, c in enumerate(configs)]
    ids = [r.config_id for r in resolved]
    dupes = sorted({c for c in ids if ids.count(c) > 1})
    if dupes:
        raise ValidationError(f"configuration listed twice: {', '.join(dupes)}", field="configs")
    return RunPlan(run_id=run_id, trace_id=trace_id, configs=ids, replicas=replicas,
                   model=model_config(model, "model"), replay=replay or ReplayOptions(),
                   custom_specs={r.config_id: r.inline for r in resolved if r.inline is not None},
                   name=name)
