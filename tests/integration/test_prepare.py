"""Prepare workers: bad input per kernel, timelines, and a worker killed mid-trace.

Real nats-server (private to this module), real SeaweedFS; prepare runs as a
separate process (killed with SIGKILL) and in-process.
"""

from __future__ import annotations

import json
import lzma
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cascade.platform import subjects
from cascade.platform.bundlecache import fetch_bundle
from cascade.platform.tracestore import UnitRecord
from cascade.traces.bundle import load_bundle
from tests.support.traces_stack import TracesStack, running_stack, write_kernels
from tests.support.wait import wait_for_kv

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
async def stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    async with running_stack(s3_server, tmp_path_factory.mktemp("prepare"), prepare=False) as s:
        yield s


async def _ensure_inprocess_prepare(stack: TracesStack) -> None:
    if "prepare" not in stack.tasks:
        from services.prepare import run as run_prepare

        await stack.start("prepare", run_prepare)


async def test_malformed_line_fails_that_kernel_with_file_and_line(stack: TracesStack, tmp_path: Path) -> None:
    await _ensure_inprocess_prepare(stack)
    paths = write_kernels(tmp_path / "bad", 3, blocks=2, iterations=1, xz=False)
    lines = paths[1].read_text().splitlines(keepends=True)
    victim = next(i for i, line in enumerate(lines) if line.startswith("0020 "))
    lines[victim] = "0020 ffffffff 1 R2 IMAD banana\n"
    paths[1].write_text("".join(lines))
    truncated = tmp_path / "bad" / "kernel-4.traceg.xz"
    whole = lzma.compress(paths[0].read_bytes().replace(b"kernel id = 1", b"kernel id = 4"))
    truncated.write_bytes(whole[: len(whole) // 2])
    async with stack.client() as api:
        trace = await api.create_trace(name="malformed", source_gpu="SM80_A100")
        await api.upload_files(trace["id"], [*paths, truncated])
        await api.seal(trace["id"])
        done = await api.wait_for_state(trace["id"], {"failed", "ready"}, timeout=60)
        # A bad kernel fails that kernel, not the trace: ready with 2 of 4, failures named.
        assert done["state"] == "ready", done
    by_unit = {k["unit"]: k for k in done["kernels"]}
    assert by_unit["kernel-1"]["state"] == "prepared" and by_unit["kernel-3"]["state"] == "prepared"
    bad = by_unit["kernel-2"]
    assert bad["state"] == "failed"
    assert bad["error"].startswith(f"kernel-2.traceg:{victim + 1}: expected"), bad["error"]
    assert "truncated" in by_unit["kernel-4"]["error"]
    assert by_unit["kernel-4"]["state"] == "failed"
    assert any(e.startswith("kernel-2.traceg:") for e in done["errors"])
    assert done["kernels_failed"] == 2 and done["kernels_prepared"] == 2
    assert done["bundle_kernels"] == 2 and done["bundle_key"]
    assert any(w.startswith("ready with 2 of 4 kernels; failed: kernel-2, kernel-4")
               for w in done["warnings"]), done["warnings"]


async def test_timeline_file_becomes_the_bundle(stack: TracesStack, tmp_path: Path) -> None:
    await _ensure_inprocess_prepare(stack)
    timeline = tmp_path / "run.jsonl"
    rows = [
        {"name": f"gemm_{i}", "grid": [64, 1, 1], "block": [128, 1, 1], "stream": 7,
         "host_launch_ns": 1000 * i, "start_ns": 1000 * i + 50, "duration_ns": 400 + i,
         "op": "linear", "dtype": "fp16", "step": i // 2}
        for i in range(6)
    ]
    timeline.write_text("".join(json.dumps(r) + "\n" for r in rows))
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(rows[0]) + "\n{not json\n")
    async with stack.client() as api:
        trace = await api.create_trace(name="timeline", source_gpu="SM90_H100", kind="timeline")
        await api.upload_files(trace["id"], [timeline])
        await api.seal(trace["id"])
        ready = await api.wait_for_state(trace["id"], {"ready", "failed", "incomplete"}, timeout=60)
        assert ready["state"] == "ready", ready
        assert ready["bundle_kernels"] == 6
        bad = await api.create_trace(name="timeline-bad", source_gpu="SM90_H100", kind="timeline")
        await api.upload_files(bad["id"], [broken])
        await api.seal(bad["id"])
        failed = await api.wait_for_state(bad["id"], {"ready", "failed", "incomplete"}, timeout=60)
    assert failed["state"] == "failed"
    assert failed["kernels"][0]["error"].startswith("broken.jsonl:2: expected")
    record = await stack.store.require(trace["id"])
    bundle = load_bundle(await fetch_bundle(stack.storage, record, tmp_path / "cache"))
    assert bundle.manifest.kind == "timeline"
    assert list(bundle.kernels["duration_ns"]) == [400.0 + i for i in range(6)]
    local = stack.settings.data_path / "cache" / "bundles" / record.bundle_hash
    assert (local / "manifest.json").is_file() and (local / "kernels.npz").is_file()


async def test_worker_killed_mid_trace_another_finishes_without_duplicates(
    stack: TracesStack, tmp_path: Path
) -> None:
    if "prepare" in stack.tasks:
        await stack.stop("prepare")
    count = 8
    paths = write_kernels(tmp_path / "kill", count, blocks=48, iterations=8, repeat=8)
    proc = stack.spawn_prepare(tmp_path / "prepare-a.log")
    async with stack.client() as api:
        trace = await api.create_trace(name="killed", source_gpu="SM80_A100")
        tid = trace["id"]
        await api.upload_files(tid, [*paths, tmp_path / "kill" / "kernelslist.g"])
        await api.seal(tid)
        states: dict[str, str] = {}

        def prepared_two_and_busy(unit: UnitRecord) -> bool:
            states[unit.unit] = unit.state
            return list(states.values()).count("prepared") >= 2 and "preparing" in states.values()

        try:  # every unit change, as worker A makes it
            await wait_for_kv(stack.store.kv, subjects.KV_TRACES, subjects.kv_key(tid, "units") + ".*",
                              prepared_two_and_busy, type_=UnitRecord, timeout=60)
        except TimeoutError as exc:
            alive = "running" if proc.poll() is None else f"exited with {proc.returncode}"
            log = (tmp_path / "prepare-a.log").read_text()[-2000:]
            raise AssertionError(f"worker A ({alive}) did not prepare 2 kernels: {exc}\n{log}") from None
        prepared = list(states.values()).count("prepared")
        in_flight = [unit for unit, state in states.items() if state == "preparing"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert prepared < count, "worker A finished everything before it was killed"
        await _ensure_inprocess_prepare(stack)
        ready = await api.wait_for_state(tid, {"ready", "failed", "incomplete"}, timeout=90)
    assert ready["state"] == "ready", ready
    assert ready["kernels_prepared"] == count == ready["kernels_total"] == ready["bundle_kernels"]
    units = await stack.store.units(tid)
    assert all(u.state == "prepared" for u in units) and len(units) == count
    redone = {u.unit: u.attempts for u in units if u.attempts >= 2}
    assert set(in_flight) <= set(redone), (in_flight, redone)
    record = await stack.store.require(tid)
    bundle = load_bundle(await fetch_bundle(stack.storage, record, tmp_path / "cache"))
    ids = bundle.kernels["kernel_id"]
    assert len(np.unique(ids)) == len(ids) == count
    assert sorted(ids.tolist()) == list(range(1, count + 1))
    parts = [o async for o in stack.storage.list(f"traces/{tid}/parts/")]
    assert len(parts) == count


async def test_gzip_bomb_timeline_fails_naming_the_file_and_the_limit(stack: TracesStack,
                                                                      tmp_path: Path) -> None:
    """The issue's hostile input: a small .json.gz holding one enormous string."""
    import gzip

    await _ensure_inprocess_prepare(stack)
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [{"name": "')
        for _ in range(80):
            fh.write(b"A" * (1024 * 1024))
        fh.write(b'"}]}')
    assert bomb.stat().st_size < 1024 * 1024
    async with stack.client() as api:
        trace = await api.create_trace(name="bomb", source_gpu="SM90_H100", kind="timeline")
        await api.upload_files(trace["id"], [bomb])
        await api.seal(trace["id"])
        failed = await api.wait_for_state(trace["id"], {"ready", "failed", "incomplete"}, timeout=90)
    assert failed["state"] == "failed"
    error = failed["kernels"][0]["error"]
    assert error.startswith("bomb.json.gz: expected at most 100 decompressed bytes per compressed byte")
