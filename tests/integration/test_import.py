"""``cascade import``: presigned uploads of a folder, resumable reruns, the CLI itself."""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import os
import sys
from pathlib import Path

import pytest

from cascade.errors import ValidationError
from cascade.platform import subjects
from cascade.platform.tracestore import FileRecord
from programs.cli.importer import run_import
from programs.client import md5_etag
from tests.support.trace_folders import tool_folder
from tests.support.traces_stack import (
    REAL_TRACE,
    REPO,
    TOKEN,
    TracesStack,
    traces_stack,
    write_kernels,
)
from tests.support.wait import wait_for_kv

pytestmark = pytest.mark.timeout(120)
__all__ = ["traces_stack"]


def _args(stack: TracesStack, path: Path, state: Path, **kw: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "path": path, "app": stack.base_url, "token": TOKEN, "name": None, "source_gpu": "SM80_A100",
        "kind": None, "workload": "", "trace_id": None, "state_file": state, "no_seal": False,
        "wait": 0.0, "quiet": True,
    }
    values.update(kw)
    return argparse.Namespace(**values)


async def test_import_real_trace_folder(traces_stack: TracesStack, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    summary = await run_import(_args(traces_stack, REAL_TRACE, state, source_gpu="SM61_P4", wait=60.0))
    assert summary["state"] == "ready" and summary["uploaded"] == 3 and summary["skipped"] == 0
    assert json.loads(state.read_text())[f"{traces_stack.base_url} {REAL_TRACE.resolve()}"]["trace_id"] == summary["trace_id"]
    again = await run_import(_args(traces_stack, REAL_TRACE, state, source_gpu="SM61_P4"))
    assert again["trace_id"] == summary["trace_id"]
    assert again["uploaded"] == 0 and again["skipped"] == 3 and again["state"] == "ready"


async def test_rerun_uploads_only_what_is_missing_or_changed(traces_stack: TracesStack, tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    paths = write_kernels(folder, 4, blocks=2, iterations=1)
    big = folder / "kernel-5.traceg"
    write_kernels(tmp_path / "big", 1, blocks=40, iterations=6, xz=False, first=5, repeat=4)
    (tmp_path / "big" / "kernel-5.traceg").rename(big)
    assert big.stat().st_size > traces_stack.settings.multipart_threshold_bytes
    hidden = tmp_path / "later"
    hidden.mkdir()
    paths[3].rename(hidden / paths[3].name)  # "not written yet" on the first run
    first = await run_import(_args(traces_stack, folder, folder / ".cascade-import.json", no_seal=True))
    assert first["uploaded"] == 5 and first["state"] == "receiving"
    names: set[str] = set()

    def all_five(file: FileRecord) -> bool:
        names.add(file.name)
        return len(names) == 5

    # ingest records the callbacks asynchronously
    await wait_for_kv(traces_stack.store.kv, subjects.KV_TRACES,
                      subjects.kv_key(first["trace_id"], "files") + ".*", all_five, type_=FileRecord, timeout=10)
    (hidden / paths[3].name).rename(paths[3])
    paths[0].write_bytes(lzma.compress(lzma.decompress(paths[0].read_bytes()) + b"\n"))
    second = await run_import(_args(traces_stack, folder, folder / ".cascade-import.json", wait=60.0))
    assert second["trace_id"] == first["trace_id"]
    # kernel-4 was new, kernel-1 changed; kernel-2, kernel-3, the multipart kernel-5 and
    # kernelslist.g were already there.
    assert (second["uploaded"], second["skipped"]) == (2, 4)
    assert second["state"] == "ready"
    files = {f.name: f for f in await traces_stack.store.files(first["trace_id"])}
    assert files["kernel-1.traceg.xz"].etag == md5_etag(paths[0])


async def test_cli_uses_token_from_environment(traces_stack: TracesStack, tmp_path: Path) -> None:
    timeline = tmp_path / "steps.jsonl"
    timeline.write_text("".join(
        json.dumps({"name": f"k{i}", "grid": [1, 1, 1], "block": [32, 1, 1], "duration_ns": 10.0 + i}) + "\n"
        for i in range(3)
    ))
    env = {**os.environ, "CASCADE_API_TOKEN": TOKEN}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "programs.cli", "import", str(timeline), "--app", traces_stack.base_url,
        "--source-gpu", "NVIDIA H100 80GB HBM3", "--wait", "60", "--quiet",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    assert "uploaded 1" in out.decode() and "state ready" in out.decode()
    state = json.loads((tmp_path / ".cascade-import.json").read_text())
    (entry,) = state.values()
    record = await traces_stack.store.require(entry["trace_id"])
    assert record.kind == "timeline" and record.bundle_kernels == 3 and record.source_gpu == "SM90_H100"
    env.pop("CASCADE_API_TOKEN")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "programs.cli", "import", str(timeline), "--app", traces_stack.base_url,
        "--source-gpu", "SM90_H100", "--state-file", str(tmp_path / "other.json"), "--quiet",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and "401 unauthorized" in out.decode()


async def test_import_takes_the_source_gpu_from_the_trace(traces_stack: TracesStack,
                                                          tmp_path: Path) -> None:
    import shutil

    real = REPO.parent / "shared" / "data" / "timelines" / "h100-bert-small.pt.trace.json.gz"
    if not real.exists():
        pytest.skip(f"{real} not present")
    folder = tmp_path / "bert"
    folder.mkdir()
    shutil.copy(real, folder / real.name)
    with pytest.raises(ValidationError, match=r"SM90_H100.*SM80_A100.*--force-source-gpu"):
        await run_import(_args(traces_stack, folder, tmp_path / "s0.json", source_gpu="SM80_A100"))
    summary = await run_import(_args(traces_stack, folder, tmp_path / "s1.json", source_gpu=None,
                                     wait=60.0))
    assert summary["state"] == "ready"
    record = await traces_stack.store.require(summary["trace_id"])
    assert record.source_gpu == "SM90_H100" and record.bundle_kernels == 61
    forced = await run_import(_args(traces_stack, folder, tmp_path / "s2.json",
                                    source_gpu="SM80_A100", force_source_gpu=True))
    assert (await traces_stack.store.require(forced["trace_id"])).source_gpu == "SM80_A100"


async def test_tool_folder_imports_with_skipped_files_and_a_failed_kernel(
        traces_stack: TracesStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "tool"
    tool_folder(folder)
    args = _args(traces_stack, folder, tmp_path / "s.json", source_gpu="SM61_P4", wait=60.0,
                 quiet=False)
    summary = await run_import(args)
    out = capsys.readouterr().out
    assert summary["state"] == "ready", summary
    assert summary["kernels_prepared"] == 2 and summary["kernels_total"] == 3
    assert "skipped nvprof.json: JSON but not a Chrome trace" in out
    record = await traces_stack.store.require(summary["trace_id"])
    assert record.bundle_kernels == 2 and record.kernels_failed == 1
    assert any(e.startswith("kernel-2.traceg") for e in record.errors), record.errors
    notes = "\n".join(record.warnings)
    for name in ("nvprof.json", "accelsim_log.csv", "run.log", "junk.bin", "notes.txt"):
        assert f"{name}: skipped (" in notes, notes
    assert "ready with 2 of 3 kernels; failed: kernel-2" in notes


async def test_parquet_timeline_goes_through_the_real_upload_path(traces_stack: TracesStack,
                                                                   tmp_path: Path) -> None:
    from cascade.kerneltable import KernelTable
    from cascade.tableio import write_table

    rows = [{"name": f"k{i}", "grid_x": 4, "block_x": 128, "start_ns": 1000.0 * i,
             "duration_ns": 500.0 + i, "dtype": "fp16"} for i in range(5)]
    timeline = tmp_path / "steps.parquet"
    write_table(KernelTable.from_rows(rows), timeline)
    env = {**os.environ, "CASCADE_API_TOKEN": TOKEN}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "programs.cli", "import", str(timeline), "--app", traces_stack.base_url,
        "--source-gpu", "SM90_H100", "--wait", "60", "--quiet",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    assert "state ready" in out.decode()
    (entry,) = json.loads((tmp_path / ".cascade-import.json").read_text()).values()
    record = await traces_stack.store.require(entry["trace_id"])
    assert record.kind == "timeline" and record.bundle_kernels == 5
