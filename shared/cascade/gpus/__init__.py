"""GPU specifications: data files in ``specs/``, a registry, and an Accel-Sim config importer."""

from cascade.gpus.accelsim import import_accelsim_config, parse_options
from cascade.gpus.registry import (
    GPURegistry,
    builtin_specs,
    default_registry,
    get_gpu,
    known_gpu_names,
    load_spec_file,
    normalize_name,
    spec_from_mapping,
)
from cascade.gpus.spec import ARCHES, Efficiency, GPUSpec

__all__ = [
    "ARCHES",
    "Efficiency",
    "GPURegistry",
    "GPUSpec",
    "builtin_specs",
    "default_registry",
    "get_gpu",
    "import_accelsim_config",
    "known_gpu_names",
    "load_spec_file",
    "normalize_name",
    "parse_options",
    "spec_from_mapping",
]
