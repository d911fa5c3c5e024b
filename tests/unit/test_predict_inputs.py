"""`cascade predict` accepts bundles, Accel-Sim trace folders, kernel files and timelines."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest

from cascade.errors import TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.traces.bundle import BundleBuilder, write_bundle
from cascade.traces.inputs import load_kernel_table
from programs.cli import main
from tests.support.paths import SHARED_DATA

REAL_TRACE = SHARED_DATA / "traces" / "matrixmul-32x32-sm61"


def _predict(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, str]]:
    assert main(["predict", *args]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_trace_folder_is_parsed_and_predicted(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _predict(capsys, "--trace", str(REAL_TRACE), "--source", "SM61_P4",
                    "--target", "SM90_H100,SM70_V100_PCIE_32GB", "--model", "analytical")
    assert [r["target"] for r in rows] == ["SM90_H100", "SM70_V100_PCIE_32GB"]
    assert all(r["warp_insts"] == "4416" for r in rows)
    # an instruction trace: every kernel predicted from its features, and labelled so
    assert all(float(r["predicted_ns"]) > 0 and r["model"] == "analytical:features" for r in rows)


def test_single_kernel_file(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _predict(capsys, "--trace", str(REAL_TRACE / "kernel-1.traceg"), "--source", "SM61_P4",
                    "--target", "SM80_A100", "--model", "analytical")
    assert len(rows) == 1 and float(rows[0]["predicted_ns"]) > 0


def test_bundle_folder_carries_its_source_gpu(tmp_path: Path) -> None:
    table = KernelTable.from_rows([
        {"name": "gemm", "kernel_id": 1, "op": "linear", "dtype": "fp16", "m": 512, "n": 4096,
         "k": 4096, "flops": 2 * 512 * 4096 * 4096, "bytes": 2 * (512 * 4096 * 2 + 4096 * 4096),
         "duration_ns": 120_000.0, "stream": 7, "host_launch_ns": 0.0, "start_ns": 0.0},
    ])
    builder = BundleBuilder(trace_id="t1", source_gpu="SM80_A100", kind="timeline")
    builder.add_timeline(table, "timeline.csv")
    _, manifest, npz = builder.finalize()
    folder = write_bundle(tmp_path / "bundle", manifest, npz)
    loaded, source = load_kernel_table(folder)
    assert len(loaded) == 1 and source is not None and source.id == "SM80_A100"


def test_unknown_input_names_what_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(TraceFormatError, match="kernel-table CSV") as exc:
        load_kernel_table(tmp_path / "notes.txt")
    for kind in ("Chrome trace", "Nsight Systems SQLite", "Accel-Sim kernel trace", "bundle folder"):
        assert kind in exc.value.expected
    (tmp_path / "run.accelsim_log.txt").write_text("gpgpu_simulation_time = 0 days\n")
    with pytest.raises(TraceFormatError, match="an Accel-Sim log"):
        load_kernel_table(tmp_path / "run.accelsim_log.txt")
    with pytest.raises(TraceFormatError, match="existing"):
        load_kernel_table(tmp_path / "absent.csv")


def test_gzipped_kernel_table_csv_loads(tmp_path: Path) -> None:
    import gzip

    text = "name,op,dtype,m,n,k,duration_ns\ngemm,linear,fp16,512,4096,4096,120000\n"
    with gzip.open(tmp_path / "kernels.csv.gz", "wt") as fh:
        fh.write(text)
    loaded, source = load_kernel_table(tmp_path / "kernels.csv.gz")
    assert len(loaded) == 1 and source is None and loaded["k"][0] == 4096


def test_tool_folder_predicts_with_a_bad_kernel_and_extra_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from cascade.traces.inputs import load_trace

    folder = tmp_path / "tool"
    shutil.copytree(REAL_TRACE, folder)
    (folder / "kernel-2.traceg").write_text("-kernel name = broken\nnot a trace line at all\n")
    listing = folder / "kernelslist.g"
    listing.chmod(0o644)
    listing.write_text(listing.read_text().rstrip("\n") + "\nkernel-2.traceg\n")
    for name in ("nvprof.json", "accelsim_log.csv", "run.log", "notes.txt"):
        (folder / name).write_text("{}\n")
    loaded = load_trace(folder)
    assert len(loaded.table) >= 1
    notes = "\n".join(loaded.warnings)
    assert "kernel-2.traceg" in notes and "failed" in notes
    for name in ("nvprof.json", "accelsim_log.csv", "run.log", "notes.txt"):
        assert f"{name}: skipped" in notes
    assert main(["predict", "--trace", str(folder), "--source", "SM61_P4", "--target",
                 "SM80_A100", "--model", "analytical"]) == 0
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "kernel-2.traceg" in captured.err


def test_a_trace_naming_no_gpu_warns_that_its_measured_times_go_unused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kernels.csv"
    path.write_text("name,op,dtype,m,n,k,duration_ns\ngemm,linear,fp16,512,4096,4096,120000\n")
    assert main(["predict", "--trace", str(path), "--target", "SM80_A100"]) == 0  # auto, no --source
    assert "names no GPU and no --source was given" in capsys.readouterr().err
    assert main(["predict", "--trace", str(path), "--target", "SM80_A100", "--source", "SM90_H100"]) == 0
    assert "names no GPU" not in capsys.readouterr().err


def test_a_json_that_is_no_trace_is_an_error_not_an_empty_prediction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"schema_version": 1, "configs": []}')
    assert main(["predict", "--trace", str(path), "--target", "SM80_A100", "--out",
                 str(tmp_path / "p.csv")]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "'traceEvents' array" in err
    assert not (tmp_path / "p.csv").exists()



def test_a_tables_manifest_names_its_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled sample's replica (``synthetic/``: ``timeline.csv.gz`` and a ``manifest.json``
    naming it and its GPU) predicts from its GPU without ``--source``, as the table file or as its
    folder; a manifest that names another file, or is not one, says nothing about a table."""
    from cascade.traces.inputs import load_trace, stream_trace
    from tests.support.paths import REPO

    folder = tmp_path / "synthetic"
    shutil.copytree(REPO / "samples" / "opt125m-h100-e2e" / "synthetic", folder)
    table = folder / "timeline.csv.gz"
    assert load_trace(table).device == "SM90_H100" and load_trace(folder).device == "SM90_H100"
    assert stream_trace(table).device == "SM90_H100" and stream_trace(folder).device == "SM90_H100"
    assert len(load_trace(folder).table) == len(load_trace(table).table) > 0
    for trace in (table, folder):
        assert main(["predict", "--trace", str(trace), "--target", "SM80_A100", "--out",
                     str(tmp_path / "out.csv")]) == 0
        err = capsys.readouterr().err
        assert "SM80_A100 from SM90_H100" in err and "names no GPU" not in err
    # the manifest's GPU is the trace's: another one needs --force-source, as for any trace
    assert main(["predict", "--trace", str(table), "--source", "SM80_A100", "--target", "SM90_H100"]) != 0
    assert "recorded on SM90_H100" in capsys.readouterr().err
    other = tmp_path / "other.csv"
    shutil.copy(table, tmp_path / "copy.csv.gz")
    other.write_text("name,op,dtype,m,n,k,duration_ns\ngemm,linear,fp16,512,4096,4096,120000\n")
    (tmp_path / "manifest.json").write_text('{"timeline": "copy.csv.gz", "source_gpu": "SM75_T4"}')
    assert load_trace(other).device == "" and load_trace(tmp_path / "copy.csv.gz").device == "SM75_T4"
    for text in ("not json", '{"timeline": 3}', '{"source_gpu": "SM75_T4"}', "[1, 2]"):
        (tmp_path / "manifest.json").write_text(text)
        assert load_trace(tmp_path / "copy.csv.gz").device == ""
    (folder / "manifest.json").write_text('{"timeline": "missing.csv", "source_gpu": "SM90_H100"}')
    with pytest.raises(TraceFormatError, match="manifest.json names its kernel table"):
        load_trace(folder)
