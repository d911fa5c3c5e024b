"""`cascade validate` on data it did not ship with: more GPUs, and files for unknown GPUs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
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


def test_vidur_times_are_the_sample_mean_else_the_median(tmp_path: Path) -> None:
    """Vidur's medians are whole or half timer ticks (1 us); the mean of the same samples is
    read where the file has it, and a file with medians alone still loads."""
    import csv

    from cascade.fitting.measured import load_vidur
    from cascade.gpus.registry import default_registry

    src = MEASURED / "vidur" / "llama-2-7b__mlp__h100.csv"
    with src.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = [r for _, r in zip(range(40), reader, strict=False)]
    reg = default_registry()
    full = tmp_path / "full"
    full.mkdir()
    with (full / src.name).open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    medians_only = tmp_path / "medians"
    medians_only.mkdir()
    kept = [f for f in fields if not f.endswith(".mean")]
    with (medians_only / src.name).open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=kept, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    by_mean = load_vidur(full / src.name, reg)
    by_median = load_vidur(medians_only / src.name, reg)
    assert len(by_mean.table) == len(by_median.table) > 0
    assert list(by_mean.keys) == list(by_median.keys)
    mean_ms = [float(r[f"time_stats.{op}.mean"]) for r in rows for op in _ops_of(r)]
    median_ms = [float(r[f"time_stats.{op}.median"]) for r in rows for op in _ops_of(r)]
    assert mean_ms != median_ms  # the two columns differ in this file
    got_mean = float(np.sum(by_mean.table["duration_ns"]))
    got_median = float(np.sum(by_median.table["duration_ns"]))
    assert got_mean == pytest.approx(sum(mean_ms) * 1e6, rel=1e-9)
    assert got_median == pytest.approx(sum(median_ms) * 1e6, rel=1e-9)
    # the RMSNorm rows carry vLLM's launch shape (one block of min(hidden, 1024) threads per token)
    t = by_mean.table
    norm = np.isin(t["name"].astype(str), ["input_layernorm", "post_attention_layernorm"])
    tokens = np.asarray([int(str(k).split(",")[5]) for k in by_mean.keys])
    assert norm.any() and (t["grid_x"][norm] == tokens[norm]).all() and (t["block_x"][norm] == 1024).all()
    assert (t["grid_x"][~norm] <= 0).all()  # other operators' launches are not known


def _ops_of(row: dict[str, str]) -> list[str]:
    from cascade.fitting.measured import VIDUR_OPS

    return [op for op in VIDUR_OPS if row.get(f"time_stats.{op}.mean") not in (None, "")
            and float(row[f"time_stats.{op}.median"]) > 0]
