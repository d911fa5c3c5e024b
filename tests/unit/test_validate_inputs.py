"""`cascade validate` on data it did not ship with: more GPUs, and files for unknown GPUs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cascade.gpus import get_gpu
from programs.cli import main
from tests.support.paths import SHARED_DATA

MEASURED = SHARED_DATA / "measured"


@pytest.mark.parametrize(("name", "spec_id"), [
    ("a40", "SM86_A40"), ("NVIDIA A40", "SM86_A40"), ("NVIDIA A10", "SM86_A10"),
])
def test_vidur_and_driver_names_of_ampere_gddr_cards(name: str, spec_id: str) -> None:
    spec = get_gpu(name)
    assert spec.id == spec_id and spec.arch == "ampere" and spec.sm_version == 86


def test_file_for_an_unknown_gpu_is_skipped_with_the_known_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for gpu in ("a100", "h100"):
        shutil.copy(MEASURED / "vidur" / f"llama-2-7b__mlp__{gpu}.csv", tmp_path)
    shutil.copy(MEASURED / "vidur" / "llama-2-7b__mlp__a100.csv", tmp_path / "llama-2-7b__mlp__mi300x.csv")
    assert main(["validate", "--data", str(tmp_path), "--models", "roofline"]) == 0
    out = capsys.readouterr()
    assert "skipped llama-2-7b__mlp__mi300x.csv" in out.err and "SM90_H100" in out.err
    assert "SM80_A100 -> SM90_H100" in out.out
