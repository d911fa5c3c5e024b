"""cascade.platform.storage against a real SeaweedFS server (signature checks on)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import pytest

from cascade.errors import NotFoundError, StorageError, TooLargeError, ValidationError
from cascade.platform.keys import READY_PROBE_BODY, READY_PROBE_KEY
from cascade.platform.storage import MIN_PART_SIZE, Storage

KiB = 1024
MiB = 1024 * KiB


def _blob(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest() * 64
        counter += 1
    return bytes(out[:size])


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def test_streaming_put_and_get_larger_than_chunk(storage: Storage) -> None:
    data = _blob(MIN_PART_SIZE * 2 + 123 * KiB, seed=1)
    info = await storage.put_stream("big/stream.bin", _chunks(data, 300 * KiB), part_size=MIN_PART_SIZE)
    assert info.size == len(data)
    # A multipart ETag has the "-<parts>" suffix: the stream was uploaded in 3 parts.
    assert info.etag.endswith("-3"), info.etag

    digest = hashlib.sha256()
    sizes: list[int] = []
    async for piece in storage.get_stream("big/stream.bin", chunk=256 * KiB):
        sizes.append(len(piece))
        digest.update(piece)
    assert sum(sizes) == len(data)
    assert max(sizes) <= 256 * KiB
    assert len(sizes) >= len(data) // (256 * KiB)
    assert digest.digest() == hashlib.sha256(data).digest()

    head = await storage.head("big/stream.bin")
    assert head is not None and head.size == len(data)


async def test_small_stream_is_a_single_put(storage: Storage) -> None:
    data = _blob(100 * KiB, seed=2)
    info = await storage.put_stream("small.bin", _chunks(data, 7 * KiB))
    assert "-" not in info.etag
    assert info.etag == hashlib.md5(data).hexdigest()
    assert await storage.get_bytes("small.bin") == data


async def test_ranged_stream(storage: Storage) -> None:
    data = _blob(64 * KiB, seed=3)
    await storage.put_bytes("r.bin", data)
    got = b"".join([p async for p in storage.get_stream("r.bin", start=1000, end=1999)])
    assert got == data[1000:2000]


async def test_put_file_multipart(storage: Storage, tmp_path: Path) -> None:
    data = _blob(MIN_PART_SIZE + 10 * KiB, seed=4)
    path = tmp_path / "kernel-1.trace"
    path.write_bytes(data)
    info = await storage.put_file("traces/t/raw/kernel-1.trace", path, part_size=MIN_PART_SIZE)
    assert info.size == len(data) and info.etag.endswith("-2")
    got = b"".join([p async for p in storage.get_stream("traces/t/raw/kernel-1.trace")])
    assert got == data
    with pytest.raises(NotFoundError, match="no such file"):
        await storage.put_file("x", tmp_path / "missing")


async def test_explicit_multipart_and_abort(storage: Storage) -> None:
    part1, part2 = _blob(MIN_PART_SIZE, seed=5), _blob(1234, seed=6)
    upload_id = await storage.create_multipart("mp/obj.bin")
    p2 = await storage.upload_part("mp/obj.bin", upload_id, 2, part2)
    p1 = await storage.upload_part("mp/obj.bin", upload_id, 1, part1)
    listed = await storage.list_parts("mp/obj.bin", upload_id)
    assert sorted(p.part_number for p in listed) == [1, 2]
    etag = await storage.complete_multipart("mp/obj.bin", upload_id, [p2, p1])
    assert etag.endswith("-2")
    assert await storage.get_bytes("mp/obj.bin", max_bytes=10 * MiB) == part1 + part2

    doomed = await storage.create_multipart("mp/doomed.bin")
    await storage.upload_part("mp/doomed.bin", doomed, 1, b"x" * 100)
    await storage.abort_multipart("mp/doomed.bin", doomed)
    assert await storage.head("mp/doomed.bin") is None
    with pytest.raises(ValidationError):
        await storage.complete_multipart("mp/doomed.bin", doomed, [])


async def test_presigned_put_and_get_with_plain_aiohttp(storage: Storage) -> None:
    data = _blob(200 * KiB, seed=7)
    put_url = await storage.presign_put("traces/t1/raw/stats.csv", ttl=60)
    get_url = await storage.presign_get("traces/t1/raw/stats.csv", ttl=60)
    assert "X-Amz-Signature=" in put_url and "X-Amz-Expires=60" in put_url
    async with aiohttp.ClientSession() as http:
        async with http.put(put_url, data=data) as resp:
            assert resp.status == 200, await resp.text()
        async with http.get(get_url) as resp:
            assert resp.status == 200
            assert await resp.read() == data
    info = await storage.head("traces/t1/raw/stats.csv")
    assert info is not None and info.size == len(data)


async def test_presigned_multipart_part_urls(storage: Storage) -> None:
    key = "traces/t2/raw/kernel-7.trace"
    parts_data = [_blob(MIN_PART_SIZE, seed=8), _blob(MIN_PART_SIZE, seed=9), _blob(999, seed=10)]
    upload_id = await storage.create_multipart(key)
    etags: dict[int, str] = {}
    async with aiohttp.ClientSession() as http:
        for number, body in enumerate(parts_data, start=1):
            url = await storage.presign_upload_part(key, upload_id, number, ttl=120)
            async with http.put(url, data=body) as resp:
                assert resp.status == 200, await resp.text()
                etags[number] = resp.headers["ETag"]
    listed = await storage.list_parts(key, upload_id)
    assert {p.part_number: p.etag.strip('"') for p in listed} == {
        n: e.strip('"') for n, e in etags.items()
    }
    await storage.complete_multipart(key, upload_id, listed)
    got = b"".join([p async for p in storage.get_stream(key)])
    assert got == b"".join(parts_data)


def _replace_query(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = [(k, value if k == name else v) for k, v in parse_qsl(parts.query)]
    return urlunsplit(parts._replace(query=urlencode(query)))


async def test_tampered_presigned_urls_are_refused(storage: Storage) -> None:
    await storage.put_bytes("secret/a.txt", b"A")
    await storage.put_bytes("secret/b.txt", b"B")
    get_url = await storage.presign_get("secret/a.txt", ttl=60)
    put_url = await storage.presign_put("uploads/mine.bin", ttl=60)
    signature = dict(parse_qsl(urlsplit(get_url).query))["X-Amz-Signature"]
    flipped = ("0" if signature[-1] != "0" else "1")
    async with aiohttp.ClientSession() as http:
        async with http.get(get_url) as resp:
            assert resp.status == 200 and await resp.read() == b"A"
        # Same signature, other key.
        async with http.get(get_url.replace("secret/a.txt", "secret/b.txt")) as resp:
            assert resp.status == 403
        # Key unchanged, signature altered.
        async with http.get(_replace_query(get_url, "X-Amz-Signature", signature[:-1] + flipped)) as resp:
            assert resp.status == 403
        # Longer lifetime than was signed.
        async with http.get(_replace_query(get_url, "X-Amz-Expires", "604800")) as resp:
            assert resp.status == 403
        # A PUT URL redirected to another key.
        async with http.put(put_url.replace("uploads/mine.bin", "secret/a.txt"), data=b"evil") as resp:
            assert resp.status == 403
        # No signature at all.
        async with http.get(f"{storage.endpoint}/{storage.bucket}/secret/a.txt") as resp:
            assert resp.status == 403
    assert await storage.get_bytes("secret/a.txt") == b"A"


async def test_listing_paginates(storage: Storage) -> None:
    keys = [f"list/{i:03d}.bin" for i in range(23)]
    for i, key in enumerate(keys):
        await storage.put_bytes(key, bytes([i]) * (i + 1))
    await storage.put_bytes("other/x.bin", b"x")
    listed = [info async for info in storage.list("list/", page_size=5)]
    assert [i.key for i in listed] == keys
    assert [i.size for i in listed] == list(range(1, 24))
    assert all(len(i.etag) == 32 and i.last_modified.tzinfo is not None for i in listed)
    everything = [i.key async for i in storage.list(page_size=1000)]
    assert everything == [READY_PROBE_KEY, *keys, "other/x.bin"]
    with pytest.raises(ValidationError):
        [i async for i in storage.list("list/", page_size=0)]


async def test_head_delete_and_delete_prefix(storage: Storage) -> None:
    await storage.put_bytes("d/1", b"1")
    await storage.put_bytes("d/2", b"22")
    await storage.put_bytes("d/sub/3", b"333")
    await storage.put_bytes("keep", b"k")
    assert (await storage.head("d/2")) is not None
    await storage.delete("d/2")
    assert await storage.head("d/2") is None
    await storage.delete("d/2")  # already gone: no error
    assert await storage.delete_prefix("d/") == 2
    assert [i.key async for i in storage.list()] == [READY_PROBE_KEY, "keep"]
    with pytest.raises(ValidationError, match="empty prefix"):
        await storage.delete_prefix("")


async def test_errors_are_cascade_errors(storage: Storage, s3_server) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotFoundError, match="missing.bin"):
        await storage.get_bytes("missing.bin")
    with pytest.raises(NotFoundError):
        [p async for p in storage.get_stream("missing.bin")]
    await storage.put_bytes("medium.bin", b"m" * 5000)
    with pytest.raises(TooLargeError, match="over the limit of 1000 bytes"):
        await storage.get_bytes("medium.bin", max_bytes=1000)
    with pytest.raises(ValidationError):
        await storage.presign_get("medium.bin", ttl=0)

    bad = s3_server.settings(bucket=storage.bucket, s3_secret_key="wrong-secret")
    async with Storage.from_settings(bad, max_attempts=1) as wrong:
        with pytest.raises(StorageError, match="refused"):
            await wrong.put_bytes("x", b"x")

    async with Storage.from_settings(s3_server.settings(bucket="no-such-bucket-here")) as st:
        with pytest.raises(NotFoundError):
            await st.ping()

    unreachable = s3_server.settings(s3_endpoint="http://127.0.0.1:9", bucket=storage.bucket)
    async with Storage.from_settings(unreachable, max_attempts=1, connect_timeout=1) as st:
        with pytest.raises(StorageError, match="unreachable"):
            await st.ping()


async def test_ensure_bucket_is_idempotent_and_ping(storage: Storage) -> None:
    assert await storage.ensure_bucket() is False
    assert await storage.get_bytes(READY_PROBE_KEY) == READY_PROBE_BODY
    await storage.ping()
    # the probe is rewritten when missing (a bucket someone else made), and ping does not
    # need it (a bucket without one answers for the bucket alone)
    await storage.delete(READY_PROBE_KEY)
    await storage.ping()
    assert await storage.ensure_bucket() is False
    assert await storage.get_bytes(READY_PROBE_KEY) == READY_PROBE_BODY


async def test_ping_fails_while_objects_cannot_be_read(storage: Storage,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """After a restart SeaweedFS's gateway answers HEAD bucket before its volume server
    serves data (GET -> 500 InternalError): ping must say not ready in that window."""
    from botocore.exceptions import ClientError

    real_get = storage.client.get_object

    async def volume_not_back(**kwargs: object) -> object:
        if kwargs.get("Key") == READY_PROBE_KEY:
            raise ClientError({"Error": {"Code": "InternalError",
                                         "Message": "We encountered an internal error"},
                               "ResponseMetadata": {"HTTPStatusCode": 500}}, "GetObject")
        return await real_get(**kwargs)

    monkeypatch.setattr(storage.client, "get_object", volume_not_back)
    with pytest.raises(StorageError, match="InternalError"):
        await storage.ping()
    monkeypatch.setattr(storage.client, "get_object", real_get)
    await storage.ping()


async def test_presigned_put_binds_the_declared_size(storage: Storage) -> None:
    """A PUT URL signed for 237 bytes takes exactly 237 bytes (the issue's 5 MB upload is refused)."""
    key = "traces/t-size/raw/stats.csv"
    url = await storage.presign_put(key, ttl=60, size=237)
    assert "content-length" in dict(parse_qsl(urlsplit(url).query))["X-Amz-SignedHeaders"]
    async with aiohttp.ClientSession() as http:
        for wrong in (b"x" * (5 * 1024 * 1024), b"x" * 236, b"x" * 238):
            async with http.put(url, data=wrong) as resp:
                assert resp.status == 403, (len(wrong), resp.status)
        assert await storage.head(key) is None
        async with http.put(url, data=b"y" * 237) as resp:
            assert resp.status == 200, await resp.text()
    info = await storage.head(key)
    assert info is not None and info.size == 237
    part_key = "traces/t-size/raw/kernel-1.trace"
    upload_id = await storage.create_multipart(part_key)
    part_url = await storage.presign_upload_part(part_key, upload_id, 1, ttl=60, size=1000)
    async with aiohttp.ClientSession() as http:
        async with http.put(part_url, data=b"z" * 2000) as resp:
            assert resp.status == 403
        async with http.put(part_url, data=b"z" * 1000) as resp:
            assert resp.status == 200
    await storage.abort_multipart(part_key, upload_id)
