"""`cascade validate`, `cascade predict` and `cascade calibrate` run as commands on measured data
(the loaders, fitting pieces and calibration provenance: tests/unit/test_validate.py)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cascade.calibration import load_calibration
from cascade.engine import convmath
from cascade.gpus import default_registry
from cascade.kerneltable import CSV_HEADER
from cascade.traces.inputs import load_kernel_table
from tests.support.measured import MEASURED, small_data

__all__ = ["small_data"]


def test_cli_validate_json(small_data: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "programs.cli", "validate", "--data", str(small_data), "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    rows = doc["results"]
    models = {r["model"] for r in rows}
    assert models == {"roofline", "scaled", "analytical"}
    first = rows[0]
    assert {"count", "mape", "median_ape", "p90_ape", "source", "target", "family"} <= set(first)
    assert any(r["dataset"] == "tiny-llama" and r["family"] == "linear" for r in rows)
    assert all(r["count"] > 0 for r in rows)


def test_cli_validate_table(small_data: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "programs.cli", "validate", "--data", str(small_data / "vidur"),
                          "--models", "roofline,scaled"], capture_output=True, text=True, check=True)
    assert "MAPE" in out.stdout and "SM80_A100 -> SM90_H100" in out.stdout


def test_cli_predict_csv(tmp_path: Path) -> None:
    trace = tmp_path / "k.csv"
    trace.write_text(",".join(CSV_HEADER) + "\n"
                     "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn,,,,,,,,,,1200000,linear,fp16,,,1,4096,8192,4096\n"
                     "rmsnorm_kernel,,,,,,,,,,40000,rmsnorm,fp16,,50000000,,,,\n"
                     "mystery,,,,,,,,,,,,,,,,,,\n")
    table, source = load_kernel_table(trace)
    assert len(table) == 3 and source is None
    out = tmp_path / "pred.csv"
    subprocess.run([sys.executable, "-m", "programs.cli", "predict", "--trace", str(trace), "--source", "A100",
                    "--target", "H100,NVIDIA H200", "--out", str(out)], check=True, capture_output=True)
    lines = out.read_text().splitlines()
    assert lines[0].split(",")[-4:] == ["target", "predicted_ns", "regime", "model"]
    assert lines[0].startswith("name,")
    assert len(lines) == 1 + 3 * 2
    first = lines[1].split(",")
    assert first[-4] == "SM90_H100" and first[-1] == "scaled" and first[-2] == "compute"
    assert 300_000 < float(first[-3]) < 700_000
    assert lines[3].split(",")[-1] == "roofline"


def test_cli_predict_unknown_target_lists_known(tmp_path: Path) -> None:
    trace = tmp_path / "k.csv"
    trace.write_text("name,duration_ns\nk,1000\n")
    out = subprocess.run([sys.executable, "-m", "programs.cli", "predict", "--trace", str(trace), "--target", "Voodoo2"],
                         check=False, capture_output=True, text=True)
    assert out.returncode != 0 and "SM90_H100" in out.stderr


def _write_vidur(path: Path, spec_id: str, shape: dict[str, int], seed: int) -> None:
    """A synthetic Vidur-style profile: times from a simple physical model of the spec."""
    from cascade.fitting.measured import VIDUR_OPS

    spec = default_registry().get(spec_id)
    rng = np.random.default_rng(seed)
    cols = ["num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd", "n_expanded_embd",
            "vocab_size", "use_gated_mlp"] + [f"time_stats.{op}.median" for op in VIDUR_OPS]
    lines = [",".join(cols)]
    e, h, kv, f = shape["n_embd"], shape["n_head"], shape["n_kv_head"], shape["n_expanded_embd"]
    for tp in (1, 2, 4, 8):
        for tokens in (1, 16, 128, 512, 2048, 4096):
            hd = e // h
            gemms = {"attn_pre_proj": (h + 2 * kv) * hd // tp * e, "attn_post_proj": e * h * hd // tp,
                     "mlp_up_proj": 2 * f // tp * e, "mlp_down_proj": e * f // tp}
            times = []
            for op in VIDUR_OPS:
                if op in gemms:
                    w = gemms[op]
                    t = max(2.0 * tokens * w / (spec.tensor_flops("fp16") * 0.7),
                            2.0 * (w + tokens * e) / (spec.bandwidth_bps * 0.7))
                else:
                    t = 6.0 * tokens * e / (spec.bandwidth_bps * 0.6)
                times.append((t * 1e3 + 0.004) * rng.uniform(0.97, 1.03))
            lines.append(",".join(str(v) for v in (tokens, tp, h, kv, e, f, 128256, True, *times)))
    path.write_text("\n".join(lines) + "\n")


def test_validate_other_model_and_gpu_names(tmp_path: Path) -> None:
    """Another Vidur model (other shapes and TP degrees) and NeuSight files under other GPU
    names (H100, V100 SXM2, L4 without calibration data of their own) validate end to end."""
    shape = {"n_head": 32, "n_kv_head": 8, "n_embd": 4096, "n_expanded_embd": 14336}
    vd = tmp_path / "vidur"
    vd.mkdir()
    _write_vidur(vd / "llama-3-8b__mlp__a100.csv", "SM80_A100", shape, 1)
    _write_vidur(vd / "llama-3-8b__mlp__h100.csv", "SM90_H100", shape, 2)
    ns = tmp_path / "neusight"
    ns.mkdir()
    src = (MEASURED / "neusight-train" / "linear__NVIDIA_A100-PCIE-40GB.csv").read_text().splitlines()
    header, rows = src[0], src[1:301]
    lat = header.split(",").index("Latency")
    for label, scale in (("NVIDIA_H100_80GB_HBM3", 0.45), ("Tesla_V100-SXM2-16GB", 1.15), ("NVIDIA_L4", 1.6)):
        out = [header]
        for r in rows:
            cells = r.split(",")
            cells[lat] = str(float(cells[lat]) * scale)
            out.append(",".join(cells))
        (ns / f"linear__{label}.csv").write_text("\n".join(out) + "\n")
    res = subprocess.run([sys.executable, "-m", "programs.cli", "validate", "--data", str(tmp_path), "--json",
                          "--models", "roofline,scaled"], capture_output=True, text=True, check=True)
    rows_out = json.loads(res.stdout)["results"]
    pairs_seen = {(r["dataset"], r["source"], r["target"]) for r in rows_out}
    assert ("llama-3-8b", "SM80_A100", "SM90_H100") in pairs_seen
    assert ("linear", "SM90_H100", "SM70_V100_SXM2") in pairs_seen
    assert ("linear", "SM89_L4", "SM90_H100") in pairs_seen
    v = {(r["source"], r["family"], r["model"]): r for r in rows_out if r["dataset"] == "llama-3-8b"}
    # 4 TP degrees x 6 token counts x 4 GEMMs on the other model's shapes
    assert v[("SM80_A100", "linear", "scaled")]["count"] == 96
    for r in rows_out:
        assert r["count"] > 0 and np.isfinite(r["mape"]) and r["mape"] >= 0
    # the synthetic times follow physics closely: scaled stays near them where roofline does
    assert v[("SM80_A100", "all", "scaled")]["mape"] < 25.0


def test_cli_calibrate_fits_and_records_provenance_contexts_and_menus(small_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    # beside the operator data, KernelBench's convolutions, pooling and GEMMs: the refit fits the
    # transfer and window work on them and records the end-to-end figures (a refit that dropped
    # them would leave whole traces quoting another fit's figures)
    data = tmp_path / "data"
    shutil.copytree(small_data, data)
    (data / "kernelbench").mkdir()
    lines = (MEASURED / "kernelbench" / "kernelbench_level1.csv").read_text().splitlines()
    rows = [line for line in lines[1:] if line.split(",")[1] in ("conv", "pool", "gemm")][::2]
    (data / "kernelbench" / "kernelbench_level1.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    # and the convolution campaign, two of its GPUs' first rows: the algorithm model is fitted on it
    (data / "neusight-conv").mkdir()
    for name in ("Tesla_T4.csv.gz", "Tesla_V100-PCIE-32GB.csv.gz"):
        with gzip.open(MEASURED / "neusight-conv" / name, "rt") as fh:
            head = [next(fh) for _ in range(301)]
        (data / "neusight-conv" / name.removesuffix(".gz")).write_text("".join(head))
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "calibrate", "--data", str(data), "--out", str(out),
                           "--evals", "10", "--no-leave-one-gpu-out", "--shift", "extremes"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    cal = load_calibration(out)
    assert cal.command.endswith("--evals 10 --no-leave-one-gpu-out --shift extremes") and cal.data_files
    # one shifted-shape protocol (each is a whole refit; `validate --shift` covers the others)
    shifted = cal.metrics["shifted_shapes"]
    assert shifted and {r["shift"] for r in shifted} == {"extremes"}  # type: ignore[union-attr]
    assert set(cal.contexts) == {"kernel", "neusight"}
    assert "SM75_T4" in cal.contexts["neusight"] and "SM80_A100" in cal.contexts["kernel"]
    assert all(0 <= v <= 1 for t in cal.transfer.values() for v in (t.gemm, t.gemm_memory, t.other))
    assert cal.tile_menus["volta"]["simt"]  # from the V100's cuBLAS kernel names
    grid = cal.residuals["neusight-bmm"]["SM75_T4"]  # shape-residual grid from the fit rows
    assert grid.keys and len(grid.keys) == len(grid.values) == len(grid.rows) and min(grid.rows) >= grid.min_rows
    assert all(r["count"] > 0 for r in cal.metrics["heldout_shapes"])  # type: ignore[union-attr]
    assert "leave_one_gpu_out" not in cal.metrics
    assert set(cal.transfer) == {"kernel", "neusight", "kernelbench"} and cal.transfer["kernelbench"].conv is not None
    assert cal.window_simt and set(cal.window_simt) <= set(convmath.WINDOW_KINDS)
    assert cal.conv_algos is not None and sorted(cal.conv_algos.gpus) == ["SM70_V100_PCIE_32GB", "SM75_T4"]
    assert {"neusight-conv/Tesla_T4.csv", "neusight-conv/Tesla_V100-PCIE-32GB.csv"} <= set(cal.data_files)
    e2e_rows = cal.metrics["end_to_end"]
    assert {r["dataset"] for r in e2e_rows} == {"kernelbench"}  # type: ignore[index, union-attr]
    assert not any("without it" in r["variant"] for r in e2e_rows)  # type: ignore[index, union-attr]
    # nothing to fit on: a clear error, exit 1, no file
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "programs.cli", "calibrate", "--data", str(empty),
                           "--out", str(tmp_path / "none.json")], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "no Vidur or NeuSight files" in proc.stderr
    assert not (tmp_path / "none.json").exists()


def test_cli_predict_applies_the_targets_residual_grid_unless_told_not_to(tmp_path: Path) -> None:
    from cascade.engine.extrapolation import residual_cells
    from cascade.engine.workload import workload_of

    trace = tmp_path / "k.csv"
    trace.write_text("name,op,dtype,m,n,k,duration_ns\n"
                     "sm90_xmma_gemm_f16f16_f16f32,linear,fp16,4096,11008,4096,900000\n")
    grid = load_calibration().residual_table("kernel", default_registry().get("SM80_A100"))
    assert grid is not None  # fitted on Vidur's A100 FP16 GEMMs
    correction = float(np.exp(grid.lookup(residual_cells(workload_of(load_kernel_table(trace)[0]), grid.width))[0]))
    assert correction != 1.0  # the packaged grid covers this shape

    def run(*extra: str) -> float:
        proc = subprocess.run([sys.executable, "-m", "programs.cli", "predict", "--trace", str(trace), "--source", "H100",
                               "--target", "A100", "--model", "scaled", *extra],
                              capture_output=True, text=True, check=True)
        return float(proc.stdout.splitlines()[1].split(",")[-3])

    assert run() == pytest.approx(run("--no-residuals") * correction, rel=1e-3)


def test_cli_e2e_prints_both_data_sets_and_fit_transfer_needs_kernelbench(tmp_path: Path) -> None:
    """``cascade validate --e2e --json``: whole models and single operators per variant, the
    left-out variant among the kernelbench rows (recorded in the packaged calibration); without
    KernelBench beside it, ``--fit-transfer`` is one error line naming the file, exit 1."""
    out = subprocess.run([sys.executable, "-m", "programs.cli", "validate", "--data", str(MEASURED), "--e2e",
                          "--json"], capture_output=True, text=True, timeout=120, check=True)
    doc = json.loads(out.stdout)
    groups = {(s["dataset"], s["variant"], s["model"], s["group"]) for s in doc["summary"]}
    assert ("neusight-e2e", "target uncalibrated", "scaled", "all") in groups
    assert ("kernelbench", "target uncalibrated", "roofline", "conv") in groups
    # from the work alone too: whole models (training only the V100 measured) and operators
    assert ("neusight-e2e", "target uncalibrated", "analytical", "training") in groups
    assert ("kernelbench", "calibrated", "analytical", "all") in groups
    assert not any(s["model"] == "analytical" for s in doc["anchored"])  # no source to anchor to
    metrics = load_calibration().metrics["end_to_end"]
    assert any(r["variant"] == "target uncalibrated, transfer fitted without it" for r in metrics)
    (tmp_path / "neusight-e2e").symlink_to(MEASURED / "neusight-e2e")
    # whole models alone (what a refit of such a directory records): no operator cells, no fit,
    # the calibration's KernelBench exponents and window work kept as they are
    from cascade.fitting import e2e

    cal = load_calibration()
    run = e2e.end_to_end(tmp_path, cal, default_registry())
    assert run.fitted is None and not run.operators and run.whole
    kept = run.record(cal)
    assert kept.transfer == cal.transfer and kept.window_simt == cal.window_simt
    assert {r["dataset"] for r in kept.metrics["end_to_end"]} == {"neusight-e2e"}  # type: ignore[index, union-attr]
    bad = subprocess.run([sys.executable, "-m", "programs.cli", "validate", "--data", str(tmp_path), "--e2e",
                          "--fit-transfer"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "kernelbench_level1.csv" in bad.stderr and "Traceback" not in bad.stderr
