"""Kernel tables on disk (cascade.tableio), in a fresh interpreter: reading a small table does not
load Arrow (the formats, streaming and errors: tests/unit/test_tableio.py)."""

from __future__ import annotations

from tests.support.paths import REPO
from tests.support.tableio_readers import reader

__all__ = ["reader"]


def test_reading_a_small_table_does_not_load_arrow() -> None:
    import subprocess
    import sys

    sample = REPO / "samples/opt125m-h100-e2e/synthetic/timeline.csv.gz"
    code = ("import sys\nfrom cascade.tableio import read_table\n"
            f"t = read_table({str(sample)!r})\n"
            "print(len(t), 'pyarrow' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rows, loaded = out.stdout.split()
    assert int(rows) > 10_000 and loaded == "False"
