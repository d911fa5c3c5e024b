"""Kernel tables on disk (cascade.tableio): CSV, gzip CSV and Parquet, streamed, exact errors."""

from __future__ import annotations

import csv
import gzip
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cascade.errors import TraceFormatError
from cascade.kerneltable import KernelTable
from cascade.tableio import iter_tables, read_table, write_table
from programs.cli import main
from tests.support.tableio_readers import reader

__all__ = ["reader"]

HEADER = "name,grid_x,duration_ns,dtype,m,op"


def _table(n: int) -> KernelTable:
    rng = np.random.default_rng(3)
    names = np.array(["void at::native::vectorized_elementwise_kernel<4, silu>",
                      "ampere_sgemm_128x64_tn", 'odd "quoted" name'], dtype=object)
    m = rng.integers(1, 4096, n)
    m[::7] = -1
    dur = rng.uniform(1e3, 1e6, n)
    dur[::5] = math.nan
    return KernelTable({"name": names[np.arange(n) % 3], "grid_x": rng.integers(1, 999, n),
                        "duration_ns": dur, "dtype": np.where(m > 2000, "fp16", "").astype(object),
                        "m": m, "op": np.array(["linear"] * n, dtype=object)})


def _same(a: KernelTable, b: KernelTable) -> None:
    assert a.columns == b.columns and len(a) == len(b)
    for c in a.columns:
        if a[c].dtype.kind == "f":
            np.testing.assert_array_equal(a[c], b[c])  # NaN == NaN here
        else:
            assert a[c].tolist() == b[c].tolist(), c


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_round_trip_keeps_values_unknowns_and_row_order(tmp_path: Path, suffix: str) -> None:
    t = _table(2000)
    path = tmp_path / f"t{suffix}"
    write_table(t, path)
    back = read_table(path)
    _same(t, back)
    assert back["m"].dtype == np.int64 and back["name"].dtype == object


def test_streamed_batches_concatenate_to_the_whole_table(tmp_path: Path) -> None:
    t = _table(5000)
    for suffix in (".csv", ".parquet"):
        path = tmp_path / f"t{suffix}"
        write_table(t, path)
        parts = list(iter_tables(path, batch_rows=1000))
        assert len(parts) >= 2 and sum(len(p) for p in parts) == 5000
        _same(t, KernelTable.concat(parts))


def test_csv_written_is_plain_csv_quoted_only_where_needed(tmp_path: Path) -> None:
    t = KernelTable({"name": np.array(["k1", "k2"], dtype=object), "m": np.array([64, -1]),
                     "duration_ns": np.array([1.5, math.nan])})
    path = tmp_path / "plain.csv"
    write_table(t, path)
    assert path.read_text() == "name,m,duration_ns\nk1,64,1.5\nk2,,\n"
    write_table(_table(3), tmp_path / "q.csv")
    rows = list(csv.reader((tmp_path / "q.csv").open()))
    assert rows[1][0] == "void at::native::vectorized_elementwise_kernel<4, silu>"
    assert rows[3][0] == 'odd "quoted" name'


def test_tolerant_input_is_read_like_the_careful_reader(tmp_path: Path) -> None:
    # blanks around numbers, an all-empty row, a blank line, an integer column given as float
    path = tmp_path / "messy.csv"
    path.write_text(f"{HEADER}\nk1, 12 ,100.5,FP16,3.0,linear\n,,,,,\n\nk2,,7,,,\n")
    t = read_table(path)
    assert t["name"].tolist() == ["k1", "k2"] and t["grid_x"].tolist() == [12, -1]
    assert t["dtype"].tolist() == ["fp16", ""] and t["m"].tolist() == [3, -1]


@pytest.mark.parametrize(("body", "line", "what"), [
    ("k1,1,2,fp16,4,linear\nk2,x,2,fp16,4,linear\n", 3, "an integer in column 'grid_x'"),
    ("k1,1,2,fp16,4,linear\nk2,1,2,fp17,4,linear\n", 3, "dtype one of"),
    ("k1,1,2,fp16,4,linear\nk2,1,2,fp16\n", 3, "6 comma-separated fields"),
    ("k1,1,inf,fp16,inf,linear\n", 2, "an integer in column 'm'"),
])
def test_bad_cells_name_file_line_and_column(tmp_path: Path, body: str, line: int, what: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER}\n{body}")
    with pytest.raises(TraceFormatError, match=what) as err:
        read_table(path)
    assert err.value.file == str(path) and err.value.line == line


