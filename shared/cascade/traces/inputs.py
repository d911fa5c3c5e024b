"""Local inputs for `cascade predict`: bundles, Accel-Sim trace folders, kernel files, timelines.

Registers loaders with :mod:`cascade.engine.io` (which handles CSV and .npz
kernel tables itself), so every CLI that takes a trace path accepts all of them.
"""

from __future__ import annotations

from pathlib import Path

from cascade.engine.io import LoadedTrace, register_loader
from cascade.errors import TraceFormatError
from cascade.gpus import get_gpu
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.traces.bundle import load_bundle
from cascade.traces.folder import parse_trace_folder
from cascade.traces.parse import kernel_id_from_name, parse_kernel_file
from cascade.traces.timeline import read_timeline

_KERNEL_SUFFIXES = (".trace", ".traceg", ".trace.xz", ".traceg.xz")
_TIMELINE_SUFFIXES = (".json", ".json.gz", ".jsonl", ".sqlite", ".sqlite3", ".db")


def is_bundle_dir(path: Path) -> bool:
    """A folder holding a prepared bundle (manifest.json + kernels.npz)."""
    return path.is_dir() and (path / "manifest.json").is_file() and (path / "kernels.npz").is_file()


def is_trace_folder(path: Path) -> bool:
    """A folder of Accel-Sim traces (a kernelslist or kernel-N trace files)."""
    if not path.is_dir():
        return False
    if (path / "kernelslist.g").is_file() or (path / "kernelslist").is_file():
        return True
    return any(kernel_id_from_name(p.name) is not None for p in path.iterdir())


def load_bundle_dir(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    """The bundle's kernels and the GPU its manifest says the trace was captured on."""
    bundle = load_bundle(path)
    source = bundle.manifest.source_gpu
    return bundle.kernels, (get_gpu(source) if source else None)


_ACCELSIM_FILES = ("kernelslist", "kernelslist.g", "stats.csv")


def load_trace_folder(path: Path) -> LoadedTrace:
    """Parse every kernel of an Accel-Sim trace folder into per-kernel features.

    A kernel file that fails to parse fails only itself (named in the warnings, with the
    reason); every file that is not part of an Accel-Sim trace is listed as skipped."""
    result = parse_trace_folder(path)
    if not result.kernels:
        detail = (f" ({len(result.failures)} failed; first: {next(iter(result.failures.values()))})"
                  if result.failures else "")
        raise TraceFormatError(str(path), None, f"at least one parsable kernel trace file{detail}")
    warnings = []
    total = len(result.kernels) + len(result.failures)
    if result.failures:
        warnings.append(f"{path}: {len(result.kernels)} of {total} kernels; failed: "
                        + "; ".join(result.failures.values()))
    for p in sorted(path.iterdir()):
        if p.name.startswith(".") or p.name in _ACCELSIM_FILES or kernel_id_from_name(p.name) is not None:
            continue
        warnings.append(f"{p.name}: skipped (not part of an Accel-Sim trace folder)")
    return LoadedTrace(result.table(), None, warnings=tuple(warnings))


def load_kernel_file(path: Path) -> tuple[KernelTable, GPUSpec | None]:
    """One kernel trace file (.trace/.traceg, optionally .xz)."""
    return parse_kernel_file(path).table(), None


def load_timeline_file(path: Path) -> LoadedTrace:
    """A PyTorch profiler Chrome trace, Nsight Systems SQLite export or Cascade JSONL timeline,
    with the device name it records."""
    tl = read_timeline(path)
    return LoadedTrace(tl.table, None, device=tl.device, warnings=tl.warnings)


def register() -> None:
    """Register the loaders (idempotent)."""
    global _registered
    if _registered:
        return
    _registered = True
    register_loader(is_bundle_dir, load_bundle_dir)
    register_loader(is_trace_folder, load_trace_folder)
    register_loader(lambda p: p.is_file() and p.name.lower().endswith(_KERNEL_SUFFIXES),
                    load_kernel_file)
    register_loader(lambda p: p.is_file() and p.name.lower().endswith(_TIMELINE_SUFFIXES),
                    load_timeline_file)


_registered = False
