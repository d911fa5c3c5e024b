"""Ingest's three intake paths (S3 events, callbacks, reconcile), refusals and incompleteness.

Real nats-server (private to this module), real SeaweedFS, services in-process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from cascade.platform import subjects
from cascade.platform.keys import file_key, raw_key, record_key, unit_key
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import FileRecord, UnitRecord
from tests.support.s3_events import minio_event
from tests.support.traces_stack import TracesStack, running_stack, write_kernels
from tests.support.wait import wait_for_kv, wait_until

pytestmark = pytest.mark.timeout(120)

LIMIT = 2 * 1024 * 1024


@pytest.fixture(scope="module")
async def stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    async with running_stack(s3_server, tmp_path_factory.mktemp("ingest"), max_upload_bytes=LIMIT) as s:
        yield s


WAIT_S = 20.0


async def wait_file(stack: TracesStack, tid: str, name: str) -> FileRecord:
    """The file record of ``name`` once ingest has written it (KV watch)."""
    return await wait_for_kv(stack.store.kv, subjects.KV_TRACES, file_key(tid, name), lambda _f: True,
                             type_=FileRecord, timeout=WAIT_S)


async def wait_unit(stack: TracesStack, tid: str, unit: str, state: str) -> UnitRecord:
    """The unit record of ``unit`` once it is in ``state`` (KV watch)."""
    return await wait_for_kv(stack.store.kv, subjects.KV_TRACES, unit_key(tid, unit),
                             lambda u: u.state == state, type_=UnitRecord, timeout=WAIT_S)


async def wait_trace(stack: TracesStack, tid: str, predicate: Callable[[TraceRecord], bool]) -> TraceRecord:
    """The trace record once ``predicate`` holds for it (KV watch)."""
    return await wait_for_kv(stack.store.kv, subjects.KV_TRACES, record_key(tid), predicate,
                             type_=TraceRecord, timeout=WAIT_S)


async def ingest_stats(stack: TracesStack, within_s: float = 15.0) -> dict[str, Any]:
    """Ingest's own counters from its ``$SRV.STATS`` reply (asked again until ``within_s``: a
    service busy in a loaded suite may answer a discovery round late)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        for reply in await stack.bus.discover_services("STATS", timeout=1.0):
            if reply.get("name") == subjects.micro_name("ingest"):
                for endpoint in reply.get("endpoints") or []:
                    data = endpoint.get("data")
                    if isinstance(data, dict) and "refused" in data:  # its counters' endpoint
                        return dict(data)
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"ingest did not answer $SRV.STATS within {within_s:g} s")


async def test_s3_event_path_records_and_prepares(stack: TracesStack, tmp_path: Path) -> None:
    paths = write_kernels(tmp_path / "ev", 2, blocks=2, iterations=1)
    async with stack.client() as api:
        trace = await api.create_trace(name="events", source_gpu="SM80_A100")
    tid = trace["id"]
    for path in paths:
        info = await stack.storage.put_bytes(raw_key(tid, path.name), path.read_bytes())
        await stack.bus.publish(subjects.S3_EVENTS, minio_event(stack.settings.bucket, info.key,
                                                               info.size, info.etag))
        # A duplicate notification for the same key + ETag is a no-op.
        await stack.bus.publish(subjects.S3_EVENTS, minio_event(stack.settings.bucket, info.key,
                                                               info.size, info.etag))
    for path in paths:
        await wait_file(stack, tid, path.name)
    files = await stack.store.files(tid)
    assert {f.source for f in files} == {"s3-event"}
    async with stack.client() as api:
        await api.seal(tid, expected_kernels=2)
        ready = await api.wait_for_state(tid, {"ready", "failed", "incomplete"}, timeout=60)
    assert ready["state"] == "ready" and ready["kernels_prepared"] == 2
    assert ready["files_received"] == 2


async def test_missed_notification_is_caught_by_reconcile(stack: TracesStack, tmp_path: Path) -> None:
    (path,) = write_kernels(tmp_path / "rc", 1, blocks=2, iterations=1)
    async with stack.client() as api:
        trace = await api.create_trace(name="reconcile", source_gpu="SM80_A100")
        answer = await api.request_uploads(trace["id"], [(path.name, path.stat().st_size)])
        await api.put_presigned(answer["uploads"][0]["url"], path)  # no callback, no event
    file = await wait_file(stack, trace["id"], path.name)  # found by reconcile
    assert file.source == "reconcile" and [f.name for f in await stack.store.files(trace["id"])] == [path.name]
    unit = await wait_unit(stack, trace["id"], "kernel-1", "prepared")
    assert unit.kernel_id == 1 and unit.summary["warp_insts"] > 0


