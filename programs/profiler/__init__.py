"""The profiler: what ``cascade profile`` runs next to a GPU, and what user code calls.

User code marks its steps with :func:`step` (one call per step, after the step's work)::

    import programs.profiler
    for batch in loader:
        model(batch)
        programs.profiler.step()

Under ``cascade profile`` this records the step's wall time in the baseline pass
(``CASCADE_PROFILE_STEPS``, one line per step) and advances the PyTorch profiler's
step markers (``ProfilerStep#N``) in the timeline pass; elsewhere it does nothing.
Nothing here imports torch: the timeline pass does, inside the process it profiles.

Modules: :mod:`.baseline` (the baseline file), :mod:`.watch` (which kernel files are
complete), :mod:`.upload` (parallel, retried, resumable uploads through the app's
presigned flow), :mod:`.session` (the passes around COMMAND), :mod:`.torchrun` (a Python
script under the PyTorch profiler), :mod:`.hf` (the Hugging Face recipe).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

#: Environment variables ``cascade profile`` sets for COMMAND.
ENV_PASS = "CASCADE_PROFILE_PASS"
"""baseline, timeline or instructions: the pass COMMAND runs in."""
ENV_STEPS = "CASCADE_PROFILE_STEPS"
"""File :func:`step` appends ``<monotonic ns>`` lines to (baseline pass)."""
ENV_BASELINE = "CASCADE_PROFILE_BASELINE"
"""Where a recipe that times itself writes its baseline.json (baseline pass)."""
ENV_TIMELINE = "CASCADE_PROFILE_TIMELINE"
"""Where the timeline pass writes its Chrome trace."""
ENV_TRACES_FOLDER = "TRACES_FOLDER"
"""The folder kernel traces are written to (the NVBit tracer's own variable)."""

_step_hook: Callable[[], None] | None = None
_steps_file: str | None = None
_step_count = 0


def set_step_hook(hook: Callable[[], None] | None) -> None:
    """Called by the timeline pass: ``hook`` runs at every :func:`step` (None: clear)."""
    global _step_hook
    _step_hook = hook


def step() -> None:
    """Mark the end of one step of the workload (see the module docstring)."""
    global _steps_file, _step_count
    _step_count += 1
    if _step_hook is not None:
        _step_hook()
    if _steps_file is None:
        _steps_file = os.environ.get(ENV_STEPS, "")
    if _steps_file:
        with open(_steps_file, "a", encoding="ascii") as fh:
            fh.write(f"{time.monotonic_ns()}\n")


def steps_marked() -> int:
    """How many times :func:`step` was called in this process."""
    return _step_count
