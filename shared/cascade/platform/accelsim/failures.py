"""Why an Accel-Sim run failed, read from its output: the dynamic loader's message (the binary
could not start), a file a config names that is missing, a trace Accel-Sim refused; each with
what to do."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from cascade.platform.accelsim.library import LIBRARY_VAR
from cascade.platform.accelsim.tracefiles import listed_ids

_LOADER = re.compile(r"error while loading shared libraries|symbol lookup error|undefined symbol|"
                     r"cannot open shared object file|version `[^']+' not found")


def loader_failure(returncode: int | None, output: str) -> str:
    """The dynamic loader's line when the binary could not start (exit 127, or its message in
    the output); '' when it started."""
    hit = next((line.strip() for line in output.splitlines() if _LOADER.search(line)), "")
    if hit or returncode in (126, 127):
        return hit or f"exit {returncode}"
    return ""


def library_fix(library: str, source: str) -> str:
    """What to do when accel-sim.out cannot load its libraries, naming the setting."""
    now = (f"it ran with {library} (from {source}) first on LD_LIBRARY_PATH" if library else
           f"no library folder was found ({source})" if source else
           "no library folder was found (neither setting points into an Accel-Sim checkout)")
    return (f"GPGPU-Sim's libcudart.so must be on the library path, as `source "
            f"gpu-simulator/setup_environment.sh` puts it: set {LIBRARY_VAR} to the folder holding "
            f"the libcudart.so that accel-sim.out was built with (gpu-simulator/gpgpu-sim/lib/"
            f"gcc-*/cuda-*/release), or rebuild Accel-Sim; {now}")


_MISSING_FILE = re.compile(r"(?:Could not open configuration file (\S+)|Cannot open config file '([^']+)')")


def missing_file_hint(tail: str, paths: dict[str, str]) -> str:
    """When Accel-Sim could not open a file a config names: which file, and what to do."""
    m = _MISSING_FILE.search(tail)
    if not m:
        return ""
    name = m.group(1) or m.group(2)
    folders = list(dict.fromkeys(str(Path(p).parent) for p in paths.values()))
    return (f" ({name}, named by the config relative to Accel-Sim's working directory, is not in "
            f"the config folder {' or '.join(folders) or '(none)'}: add it there; every file of "
            "the folder is linked into the working directory)")


_REFUSED_TRACE = re.compile(r"unsupported binary version: *(-?\d+)")


def refused_trace_hint(tail: str) -> str:
    """When Accel-Sim refused the trace (it prints ``unsupported binary version: N`` and exits
    0): what that means and what to do."""
    m = _REFUSED_TRACE.search(tail)
    if not m:
        return ""
    return (f" (Accel-Sim has no opcode table for the `-binary version = {m.group(1)}` in the "
            "kernel-N.traceg header: the trace was not taken by Accel-Sim's NVBit tracer from a GPU "
            "this Accel-Sim supports, or its header was rewritten; trace the program again with "
            "util/tracer_nvbit of this checkout and run post-traces-processing)")


def failure_message(returncode: int, kernels_done: int, tail: str, *, paths: Mapping[str, str] | None = None,
                    kernelslist: str = "", library: str = "") -> str:
    """Why an Accel-Sim run failed, with Accel-Sim's own last lines; '' when it did not (it
    exited 0 and simulated at least one kernel)."""
    listed = ""
    if kernelslist:
        try:
            n = len(listed_ids(Path(kernelslist).read_text(errors="replace")))
            listed = f" of the {n} kernels {Path(kernelslist).name} names"
        except OSError:
            pass
    if returncode == 0:
        if kernels_done:
            return ""
        return (f"accel-sim exited with 0 having simulated none{listed}{refused_trace_hint(tail)}; "
                f"last output:\n{tail}")
    how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with {returncode}"
    loader = loader_failure(returncode, tail)
    hint = (f" (it could not start: {loader}; {library_fix(library, 'LD_LIBRARY_PATH')})"
            if loader and kernels_done == 0 else missing_file_hint(tail, dict(paths or {})))
    return f"accel-sim {how} after {kernels_done} kernels{hint}{refused_trace_hint(tail)}; last output:\n{tail}"
