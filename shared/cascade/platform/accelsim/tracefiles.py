"""An instruction trace's files as Accel-Sim reads them: the kernels a ``kernelslist.g`` names,
the list rewritten to name the local (decompressed) files; timeline-only traces refused."""

from __future__ import annotations

import re

from cascade.errors import ValidationError
from cascade.traces.files import kernel_stems


def refuse_timeline_trace(trace_id: str, kind: str) -> None:
    """A timeline-only trace has no instruction files for Accel-Sim: ``ValidationError``."""
    if kind == "timeline":
        raise ValidationError(
            f"trace {trace_id} is a timeline-only trace (kernel durations, no instruction files): "
            "the accel-sim model needs Accel-Sim NVBit traces (kernel-N.traceg and kernelslist.g); "
            "use model auto, scaled or analytical for it", field="model")


_STEM = re.compile(r"^kernel-(\d+)")


def kernel_stem(name: str) -> str:
    """``kernel-N[-ctx_0x...]`` of a kernel trace file name (the name itself when it has another form)."""
    base = name.rsplit("/", 1)[-1]
    m = re.match(r"^(kernel-\d+(?:-ctx_0x[0-9a-fA-F]+)?)\.trace", base)
    return m.group(1) if m else base


def localize_kernelslist(text: str, local: dict[str, str]) -> str:
    """A kernelslist[.g] naming the local files: each kernel line becomes the local
    ``kernel-N.traceg`` (decompressed, beside the list); copies and other lines stay."""
    out = []
    for line in text.splitlines():
        entry = line.strip()
        if entry and "," not in entry and not entry.startswith("#") and ".trace" in entry:
            out.append(local.get(kernel_stem(entry), entry.rsplit("/", 1)[-1]))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def kernel_number(name: str) -> int:
    """The N of a ``kernel-N...`` name (0 when it has another form)."""
    m = _STEM.match(name)
    return int(m.group(1)) if m else 0


def listed_ids(text: str) -> list[int]:
    """The N of every ``kernel-N`` a kernelslist names, in its order."""
    out = []
    for stem in kernel_stems(text):
        m = _STEM.match(stem)
        if m:
            out.append(int(m.group(1)))
    return out
