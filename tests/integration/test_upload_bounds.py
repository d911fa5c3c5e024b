"""Uploads are bound to their declared size, and an arrived file cannot be replaced through
an old URL (real api + ingest on a real NATS server and the session's SeaweedFS)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import pytest

from cascade.platform.keys import raw_key
from programs.client import ApiError
from tests.support.traces_stack import TracesStack, running_stack

pytestmark = [pytest.mark.timeout(120)]

PUT_TTL = 120


@pytest.fixture(scope="module")
async def stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    async with running_stack(s3_server, tmp_path_factory.mktemp("bounds"), prepare=False,
                             presign_put_ttl_s=PUT_TTL) as s:
        yield s


async def _file_state(stack: TracesStack, tid: str, name: str, state: str,
                      timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = await stack.store.get_file(tid, name)
        if rec is not None and rec.state == state:
            return rec
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never became {state} (last: {rec})")


async def _put(url: str, body: bytes) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.put(url, data=body) as resp:
        return resp.status, resp.headers.get("ETag", "").strip('"')


async def test_larger_body_than_declared_is_refused_by_s3_and_failed_by_ingest(
    stack: TracesStack,
) -> None:
    name = "kernel-3.traceg"
    big = b"x" * (5 * 1024 * 1024)
    async with stack.client() as api:
        tid = (await api.create_trace(name="bound", source_gpu="SM80_A100"))["id"]
        answer = await api.request_uploads(tid, [(name, 237)])
        url = answer["uploads"][0]["url"]
        # the signed Content-Length: SeaweedFS refuses the 5 MiB body outright
        status, _ = await _put(url, big)
        assert status == 403
        assert await stack.storage.head(raw_key(tid, name)) is None
        # an S3 server that ignores the signed length (stand-in: written with the bucket's
        # keys, as such a server would store it): the callback and ingest both refuse it
        await stack.storage.put_bytes(raw_key(tid, name), big)
        with pytest.raises(ApiError) as err:
            await api.report_uploaded(tid, name)
        want = f"{name}: declared 237 bytes, uploaded 5,242,880 bytes; re-upload it"
        assert err.value.http_status == 409 and want in str(err.value)
        rec = await _file_state(stack, tid, name, "rejected")
        assert rec.error == want
        assert await stack.store.get_unit(tid, "kernel-3") is None
        sealed = await api.seal(tid, expected_files=[name])
        assert want in (await api.wait_for_state(tid, {"incomplete"}, timeout=20))["errors"]
        assert sealed["id"] == tid
        # re-uploaded at its declared size, it is accepted
        body = b"y" * 237
        answer = await api.request_uploads(tid, [(name, len(body))])
        status, etag = await _put(answer["uploads"][0]["url"], body)
        assert status == 200
        await api.report_uploaded(tid, name, etag)
        rec = await _file_state(stack, tid, name, "received")
        assert rec.size == 237 and rec.etag == etag


async def test_multipart_completed_short_of_its_declared_size_fails_the_file(
    stack: TracesStack, tmp_path: Path,
) -> None:
    name = "kernel-1.traceg"
    size = 6 * 1024 * 1024
    async with stack.client() as api:
        tid = (await api.create_trace(name="short", source_gpu="SM80_A100"))["id"]
        target = (await api.request_uploads(tid, [(name, size)]))["uploads"][0]
        mp = target["multipart"]
        assert len(mp["parts"]) == 2
        first = mp["parts"][0]
        status, etag = await _put(first["url"], b"z" * int(first["size"]))
        assert status == 200
        with pytest.raises(ApiError) as err:  # only part 1 listed: 5 MiB of the 6 declared
            await api.request("POST", f"/api/traces/{tid}/uploads/complete", json={
                "name": name, "upload_id": mp["upload_id"],
                "parts": [{"part_number": 1, "etag": etag}]})
        assert err.value.http_status == 409
        assert "declared 6,291,456 bytes, uploaded 5,242,880 bytes" in str(err.value)
        rec = await _file_state(stack, tid, name, "rejected")
        assert "declared 6,291,456 bytes" in rec.error


async def test_single_put_urls_are_short_lived_and_cannot_replace_an_arrived_file(
    stack: TracesStack,
) -> None:
    name = "stats.csv"
    async with stack.client() as api:
        tid = (await api.create_trace(name="overwrite", source_gpu="SM80_A100"))["id"]
        answer = await api.request_uploads(tid, [(name, 10)])
        assert answer["expires_in"] == PUT_TTL
        url = answer["uploads"][0]["url"]
        assert dict(parse_qsl(urlsplit(url).query))["X-Amz-Expires"] == str(PUT_TTL)
        status, first = await _put(url, b"a" * 10)
        assert status == 200
        await api.report_uploaded(tid, name, first)
        rec = await _file_state(stack, tid, name, "received")
        assert rec.etag == first
        # a re-upload asked for after the arrival replaces the file
        answer = await api.request_uploads(tid, [(name, 10)])
        status, second = await _put(answer["uploads"][0]["url"], b"b" * 10)
        assert status == 200 and second != first
        await api.report_uploaded(tid, name, second)
        deadline = time.monotonic() + 20
        while (rec := await stack.store.get_file(tid, name)) is None or rec.etag != second:
            assert time.monotonic() < deadline, rec
            await asyncio.sleep(0.05)
        assert rec.state == "received"
        # the first URL, used again with other content of the same size: S3 takes it (a
        # presigned URL cannot be revoked), ingest refuses the replacement
        status, third = await _put(url, b"c" * 10)
        assert status == 200 and third not in (first, second)
        await api.report_uploaded(tid, name, third)
        rec = await _file_state(stack, tid, name, "rejected")
        assert rec.error == (f"{name}: changed after it arrived (ETag {second} became {third}) "
                             "through an upload URL issued before; re-upload it (a new upload "
                             "request)")
        record = await api.get_trace(tid)
        assert rec.error in record["errors"]


async def test_a_request_needing_too_many_presigned_urls_is_refused_and_the_client_batches(
    stack: TracesStack,
) -> None:
    """Five 64 GiB files in 64 MiB parts need 5,120 part URLs, over the 4,096 one request may
    ask for: 400 saying so, before anything is signed or declared; the client asks for the same
    files in batches the api takes (here: two small ones and one big, all in one request; the big
    one's parts grow so that it takes at most 1,024 URLs)."""
    from services.api.uploads import MAX_UPLOAD_URLS

    big = 64 * 1024**3
    async with stack.client() as api:
        tid = (await api.create_trace(name="many-urls", source_gpu="SM80_A100"))["id"]
        with pytest.raises(ApiError) as err:
            await api.request("POST", f"/api/traces/{tid}/uploads", json={
                "files": [{"name": f"kernel-{i}.traceg", "size": big} for i in range(1, 6)]})
        assert err.value.http_status == 400
        assert "need 5,120 upload URLs" in str(err.value) and f"{MAX_UPLOAD_URLS:,}" in str(err.value)
        assert await stack.store.get_file(tid, "kernel-1.traceg") is None
        answer = await api.request_uploads(tid, [("kernel-1.traceg", 10), ("kernel-2.traceg", 20),
                                                 ("kernel-3.traceg", 6 * 1024**3)])
        assert [u["name"] for u in answer["uploads"]] == ["kernel-1.traceg", "kernel-2.traceg", "kernel-3.traceg"]
        parts = answer["uploads"][2]["multipart"]["parts"]
        assert len(parts) <= 1024 and sum(p["size"] for p in parts) == 6 * 1024**3
