"""The GPU a trace names is its source by default (predict and import), contradictions are
errors naming both, unknown names get the closest known ones suggested (`cascade predict` on a
real trace: tests/integration/test_trace_source.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from cascade.errors import UnknownGPUError, ValidationError
from cascade.gpus import GPURegistry, builtin_specs, default_registry
from cascade.gpus.registry import suggest_gpus
from cascade.kerneltable import KernelTable
from cascade.traces.inputs import LoadedTrace, load_kernel_table, load_trace, source_of_trace
from cascade.traces.nsys import read_nsys_sqlite
from cascade.traces.timeline import timeline_device
from programs.cli.importer import source_gpu_for
from tests.support.paths import REPO


def _chrome(path: Path, device: str) -> Path:
    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": 10.0,
         "dur": 50.0, "args": {"device": 0, "stream": 7, "grid": [4, 1, 1], "block": [256, 1, 1]}}],
        "deviceProperties": [{"id": 0, "name": device, "computeMajor": 8, "computeMinor": 0}]}
    path.write_text(json.dumps(doc))
    return path


def test_source_is_the_trace_gpu_unless_given_and_contradictions_name_both() -> None:
    reg = default_registry()
    loaded = LoadedTrace(KernelTable({"name": ["k"]}), device="NVIDIA A100-SXM4-80GB")
    assert source_of_trace(reg, None, loaded).id == "SM80_A100"
    assert source_of_trace(reg, "A100", loaded).id == "SM80_A100"
    with pytest.raises(ValidationError) as err:
        source_of_trace(reg, "SM90_H100", loaded)
    assert "SM80_A100" in str(err.value) and "SM90_H100" in str(err.value)
    assert "--force-source" in str(err.value)
    assert source_of_trace(reg, "SM90_H100", loaded, override=True).id == "SM90_H100"
    assert source_of_trace(reg, None, LoadedTrace(KernelTable({"name": ["k"]}))) is None


def test_unknown_trace_gpu_suggests_the_closest_known_ones() -> None:
    reg = default_registry()
    loaded = LoadedTrace(KernelTable({"name": ["k"]}), device="NVIDIA A100-SXM4-96GB")
    with pytest.raises(UnknownGPUError) as err:
        source_of_trace(reg, None, loaded)
    assert err.value.suggestions[0] == "SM80_A100"
    assert "closest: SM80_A100" in str(err.value) and "--source" in str(err.value)
    with pytest.raises(UnknownGPUError) as err2:
        reg.get("H100 PCIe 80 GB")
    assert err2.value.suggestions[0] == "SM90_H100_PCIE"
    assert suggest_gpus(reg, "completely different") == [] or \
        all(s in reg.ids() for s in suggest_gpus(reg, "completely different"))


def test_a_trace_from_a_mig_instance_is_never_taken_for_the_whole_gpu() -> None:
    """A MIG slice's device name says which GPU it is a slice of; its times are the slice's, so
    neither the trace alone nor --source naming the whole GPU simulates it as that GPU's, unless
    forced."""
    reg = default_registry()
    loaded = LoadedTrace(KernelTable({"name": ["k"]}), device="NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    with pytest.raises(UnknownGPUError) as err:
        source_of_trace(reg, None, loaded)
    assert "MIG instance of SM80_A100_SXM_40GB" in str(err.value) and "1 of its 7 compute slices" in str(err.value)
    with pytest.raises(ValidationError) as given:
        source_of_trace(reg, "SM80_A100_SXM_40GB", loaded)
    assert given.value.field == "--source" and "--force-source" in str(given.value)
    assert source_of_trace(reg, "SM80_A100_SXM_40GB", loaded, override=True).id == "SM80_A100_SXM_40GB"
    with pytest.raises(UnknownGPUError) as h100:
        reg.get("NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    assert "MIG instance of SM90_H100: 3 of its 7" in str(h100.value)
    assert "MIG" not in str(pytest.raises(UnknownGPUError, reg.get, "NVIDIA A100-SXM4-96GB").value)


def test_custom_specs_resolve_a_trace_gpu(tmp_path: Path) -> None:
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    src = (REPO / "shared" / "cascade" / "gpus" / "specs" / "SM86_A10.toml").read_text()
    spec_dir.joinpath("lab.toml").write_text(
        src.replace('id = "SM86_A10"', 'id = "LAB_A10_OC"')
        .replace('"NVIDIA A10",\n  "A10",', '"NVIDIA A10 Lab OC",'))
    reg = GPURegistry(builtin_specs())
    reg.load_dir(spec_dir)
    trace = _chrome(tmp_path / "t.json", "NVIDIA A10 Lab OC")
    assert source_of_trace(reg, None, load_trace(trace)).id == "LAB_A10_OC"
    assert load_kernel_table(trace, reg)[1] is not None


def test_import_source_gpu_from_files(tmp_path: Path) -> None:
    trace = _chrome(tmp_path / "run.pt.trace.json", "NVIDIA H100 80GB HBM3")
    assert timeline_device(trace) == ("NVIDIA H100 80GB HBM3", 80)
    assert source_gpu_for([trace], None) == "NVIDIA H100 80GB HBM3"
    assert source_gpu_for([trace], "H100") == "H100"
    with pytest.raises(ValidationError, match="SM90_H100.*SM70_V100_SXM2"):
        source_gpu_for([trace], "Tesla V100-SXM2-16GB")
    assert source_gpu_for([trace], "SM70_V100_SXM2", force=True) == "SM70_V100_SXM2"
    plain = tmp_path / "k.jsonl"
    plain.write_text('{"name": "k"}\n')
    with pytest.raises(ValidationError, match="none of its files names"):
        source_gpu_for([plain], None)


def _nsys(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript("""
    CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE TARGET_INFO_GPU (vmId INT, id INT NOT NULL, name TEXT, busLocation TEXT,
      isDiscrete INT, l2CacheSize INT, totalMemory INT, memoryBandwidth INT, clockRate INT,
      smCount INT, pwGpuId INT, uuid TEXT, luid INT, chipName TEXT, cuDevice INT, ctxId INT,
      computeMajor INT, computeMinor INT);
    CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INT, cudaId INT, pid INT, uuid TEXT,
      numMultiprocessors INT, computeCapabilityMajor INT, computeCapabilityMinor INT, name TEXT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL,
      deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT,
      globalPid INT, demangledName INT NOT NULL, shortName INT NOT NULL, mangledName INT,
      launchType INT, cacheConfig INT, registersPerThread INT NOT NULL, gridX INT NOT NULL,
      gridY INT NOT NULL, gridZ INT NOT NULL, blockX INT NOT NULL, blockY INT NOT NULL,
      blockZ INT NOT NULL, staticSharedMemory INT NOT NULL, dynamicSharedMemory INT NOT NULL,
      localMemoryPerThread INT NOT NULL, localMemoryTotal INT NOT NULL, gridId INT NOT NULL,
      sharedMemoryExecuted INT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT NOT NULL, end INT NOT NULL,
      deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT,
      globalPid INT, bytes INT NOT NULL, copyKind INT NOT NULL, deprecatedSrcId INT,
      srcKind INT, dstKind INT, srcDeviceId INT, srcContextId INT, dstDeviceId INT,
      dstContextId INT, migrationCause INT, graphNodeId INT, virtualAddress INT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT NOT NULL, end INT NOT NULL,
      deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT,
      globalPid INT, value INT NOT NULL, bytes INT NOT NULL, graphNodeId INT, memKind INT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT NOT NULL, end INT NOT NULL,
      eventClass INT NOT NULL, globalTid INT, correlationId INT, nameId INT NOT NULL,
      returnValue INT NOT NULL, callchainId INT);
    CREATE TABLE NVTX_EVENTS (start INT NOT NULL, end INT, eventType INT NOT NULL, rangeId INT,
      category INT, color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT,
      domainId INT, uint64Value INT, int64Value INT, doubleValue REAL, uint32Value INT,
      int32Value INT, floatValue REAL, jsonTextId INT, jsonText TEXT);
    INSERT INTO StringIds VALUES (1, 'ampere_sgemm_128x64_tn'), (2, 'sgemm'),
      (3, 'cudaLaunchKernel'), (4, 'cudaMemcpyAsync'), (5, 'cudaStreamSynchronize'),
      (6, 'ProfilerStep#7');
    INSERT INTO TARGET_INFO_GPU (vmId, id, name, cuDevice, computeMajor, computeMinor)
      VALUES (0, 0, 'NVIDIA A100-SXM4-80GB', 0, 8, 0);
    INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, 0, 1, '', 108, 8, 0, 'NVIDIA A100-SXM4-80GB');
    INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1000, 1100, 0, 1, 21, 3, 0, 0),
      (1200, 1300, 0, 1, 22, 4, 0, 0), (9000, 9100, 0, 1, 23, 5, 0, 0);
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
      (2000, 52000, 0, 1, 7, 21, 1, 1, 2, 0, 0, 0, 122, 4, 8, 1, 256, 1, 1, 8192, 16384, 0, 0,
       1, 0);
    INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId,
      correlationId, bytes, copyKind) VALUES (60000, 61000, 0, 1, 7, 22, 1048576, 2);
    INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId,
      correlationId, value, bytes) VALUES (62000, 62500, 0, 1, 7, -1, 0, 4096);
    INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid) VALUES
      (500, 9500, 59, NULL, 6, 1), (900, 1150, 59, 'aten::addmm', NULL, 1),
      (950, 1120, 59, 'aten::other_thread_op', NULL, 2), (8000, NULL, 34, 'a mark', NULL, 1);
    """)
    con.commit()
    con.close()
    return path


def test_nsys_export_device_copies_steps_launch_config(tmp_path: Path) -> None:
    tl = read_nsys_sqlite(_nsys(tmp_path / "r.sqlite"))
    t = tl.table
    assert tl.device == "NVIDIA A100-SXM4-80GB" and tl.device_sm == 80
    assert t["name"].tolist() == ["ampere_sgemm_128x64_tn", "Memcpy", "Memset"]
    assert (t["grid_x"][0], t["grid_y"][0], t["block_x"][0], t["regs"][0]) == (4, 8, 256, 122)
    assert t["smem_bytes"][0] == 8192 + 16384 and t["stream"][0] == 7
    assert t["op"].tolist() == ["addmm", "memcpy", "memset"]
    assert t["bytes"][1] == 1048576 and t["bytes"][2] == 4096
    assert t["host_launch_ns"][0] == 500.0 and t["duration_ns"][0] == 50000.0
    assert np.isnan(t["host_launch_ns"][2])
    assert t["step"].tolist()[:2] == [0, 0] and t["step_kind"][0] == ""
    assert t["sync_after"].tolist() == [0, 1, 0]  # the memcpy is the last launch before the sync
    assert timeline_device(tmp_path / "r.sqlite") == ("NVIDIA A100-SXM4-80GB", 80)
    assert source_of_trace(default_registry(), None, load_trace(tmp_path / "r.sqlite")).id == \
        "SM80_A100"
