"""The shared measured data (``../shared/data/measured``) cut to test size: the first rows of a
file, and a small NeuSight + Vidur tree (``small_data``) for ``cascade validate`` and the fitting
code, in ``tests/unit/test_validate.py`` and ``tests/integration/test_validate.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.paths import SHARED_DATA

MEASURED = SHARED_DATA / "measured"


def head(src: Path, dst: Path, rows: int) -> None:
    """Write the header and the first ``rows`` rows of ``src`` to ``dst``."""
    lines = src.read_text().splitlines()
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines[: rows + 1]) + "\n")


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Derived fixture: the first rows of each NeuSight file, H100 under NeuSight's naming."""
    root = tmp_path_factory.mktemp("measured")
    ns = root / "neusight"
    ns.mkdir()
    for f in (MEASURED / "neusight-train").glob("*__*"):
        if f.suffix == ".json":
            shutil.copy(f, ns / f.name)
        else:
            head(f, ns / f.name, 400)
    # a GPU under another naming scheme: rows of the A100 file relabelled as H100
    head(MEASURED / "neusight-train" / "linear__NVIDIA_A100-PCIE-40GB.csv", ns / "linear__NVIDIA_H100_80GB_HBM3.csv", 50)
    vd = root / "vidur"
    vd.mkdir()
    for f in (MEASURED / "vidur").glob("*.csv"):
        head(f, vd / f.name.replace("llama-2-7b", "tiny-llama"), 120)
    return root