def test_a_bad_line_deep_in_a_streamed_file_is_found_after_good_batches(tmp_path: Path) -> None:
    path = tmp_path / "late.csv"
    lines = [HEADER] + [f"k{i},{i},{i}.5,fp32,{i},linear" for i in range(1, 200_001)]
    lines[150_001] = "kbad,1,2,fp32,notanumber,linear"
    path.write_text("\n".join(lines) + "\n")
    seen = 0
    with pytest.raises(TraceFormatError, match="column 'm'") as err:
        for part in iter_tables(path, batch_rows=20_000):
            seen += len(part)
    assert err.value.line == 150_002 and 0 < seen <= 150_000


def test_header_problems_and_other_formats(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(TraceFormatError, match="header"):
        read_table(empty)
    noname = tmp_path / "noname.csv"
    noname.write_text("a,b\n1,2\n")
    with pytest.raises(TraceFormatError, match="'name' column"):
        read_table(noname)
    only = tmp_path / "only.csv"
    only.write_text(f"{HEADER}\n")
    assert len(read_table(only)) == 0
    broken = tmp_path / "broken.csv.gz"
    broken.write_bytes(gzip.compress(f"{HEADER}\nk,1,2,fp16,4,linear\n".encode() * 1000)[:300])
    with pytest.raises(TraceFormatError, match=str(broken.name)):
        read_table(broken)
    with pytest.raises(TraceFormatError, match=r"\*\.parquet"):
        read_table(tmp_path / "x.xlsx")


def test_parquet_with_wrong_column_types_names_the_column(tmp_path: Path) -> None:
    import pyarrow as pa

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"name": ["k"], "m": ["sixty-four"]}), path)
    with pytest.raises(TraceFormatError, match="integer column 'm'"):
        read_table(path)
    pq.write_table(pa.table({"name": ["k"], "m": pa.array([7], pa.int32()),
                             "duration_ns": pa.array([None], pa.float32())}), path)
    t = read_table(path)
    assert t["m"].tolist() == [7] and math.isnan(t["duration_ns"][0])


def test_predict_streams_batches_and_keeps_target_major_row_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = _table(3000)
    src = tmp_path / "k.parquet"
    write_table(t, src)
    args = ["predict", "--trace", str(src), "--source", "SM80_A100",
            "--target", "SM90_H100,SM80_A100", "--model", "roofline"]
    assert main([*args, "--out", str(tmp_path / "whole.csv")]) == 0
    assert main([*args, "--out", str(tmp_path / "parts.parquet"), "--batch-rows", "700"]) == 0
    err = capsys.readouterr().err
    assert err.count("model roofline") == 4  # one provenance line per target and run
    whole = read_table(tmp_path / "whole.csv")
    parts = read_table(tmp_path / "parts.parquet")
    assert len(whole) == len(parts) == 6000
    assert whole["target"].tolist() == ["SM90_H100"] * 3000 + ["SM80_A100"] * 3000
    for c in ("name", "m", "target", "regime", "model"):
        assert whole[c].tolist() == parts[c].tolist(), c
    assert parts["predicted_ns"].dtype == np.float64  # Parquet keeps the type; CSV is text
    np.testing.assert_allclose(whole["predicted_ns"].astype(float), parts["predicted_ns"])
    np.testing.assert_array_equal(whole["duration_ns"], np.concatenate([t["duration_ns"]] * 2))


def test_predict_leaves_no_partial_output_when_a_late_row_is_bad(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "late.csv"
    lines = [HEADER] + [f"k{i},{i},{i}.5,fp32,{i},linear" for i in range(1, 3001)]
    lines[2500] = "kbad,1,2,fp32,x,linear"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.csv"
    rc = main(["predict", "--trace", str(path), "--target", "SM90_H100", "--model", "roofline",
               "--batch-rows", "500", "--out", str(out)])
    assert rc == 1 and not out.exists()
    assert f"{path}:2501" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_predict_on_an_empty_table_writes_the_header(tmp_path: Path, suffix: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / f"empty{suffix}"
    if suffix == ".csv":
        src.write_text(HEADER + "\n")
    else:
        write_table(KernelTable({"name": np.array([], dtype=object),
                                 "m": np.array([], dtype=np.int64)}), src)
    out = tmp_path / "out.csv"
    assert main(["predict", "--trace", str(src), "--target", "SM90_H100", "--model", "roofline",
                 "--out", str(out)]) == 0
    header = out.read_text().splitlines()
    assert len(header) == 1 and header[0].endswith("target,predicted_ns,regime,model")
    assert "SM90_H100" in capsys.readouterr().err  # the provenance line still says what ran
