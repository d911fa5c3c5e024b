"""A trace folder as tools leave it, for the tests of what ``cascade import`` takes from one
(``tests/unit/test_import.py``) and how it imports it (``tests/integration/test_import.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.traces_stack import write_kernels


def tool_folder(folder: Path) -> list[Path]:
    """A trace folder as tools leave it: kernels (one garbage), kernelslist.g, and the files
    a public Accel-Sim trace repository keeps beside them."""
    paths = write_kernels(folder, 3, blocks=2, iterations=1, xz=False)
    paths[1].write_bytes(b"\x00\x01garbage that is no kernel trace\n" * 20)
    (folder / "nvprof.json").write_text(json.dumps({"kernels": [{"name": "k", "time": 1.0}]}))
    (folder / "accelsim_log.csv").write_text("kernel,cycles,ipc\nk1,100,1.5\n")
    (folder / "run.log").write_text("GPGPU-Sim: done\n")
    (folder / "junk.bin").write_bytes(os.urandom(64))
    (folder / "notes.txt").write_text("traced on a P4\n")
    return paths
