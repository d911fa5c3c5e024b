"""`cascade calibrate --llm` and `cascade validate --llm` over folders laid out like
``measured/llm-kernels/``: driver device names, other GPUs, clear errors, JSON as documented."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cascade.errors import TraceFormatError, UnknownGPUError
from cascade.fitting import llm as fit_llm
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable
from cascade.llm import work
from tests.support.paths import SHARED_DATA

LLM_DATA = SHARED_DATA / "measured" / "llm-kernels"
#: GPU -> (driver name, how far below its peaks its kernels run: a known answer)
GPUS = {"SM90_H100": ("NVIDIA H100 80GB HBM3", 0.7), "SM100_B200": ("NVIDIA B200", 0.5),
        "SM90_H200": ("NVIDIA H200", 0.72)}


def _gemm_file(path: Path, gpus: dict[str, tuple[str, float]]) -> None:
    reg = default_registry()
    cols: dict[str, list[object]] = {c: [] for c in ("gpu", "framework", "version", "device", "op_name",
                                                     "kernel_source", "gemm_dtype", "m", "n", "k", "latency_ms")}
    for gid, (device, eff) in gpus.items():
        spec = reg.get(gid)
        for dtype in ("bfloat16", "fp8"):
            for m in (1, 8, 64, 512, 4096):
                for n in (1024, 4096, 14336):
                    for k in (1024, 4096, 8192):
                        t = KernelTable.from_rows([{"op": "gemm", "m": m, "n": n, "k": k,
                                                    "dtype": work.canonical_dtype(dtype)}])
                        ns = (3000.0 + float(work.roofline_ns(t, spec)[0])) / eff
                        for c, v in zip(cols, (gid, "VLLM", "0.24.0", device, "gemm", "cublas", dtype, m, n, k,
                                               ns / 1e6), strict=True):
                            cols[c].append(v)
    pq.write_table(pa.table(cols), path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "programs.cli", *args], capture_output=True, text=True, timeout=300)


def test_calibrate_then_validate_a_folder_of_other_gpus(tmp_path: Path) -> None:
    data = tmp_path / "llm"
    data.mkdir()
    _gemm_file(data / "gemm.parquet", GPUS)
    cal = tmp_path / "llm.npz"
    fitted = _cli("calibrate", "--llm", "--data", str(data), "--out", str(cal))
    assert fitted.returncode == 0, fitted.stderr
    assert "wrote" in fitted.stdout and cal.is_file()
    res = _cli("validate", "--data", str(data), "--llm", "--llm-calibration", str(cal), "--heldout", "0.2", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = doc["llm"]
    assert rows and {"op", "dtype", "source", "target", "n", "mape_pct", "median_pct", "p90_pct",
                     "baseline_mape_pct"} <= set(rows[0])
    pairs = {(r["source"], r["target"]) for r in rows}
    assert ("SM90_H100", "SM100_B200") in pairs and ("SM100_B200", "SM90_H200") in pairs
    cal_rows = [r for r in rows if r["variant"] == "calibrated"]
    # a constant efficiency per GPU is what the surfaces learn: held-out shapes land close
    assert max(r["mape_pct"] for r in cal_rows) < 5.0
    # and the ratio of two rooflines misses the efficiencies it never saw
    b200 = [r for r in cal_rows if r["source"] == "SM90_H100" and r["target"] == "SM100_B200"]
    assert all(r["mape_pct"] < r["baseline_mape_pct"] for r in b200)
    table = _cli("validate", "--data", str(data), "--llm", "--llm-calibration", str(cal), "--heldout", "0.2")
    assert table.returncode == 0 and "ratio roofline" in table.stdout


def test_a_folder_with_an_unknown_gpu_or_a_missing_column_is_refused_by_name(tmp_path: Path) -> None:
    reg = default_registry()
    bad = tmp_path / "unknown"
    bad.mkdir()
    _gemm_file(bad / "gemm.parquet", {"SM90_H100": ("NVIDIA H100 80GB HBM3", 0.7)})
    t = pq.read_table(bad / "gemm.parquet").to_pydict()
    t["device"] = ["NVIDIA H1000 Ultra"] * len(t["device"])
    t["gpu"] = ["H1000"] * len(t["gpu"])
    pq.write_table(pa.table(t), bad / "gemm.parquet")
    with pytest.raises(UnknownGPUError, match="H1000"):
        fit_llm.read_folder(bad, reg)
    del t["m"]
    t["device"] = ["NVIDIA H100 80GB HBM3"] * len(t["device"])
    pq.write_table(pa.table(t), bad / "gemm.parquet")
    with pytest.raises(TraceFormatError, match="gemm.parquet.*m"):
        fit_llm.read_folder(bad, reg)
    res = _cli("validate", "--data", str(tmp_path), "--llm")
    assert res.returncode != 0 and "llm-kernels" in res.stderr


@pytest.mark.skipif(not LLM_DATA.is_dir(), reason="../shared/data is not beside this checkout")
def test_the_packaged_calibration_scores_the_shipped_data_held_out() -> None:
    """The shipped LLM calibration on llm-kernels' held-out shapes, H100 into the B200 and H200:
    GEMMs, attention and MoE below the ratio roofline, every cell within 20%."""
    res = _cli("validate", "--data", str(LLM_DATA), "--llm", "--heldout", "0.2", "--llm-sources", "SM90_H100",
               "--json")
    assert res.returncode == 0, res.stderr
    rows = [r for r in json.loads(res.stdout)["llm"] if r["variant"] == "calibrated"
            and r["target"] in ("SM100_B200", "SM90_H200")]
    kernels = [r for r in rows if r["op"] in ("gemm", "attention_prefill", "attention_decode", "moe")]
    assert kernels
    assert all(r["mape_pct"] <= 20 for r in kernels), [r for r in kernels if r["mape_pct"] > 20]
    assert all(r["mape_pct"] < r["baseline_mape_pct"] for r in kernels)
    n = sum(r["n"] for r in kernels)
    assert sum(r["mape_pct"] * r["n"] for r in kernels) / n <= 10
    assert np.isfinite([r["p90_pct"] for r in rows]).all()
