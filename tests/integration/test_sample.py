"""The bundled sample `opt125m-h100-e2e`'s generator run as a script: twice gives byte-identical
files, the committed ones (its timeline, reference and loader: tests/unit/test_sample.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO
SAMPLE = ROOT / "samples" / "opt125m-h100-e2e"
SCRIPT = SAMPLE / "generate_timeline.py"


def test_script_twice_gives_byte_identical_files(tmp_path: Path) -> None:
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run
        proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)],
                              check=False, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert set(outs[0]) == {"timeline.csv.gz", "manifest.json"}
    assert outs[0] == outs[1]
    # and the committed files are exactly what the script writes
    for name, data in outs[0].items():
        assert (SAMPLE / "synthetic" / name).read_bytes() == data, f"synthetic/{name} is stale"
