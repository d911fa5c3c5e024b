"""Ingest's three intake paths (S3 events, callbacks, reconcile), refusals and incompleteness.

Real nats-server (private to this module), real SeaweedFS, services in-process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest

from cascade.platform import subjects
from cascade.platform.keys import decode_event_key, raw_key
from services.ingest.s3events import S3Notification, created_objects
from tests.traces_stack import TracesStack, running_stack, write_kernels

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LIMIT = 2 * 1024 * 1024


@pytest.fixture(scope="module")
async def stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    async with running_stack(s3_server, tmp_path_factory.mktemp("ingest"), max_upload_bytes=LIMIT) as s:
        yield s


def minio_event(bucket: str, key: str, size: int, etag: str, name: str = "s3:ObjectCreated:Put") -> bytes:
    """One notification exactly as MinIO publishes it to NATS."""
    import json

    return json.dumps({
        "EventName": name,
        "Key": f"{bucket}/{key}",
        "Records": [{
            "eventVersion": "2.0", "eventSource": "minio:s3", "awsRegion": "",
            "eventTime": "2024-01-01T00:00:00.000Z", "eventName": name.removeprefix("s3:"),
            "s3": {
                "s3SchemaVersion": "1.0", "configurationId": "Config",
                "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                "object": {"key": quote_plus(key), "size": size, "eTag": etag,
                           "contentType": "application/octet-stream", "sequencer": "17A"},
            },
        }],
    }).encode()


async def wait_for(check: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def ingest_stats(stack: TracesStack) -> dict[str, Any]:
    for reply in await stack.bus.discover_services("STATS", timeout=0.5):
        if reply.get("name") == subjects.micro_name("ingest"):
            for endpoint in reply.get("endpoints") or []:
                if isinstance(endpoint.get("data"), dict):
                    return dict(endpoint["data"])
    raise AssertionError("ingest did not answer $SRV.STATS")


def test_event_parsing_handles_prefixes_and_url_encoding() -> None:
    import msgspec

    note = msgspec.json.decode(minio_event("b", "traces/t1/raw/my file+x.json", 5, "abc"),
                               type=S3Notification)
    assert list(created_objects(note)) == [("b", "traces/t1/raw/my file+x.json", 5, "abc")]
    removed = msgspec.json.decode(minio_event("b", "k", 1, "e", "s3:ObjectRemoved:Delete"),
                                  type=S3Notification)
    assert list(created_objects(removed)) == []
    assert decode_event_key("traces%2Ft1%2Fraw%2Fa+b.csv") == "traces/t1/raw/a b.csv"


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
    files = await wait_for(lambda: _files_if(stack, tid, 2), what="2 file records")
    assert {f.source for f in files} == {"s3-event"}
    async with stack.client() as api:
        await api.seal(tid, expected_kernels=2)
        ready = await api.wait_for_state(tid, {"ready", "failed", "incomplete"}, timeout=60)
    assert ready["state"] == "ready" and ready["kernels_prepared"] == 2
    assert ready["files_received"] == 2


async def _files_if(stack: TracesStack, tid: str, n: int) -> Any:
    files = await stack.store.files(tid)
    return files if len(files) >= n else None


async def test_missed_notification_is_caught_by_reconcile(stack: TracesStack, tmp_path: Path) -> None:
    (path,) = write_kernels(tmp_path / "rc", 1, blocks=2, iterations=1)
    async with stack.client() as api:
        trace = await api.create_trace(name="reconcile", source_gpu="SM80_A100")
        answer = await api.request_uploads(trace["id"], [(path.name, path.stat().st_size)])
        await api.put_presigned(answer["uploads"][0]["url"], path)  # no callback, no event
    files = await wait_for(lambda: _files_if(stack, trace["id"], 1), what="reconcile")
    assert files[0].source == "reconcile" and files[0].name == path.name
    unit = await wait_for(lambda: _prepared_unit(stack, trace["id"], "kernel-1"), what="prepared")
    assert unit.kernel_id == 1 and unit.summary["warp_insts"] > 0


async def _unit_in(stack: TracesStack, tid: str, unit: str, state: str) -> Any:
    u = await stack.store.get_unit(tid, unit)
    return u if u is not None and u.state == state else None


async def _prepared_unit(stack: TracesStack, tid: str, unit: str) -> Any:
    u = await stack.store.get_unit(tid, unit)
    return u if u is not None and u.state == "prepared" else None


async def test_refused_keys_never_become_files(stack: TracesStack) -> None:
    async with stack.client() as api:
        trace = await api.create_trace(name="refusals", source_gpu="SM80_A100")
    tid = trace["id"]
    before = (await ingest_stats(stack))["refused"]
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
    await wait_for(lambda: _refused_at_least(stack, before + len(hostile)), what="refusals")
    assert await stack.store.files(tid) == []


async def _refused_at_least(stack: TracesStack, n: int) -> bool:
    return int((await ingest_stats(stack))["refused"]) >= n


async def test_oversized_object_is_rejected_not_prepared(stack: TracesStack) -> None:
    async with stack.client() as api:
        trace = await api.create_trace(name="big", source_gpu="SM80_A100")
        tid = trace["id"]
        await stack.storage.put_bytes(raw_key(tid, "kernel-1.traceg"), b"x" * (LIMIT + 1))
        await api.report_uploaded(tid, "kernel-1.traceg")
        rejected = await wait_for(lambda: _files_if(stack, tid, 1), what="rejection")
        assert rejected[0].state == "rejected" and "over the limit" in rejected[0].error
        assert await stack.store.get_unit(tid, "kernel-1") is None

        async def named() -> Any:  # the file record is written before the trace's errors
            record = await api.get_trace(tid)
            return record if any("over the limit" in e for e in record["errors"]) else None

        await wait_for(named, what="the rejection in the trace's errors")


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
        await wait_for(lambda: _prepared_unit(stack, trace["id"], "kernel-1"), what="kernel-1 prepared")
        await wait_for(lambda: _unit_in(stack, trace["id"], "kernel-2", "failed"), what="kernel-2 failed")
        # a count that landed twice (the race reconcile used to make permanent)
        await stack.store.mutate(trace["id"], lambda r: _replace(r, kernels_failed=5, kernels_prepared=4))
        detail = await api.get_trace(trace["id"])
        assert detail["kernels_failed"] == 1 and detail["kernels_prepared"] == 1  # from the units

        async def healed() -> Any:
            r = await stack.store.get(trace["id"])
            return r if r is not None and (r.kernels_failed, r.kernels_prepared) == (1, 1) else None

        await wait_for(healed, what="reconcile to set the counts from the units")
