"""Timeline importers (Chrome trace, Nsight SQLite, CSV/JSONL) and bundles."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from cascade.errors import TraceFormatError, ValidationError
from cascade.tableio import write_table
from cascade.traces.bundle import BundleBuilder, load_bundle, write_bundle
from cascade.traces.cascadetimeline import import_cascade_jsonl
from cascade.traces.chrome import import_chrome_trace
from cascade.traces.folder import parse_trace_folder
from cascade.traces.generate import TraceSpec, write_trace_folder
from cascade.traces.nsys import import_nsys_sqlite
from cascade.traces.timeline import import_timeline
from cascade.traces.timelinecore import parse_step_name
from tests.support.paths import SHARED_DATA

REAL = SHARED_DATA / "traces" / \
    "matrixmul-32x32-sm61"


def _chrome() -> dict:
    ev = []

    def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: object) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                   "dur": dur, "args": args})

    x("user_annotation", "step:prefill:tokens=6:context=6", 1000.0, 100.0)
    x("cpu_op", "aten::linear", 1010.0, 30.0, **{"Input Dims": [[1, 6, 768], [3072, 768], [3072]],
                                                 "Input type": ["c10::Half", "c10::Half"],
                                                 "flops": 2 * 6 * 768 * 3072})
    x("cuda_runtime", "cudaLaunchKernel", 1020.0, 5.0, correlation=7)
    x("kernel", "ampere_fp16_gemm", 1030.0, 12.5, tid=7, grid=[24, 1, 1], block=[128, 1, 1],
      correlation=7, stream=7, **{"registers per thread": 232, "shared memory": 49152})
    x("user_annotation", "step:decode:tokens=1:context=7", 1200.0, 50.0)
    x("cuda_runtime", "cudaLaunchKernel", 1210.0, 4.0, correlation=9)
    x("kernel", "softmax_kernel", 1220.0, 3.0, tid=7, grid=[1, 1, 1], block=[256, 1, 1],
      correlation=9, stream=7, **{"registers per thread": 32, "shared memory": 0})
    x("cuda_runtime", "cudaDeviceSynchronize", 1230.0, 5.0)
    return {"traceEvents": ev}


def test_chrome_trace_import(tmp_path: Path) -> None:
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(_chrome()))
    t = import_timeline(p)
    assert len(t) == 2
    assert t["name"].tolist() == ["ampere_fp16_gemm", "softmax_kernel"]
    assert t["kernel_id"].tolist() == [1, 2]
    assert t["host_launch_ns"].tolist() == [20_000.0, 210_000.0]  # ns since the first event
    assert t["start_ns"][0] == 30_000.0 and t["duration_ns"][0] == 12_500.0
    assert (t["grid_x"][0], t["block_x"][0], t["regs"][0], t["smem_bytes"][0]) == (24, 128, 232,
                                                                                   49152)
    assert t["op"].tolist() == ["linear", ""]
    assert t["dtype"][0] == "fp16" and t["flops"][0] == 2 * 6 * 768 * 3072
    assert (t["m"][0], t["n"][0], t["k"][0]) == (6, 3072, 768)
    assert t["step"].tolist() == [0, 1]
    assert t["step_kind"].tolist() == ["prefill", "decode"]
    assert t["step_tokens"].tolist() == [6, 1] and t["step_context"].tolist() == [6, 7]
    assert t["sync_after"].tolist() == [0, 1]


def test_step_names() -> None:
    assert parse_step_name("step:prefill:tokens=6") == ("prefill", 6, -1)
    assert parse_step_name("ProfilerStep#12") == ("", -1, -1)
    assert parse_step_name("aten::mm") is None


def _nsys_db(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript("""
    CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL,
      deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL,
      correlationId INT, globalPid INT, demangledName INT NOT NULL, shortName INT NOT NULL,
      mangledName INT, launchType INT, cacheConfig INT, registersPerThread INT NOT NULL,
      gridX INT NOT NULL, gridY INT NOT NULL, gridZ INT NOT NULL, blockX INT NOT NULL,
      blockY INT NOT NULL, blockZ INT NOT NULL, staticSharedMemory INT NOT NULL,
      dynamicSharedMemory INT NOT NULL, localMemoryPerThread INT NOT NULL,
      localMemoryTotal INT NOT NULL, gridId INT NOT NULL, sharedMemoryExecuted INT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT NOT NULL, end INT NOT NULL,
      eventClass INT NOT NULL, globalTid INT, correlationId INT, nameId INT NOT NULL,
      returnValue INT NOT NULL, callchainId INT);
    CREATE TABLE NVTX_EVENTS (start INT NOT NULL, end INT, eventType INT NOT NULL, rangeId INT,
      category INT, color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT,
      domainId INT, uint64Value INT, int64Value INT, doubleValue REAL, uint32Value INT,
      int32Value INT, floatValue REAL, jsonTextId INT, jsonText TEXT);
    INSERT INTO StringIds VALUES (1, 'void gemm_kernel<float>(float*)'), (2, 'gemm_kernel'),
      (3, 'cudaLaunchKernel'), (4, 'step:decode:tokens=4'), (5, 'cudaStreamSynchronize');
    INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5000100, 5000200, 0, 1, 11, 3, 0, 0),
      (5001000, 5001100, 0, 1, 12, 3, 0, 0), (5003000, 5003100, 0, 1, 13, 5, 0, 0);
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
      (5002000, 5002500, 0, 1, 7, 12, 1, 1, 2, 0, 0, 0, 64, 8, 1, 1, 256, 1, 1, 1024, 2048, 0, 0,
       2, 0),
      (5000300, 5000900, 0, 1, 7, 11, 1, 1, 2, 0, 0, 0, 64, 4, 2, 1, 128, 1, 1, 0, 0, 0, 0, 1, 0);
    INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId) VALUES
      (5000000, 5002900, 59, NULL, 4), (5000050, 5000500, 59, 'aten::mm, seq = 3', NULL);
    """)
    con.commit()
    con.close()


def test_nsys_sqlite_import(tmp_path: Path) -> None:
    db = tmp_path / "report.sqlite"
    _nsys_db(db)
    t = import_nsys_sqlite(db)
    assert t["name"].tolist() == ["void gemm_kernel<float>(float*)"] * 2
    assert t["grid_x"].tolist() == [4, 8]  # launch order (correlation 11 first)
    assert t["smem_bytes"].tolist() == [0, 3072]
    assert t["host_launch_ns"].tolist() == [100.0, 1000.0]
    assert t["start_ns"].tolist() == [300.0, 2000.0]
    assert t["duration_ns"].tolist() == [600.0, 500.0]
    assert t["step"].tolist() == [0, 0] and t["step_tokens"].tolist() == [4, 4]
    assert t["op"].tolist() == ["mm", ""]
    assert t["sync_after"].tolist() == [0, 1]
    with pytest.raises(TraceFormatError):
        empty = tmp_path / "empty.sqlite"
        sqlite3.connect(empty).close()
        import_nsys_sqlite(empty)
    # the schema is there but nothing ran on the GPU (CUDA tracing off, or the wrong region)
    idle = tmp_path / "idle.sqlite"
    _nsys_db(idle)
    con = sqlite3.connect(idle)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match="CUPTI_ACTIVITY_KIND_KERNEL.*--trace=cuda") as exc:
        import_nsys_sqlite(idle)
    assert exc.value.file == str(idle)


def test_cascade_jsonl_and_csv(tmp_path: Path) -> None:
    p = tmp_path / "k.jsonl"
    p.write_text('{"name": "k1", "grid": [2,1,1], "block": [64,1,1], "start_ns": 500, '
                 '"duration_ns": 10, "dtype": "bf16"}\n\n{"name": "k2", "start_ns": 700}\n')
    t = import_timeline(p)
    assert t["start_ns"].tolist() == [0.0, 200.0] and t["grid_x"].tolist() == [2, -1]
    assert t["kernel_id"].tolist() == [1, 2]
    csv = tmp_path / "k.csv"
    write_table(t, csv)
    back = import_timeline(csv)
    assert back["name"].tolist() == ["k1", "k2"] and back["dtype"][0] == "bf16"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "k1"}\n{"name": "k2", "colour": 3}\n')
    with pytest.raises(TraceFormatError) as exc:
        import_cascade_jsonl(bad)
    assert exc.value.line == 2 and "colour" in str(exc.value)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n")
    with pytest.raises(TraceFormatError, match="at least one kernel line") as exc:
        import_cascade_jsonl(blank)
    assert exc.value.file == str(blank)


# ---- bundles --------------------------------------------------------------------------------
def test_bundle_incremental_idempotent_resumable(tmp_path: Path) -> None:
    written = write_trace_folder(tmp_path / "t", [TraceSpec(kernel_id=i) for i in (1, 2, 3)])
    feats = parse_trace_folder(tmp_path / "t").kernels
    b = BundleBuilder(trace_id="tr1", source_gpu="a100-80gb", workload="w")
    assert b.add_features(feats[0]) is True
    assert b.add_features(feats[0]) is False  # duplicate delivery
    state = b.state_bytes()
    b2 = BundleBuilder.restore(state)  # a new worker continues
    b2.add_features(feats[2])
    b2.add_features(feats[1])
    h, manifest, npz = b2.finalize()
    # same kernels in another order -> same bundle, same bytes
    b3 = BundleBuilder(trace_id="tr1", source_gpu="a100-80gb", workload="w")
    for f in reversed(feats):
        b3.add_features(f)
    assert b3.finalize() == (h, manifest, npz)
    bundle = load_bundle(write_bundle(tmp_path / "b", manifest, npz))
    assert bundle.hash == h and bundle.manifest.kernel_count == 3
    assert bundle.kernels["kernel_id"].tolist() == [1, 2, 3]
    assert bundle.kernels["warp_insts"].tolist() == [t.columns["warp_insts"] for _, t in written]
    assert bundle.kernels["name"].dtype == object
    # a different trace id is a different bundle
    b4 = BundleBuilder(trace_id="tr2", source_gpu="a100-80gb", workload="w")
    for f in feats:
        b4.add_features(f)
    assert b4.finalize()[0] != h
    with pytest.raises(ValidationError):
        load_bundle((manifest, npz[:-10] + b"0123456789"))


def test_bundle_with_timeline_and_features(tmp_path: Path) -> None:
    tl = import_chrome_trace(_chrome())
    feats = parse_trace_folder(REAL).kernels
    b = BundleBuilder(trace_id="t", source_gpu="gtx1080", kind="both")
    assert b.add_timeline(tl) == 2 and b.add_timeline(tl) == 0
    b.add_features(feats[0])
    _h, manifest, npz = b.finalize()
    bundle = load_bundle({"manifest.json": manifest, "kernels.npz": npz})
    k = bundle.kernels
    assert len(k) == 2
    assert k["warp_insts"][0] == 4416 and math.isnan(k["warp_insts"][1])
    assert k["duration_ns"].tolist() == [12_500.0, 3_000.0]
    base = bundle.manifest.baseline
    assert base["kernel_time_ns"] == 15_500.0
    assert base["step_mean_ns:prefill"] == 12_500.0 and base["steps:decode"] == 1
    assert np.isfinite(base["span_ns"])