async def test_refused_keys_never_become_files(stack: TracesStack) -> None:
    async with stack.client() as api:
        trace = await api.create_trace(name="refusals", source_gpu="SM80_A100")
    tid = trace["id"]
    before = int((await ingest_stats(stack)).get("refused", 0))
    bucket = stack.settings.bucket
    hostile = [
        (bucket, f"traces/{tid}/parts/kernel-1.traceg"),       # outside raw/
        (bucket, f"traces/{tid}/raw/../raw/kernel-1.traceg"),  # path trick
        (bucket, f"traces/{tid}/raw/sub/kernel-1.traceg"),     # nested
        (bucket, f"traces/{tid}/raw/notes.txt"),               # bad name
        (bucket, "traces/tr-unknown/raw/kernel-1.traceg"),     # unknown trace
        (bucket, f"bundles/{tid}/x/manifest.json"),            # another prefix
        ("other-bucket", f"traces/{tid}/raw/kernel-2.traceg"),  # another bucket
    ]
    for b, key in hostile:
        await stack.bus.publish(subjects.S3_EVENTS, minio_event(b, key, 10, "e" * 32))
    await wait_until(lambda: _refused_at_least(stack, before + len(hostile)), WAIT_S,
                     what=f"ingest's refused count ($SRV.STATS) to reach {before + len(hostile)}")
    assert await stack.store.files(tid) == []


async def _refused_at_least(stack: TracesStack, n: int) -> bool:
    return int((await ingest_stats(stack)).get("refused", 0)) >= n


async def test_oversized_object_is_rejected_not_prepared(stack: TracesStack) -> None:
    async with stack.client() as api:
        trace = await api.create_trace(name="big", source_gpu="SM80_A100")
        tid = trace["id"]
        await stack.storage.put_bytes(raw_key(tid, "kernel-1.traceg"), b"x" * (LIMIT + 1))
        await api.report_uploaded(tid, "kernel-1.traceg")
        rejected = await wait_file(stack, tid, "kernel-1.traceg")
        assert rejected.state == "rejected" and rejected.error and "over the limit" in rejected.error
        assert len(await stack.store.files(tid)) == 1
        assert await stack.store.get_unit(tid, "kernel-1") is None

        # the file record is written before the trace's errors
        await wait_trace(stack, tid, lambda r: any("over the limit" in e for e in r.errors))
        assert any("over the limit" in e for e in (await api.get_trace(tid))["errors"])


async def test_sealed_trace_missing_a_kernel_is_incomplete_then_recovers(
    stack: TracesStack, tmp_path: Path
) -> None:
    paths = write_kernels(tmp_path / "inc", 3, blocks=2, iterations=1)
    async with stack.client() as api:
        trace = await api.create_trace(name="incomplete", source_gpu="SM80_A100")
        tid = trace["id"]
        await api.upload_files(tid, [paths[0], paths[1], tmp_path / "inc" / "kernelslist.g"])
        await api.seal(tid)
        done = await api.wait_for_state(tid, {"incomplete", "ready", "failed"}, timeout=60)
        assert done["state"] == "incomplete", done
        assert done["missing"] == ["kernel-3.traceg"]
        assert done["kernels_prepared"] == 2
        await api.upload_files(tid, [paths[2]])
        ready = await api.wait_for_state(tid, {"ready"}, timeout=60)
        assert ready["missing"] == [] and ready["bundle_kernels"] == 3


async def test_expected_kernel_count_from_seal(stack: TracesStack, tmp_path: Path) -> None:
    paths = write_kernels(tmp_path / "cnt", 1, blocks=2, iterations=1)
    async with stack.client() as api:
        trace = await api.create_trace(name="count", source_gpu="SM80_A100")
        await api.upload_files(trace["id"], paths)
        await api.seal(trace["id"], expected_kernels=2)
        done = await api.wait_for_state(trace["id"], {"incomplete", "ready", "failed"}, timeout=60)
        assert done["state"] == "incomplete"
        assert done["missing"] == ["1 of 2 kernel files"]
        assert done["expected_kernels"] == 2


async def test_reconcile_sets_kernel_counts_from_the_unit_records(stack: TracesStack, tmp_path: Path) -> None:
    from cascade.platform.tracestore import replace as _replace

    paths = write_kernels(tmp_path / "counts", 2, blocks=2, iterations=1, xz=False)
    lines = paths[1].read_text().splitlines(keepends=True)
    victim = next(i for i, line in enumerate(lines) if line.startswith("0020 "))
    lines[victim] = "0020 ffffffff 1 R2 IMAD banana\n"
    paths[1].write_text("".join(lines))
    async with stack.client() as api:
        trace = await api.create_trace(name="counts", source_gpu="SM80_A100")
        await api.upload_files(trace["id"], paths)  # not sealed: reconcile keeps visiting it
        await wait_unit(stack, trace["id"], "kernel-1", "prepared")
        await wait_unit(stack, trace["id"], "kernel-2", "failed")
        # a count that landed twice (the race reconcile used to make permanent)
        await stack.store.mutate(trace["id"], lambda r: _replace(r, kernels_failed=5, kernels_prepared=4))
        detail = await api.get_trace(trace["id"])
        assert detail["kernels_failed"] == 1 and detail["kernels_prepared"] == 1  # from the units

        # reconcile sets the counts from the units
        await wait_trace(stack, trace["id"], lambda r: (r.kernels_failed, r.kernels_prepared) == (1, 1))
