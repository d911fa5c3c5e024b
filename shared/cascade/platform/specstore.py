"""Custom GPU specs stored in the KV meta bucket (built-in specs live in :mod:`cascade.gpus`)."""

from __future__ import annotations

from typing import Any

from cascade.errors import ConfigError, ConflictError, ValidationError
from cascade.gpus import GPURegistry, GPUSpec, default_registry, spec_from_mapping
from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.keys import CUSTOM_SPEC_PREFIX, custom_spec_key
from cascade.platform.log import get_logger
from cascade.runs.plan import SLUG, spec_mapping

log = get_logger("cascade.platform.specstore")


#: The meta-bucket keys of custom specs (for a :class:`cascade.platform.bus.KVMirror`).
CUSTOM_SPEC_PATTERN = f"{CUSTOM_SPEC_PREFIX}.>"


async def load_custom_specs(bus: Bus) -> dict[str, GPUSpec]:
    """Every custom spec stored in KV, by id (one scan: services that read them per request
    keep a :class:`cascade.platform.bus.KVMirror` of :data:`CUSTOM_SPEC_PATTERN` and use
    :func:`custom_specs_from`)."""
    kv = await bus.kv(subjects.KV_META)
    return custom_specs_from(await kv.values(dict, CUSTOM_SPEC_PATTERN))


def custom_specs_from(raw: dict[str, dict[str, Any]]) -> dict[str, GPUSpec]:
    """The custom specs of stored spec mappings (key -> mapping), by id; implausible ones are
    skipped with a warning."""
    out: dict[str, GPUSpec] = {}
    for key, data in raw.items():
        try:
            spec = spec_from_mapping(data, f"KV {subjects.KV_META}/{key}")
        except ConfigError as exc:  # stored before the plausibility bounds: skip, say why
            log.warning("skipping implausible custom spec", key=key,
                                                  error=str(exc))
            continue
        out[spec.id] = spec
    return out


async def save_custom_spec(bus: Bus, spec: GPUSpec, *, registry: GPURegistry | None = None) -> GPUSpec:
    """Store a custom spec in KV; a built-in id or alias is a :class:`ConflictError`.

    Saving the same id again replaces the stored spec (runs already started keep
    the copy they were planned with).
    """
    registry = registry or default_registry()
    for name in (spec.id, *spec.aliases):
        builtin = registry.resolve(name)
        if builtin is not None:
            raise ConflictError(
                f"GPU config name {name!r} is taken by the built-in spec {builtin.id}; "
                "choose another id", state="builtin",
            )
    if not SLUG.sub("", spec.id) or SLUG.search(spec.id):
        raise ValidationError(
            f"{spec.id!r} is not a usable config id: use letters, digits, '_' or '-'", field="id"
        )
    kv = await bus.kv(subjects.KV_META)
    await kv.put(custom_spec_key(spec.id), spec_mapping(spec))
    return spec
