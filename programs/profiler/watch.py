"""Which kernel trace files in the tracer's folder are complete.

The NVBit tracer writes one ``kernel-N.trace`` (or ``.trace.xz``) at a time, in
kernel order, and lists each kernel in ``kernelslist``. A kernel file is complete
when a later kernel file exists, when its name is in ``kernelslist``, or when the
traced command has exited. :class:`KernelFolderWatcher` is pure bookkeeping over
directory listings (no threads, no timers): the session polls it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from cascade.errors import ValidationError
from cascade.traces.files import check_name

#: Names the tracer writes besides kernel files, uploaded after the kernels.
LIST_NAMES = ("kernelslist", "kernelslist.g")
STATS_NAME = "stats.csv"


@dataclass(frozen=True)
class CompleteFile:
    """A kernel file found complete, and when it was seen so."""

    path: Path
    kernel_id: int
    size: int
    seen_complete: float
    """``time.time()`` of the scan that found it complete."""


@dataclass
class KernelFolderWatcher:
    """Finds complete kernel files under ``folder`` (and a ``traces/`` sub-folder, where
    the tracer writes when told ``USER_DEFINED_FOLDERS``); each is reported once."""

    folder: Path
    reported: set[str] = field(default_factory=set)

    def _folders(self) -> list[Path]:
        sub = self.folder / "traces"
        return [self.folder, sub] if sub.is_dir() else [self.folder]

    def kernel_files(self) -> dict[str, tuple[Path, int, int]]:
        """name -> (path, kernel id, size) of every kernel trace file present."""
        found: dict[str, tuple[Path, int, int]] = {}
        for folder in self._folders():
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            for entry in entries:
                if not entry.name.startswith("kernel-") or not entry.is_file():
                    continue
                try:
                    tf = check_name(entry.name)
                except ValidationError:
                    continue
                if tf.kind != "kernel" or tf.kernel_id is None:
                    continue
                found.setdefault(entry.name, (Path(entry.path), tf.kernel_id, entry.stat().st_size))
        return found

    def listed(self) -> set[str]:
        """Kernel names listed in ``kernelslist`` / ``kernelslist.g`` so far (stem and name)."""
        names: set[str] = set()
        for folder in self._folders():
            for list_name in LIST_NAMES:
                try:
                    text = (folder / list_name).read_text(encoding="utf-8", errors="replace")
                except FileNotFoundError:
                    continue
                # the last line may still be being written: only whole lines count
                for line in text.splitlines(keepends=True):
                    if line.endswith("\n") and line.startswith("kernel-"):
                        names.add(line.strip())
        return names

    def scan(self, *, exited: bool) -> list[CompleteFile]:
        """Kernel files complete now and not reported before, in kernel order."""
        files = self.kernel_files()
        if not files:
            return []
        newest = max(kid for _p, kid, _s in files.values())
        listed = self.listed() if not exited else set()
        now = time.time()
        out = []
        for name, (path, kid, size) in sorted(files.items(), key=lambda kv: kv[1][1]):
            if name in self.reported:
                continue
            stem = name.split(".trace")[0]
            if exited or kid < newest or name in listed or stem in listed or \
                    any(n.split(".trace")[0] == stem for n in listed):
                self.reported.add(name)
                out.append(CompleteFile(path=path, kernel_id=kid, size=size, seen_complete=now))
        return out

    def pending(self) -> list[str]:
        """Kernel files present but not reported complete (still being written)."""
        return sorted(n for n in self.kernel_files() if n not in self.reported)

    def extras(self) -> list[Path]:
        """kernelslist[.g] and stats.csv, when present (uploaded after the kernels)."""
        out: list[Path] = []
        for folder in self._folders():
            for name in (*LIST_NAMES, STATS_NAME):
                p = folder / name
                if p.is_file() and all(q.name != name for q in out):
                    out.append(p)
        return out
