"""S3 object storage through aiobotocore, provider-neutral.

One :class:`Storage` wraps one bucket on any S3-compatible server (AWS S3,
SeaweedFS, MinIO, Ceph RGW, R2): path-style addressing, SigV4 signatures and
checksums only where the S3 API requires them, so the same code runs against
all of them. Large objects are streamed in bounded chunks, never read whole.

Use it as an async context manager::

    async with Storage.from_settings(settings) as storage:
        await storage.ensure_bucket()
        await storage.put_bytes("traces/t1/raw/stats.csv", data)
        async for chunk in storage.get_stream("traces/t1/raw/kernel-1.trace"):
            ...

Every failure surfaces as :class:`~cascade.errors.NotFoundError` (missing key
or bucket) or :class:`~cascade.errors.StorageError` (unreachable server,
refused request), with the bucket, key and server answer in the message.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime as dt
import os
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import msgspec
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from cascade.errors import NotFoundError, StorageError, TooLargeError, ValidationError
from cascade.platform import keys
from cascade.platform.uploadlimits import MAX_PARTS, MIN_PART_SIZE

__all__ = [
    "DEFAULT_CHUNK",
    "MIN_PART_SIZE",
    "ObjectInfo",
    "Storage",
    "StorageSettings",
    "UploadedPart",
]

MiB = 1024 * 1024
#: Default read chunk for streaming downloads.
DEFAULT_CHUNK = 1 * MiB
#: Default part size for ``put_stream`` / ``put_file`` multipart uploads.
DEFAULT_PART_SIZE = 8 * MiB
#: Longest lifetime of a presigned URL (SigV4 limit: seven days).
MAX_PRESIGN_TTL = 7 * 24 * 3600

_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NoSuchBucket", "NotFound", "NoSuchUpload"})

_SESSIONS = threading.local()


def _session() -> Any:
    """This thread's aiobotocore session, made once: a new session loads and parses botocore's
    S3 model files (megabytes of JSON) for its first client, about 60 ms of CPU for every
    :meth:`Storage.open`; a session's clients share what it loaded. (Sessions are not for
    sharing across threads.)"""
    session = getattr(_SESSIONS, "session", None)
    if session is None:
        session = _SESSIONS.session = get_session()
    return session


class StorageSettings(Protocol):
    """The settings fields :meth:`Storage.from_settings` reads."""

    @property
    def s3_endpoint(self) -> str: ...

    @property
    def s3_access_key(self) -> str: ...

    @property
    def s3_secret_key(self) -> str: ...

    @property
    def s3_region(self) -> str: ...

    @property
    def bucket(self) -> str: ...


class ObjectInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What S3 reports about one stored object."""

    #: Object key inside the bucket.
    key: str
    #: Size in bytes.
    size: int
    #: Entity tag without surrounding quotes (an MD5 for single-part uploads).
    etag: str
    #: Last modification time (timezone-aware, UTC).
    last_modified: dt.datetime


class UploadedPart(msgspec.Struct, frozen=True, kw_only=True):
    """One finished part of a multipart upload, as ``complete_multipart`` needs it."""

    #: 1-based part number.
    part_number: int
    #: ETag the server returned for the part (quotes kept as S3 sent them).
    etag: str


def _strip_etag(etag: str | None) -> str:
    return (etag or "").strip('"')


def _check_key(key: str) -> str:
    if not key or key.startswith("/"):
        raise ValidationError(
            f"object key must be non-empty and not start with '/', got {key!r}", field="key"
        )
    return key


def _check_ttl(ttl: int) -> int:
    if not 1 <= ttl <= MAX_PRESIGN_TTL:
        raise ValidationError(
            f"presign TTL must be between 1 and {MAX_PRESIGN_TTL} seconds, got {ttl}", field="ttl"
        )
    return ttl


def _check_part_number(part_number: int) -> int:
    if not 1 <= part_number <= MAX_PARTS:
        raise ValidationError(
            f"part number must be between 1 and {MAX_PARTS}, got {part_number}",
            field="part_number",
        )
    return part_number


class Storage:
    """One S3 bucket, reached through aiobotocore.

    Create with :meth:`from_settings` or the keyword constructor, then enter
    it (``async with``) to open the connection pool. ``presign_endpoint`` is
    the URL clients outside this network use (it is part of the signature,
    so it must be the address they connect to); it defaults to ``endpoint``.
    """

    def __init__(
        self,
        *,
        endpoint: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        region: str = "us-east-1",
        presign_endpoint: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValidationError(
                f"S3 endpoint must be an http:// or https:// URL, got {endpoint!r}",
                field="s3_endpoint",
            )
        if not bucket:
            raise ValidationError("bucket name must not be empty", field="bucket")
        if part_size < MIN_PART_SIZE:
            raise ValidationError(
                f"part size must be at least {MIN_PART_SIZE} bytes, got {part_size}",
                field="part_size",
            )
        self.endpoint = endpoint.rstrip("/")
        self.presign_endpoint = (presign_endpoint or endpoint).rstrip("/")
        self.bucket = bucket
        self.region = region
        self.part_size = part_size
        self._access_key = access_key
        self._secret_key = secret_key
        self._config = AioConfig(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Any = None
        self._presigner: Any = None

    @classmethod
    def from_settings(cls, settings: StorageSettings, **overrides: Any) -> Storage:
        """A Storage for the bucket and S3 server named in ``settings``.

        Reads ``s3_endpoint``, ``s3_access_key``, ``s3_secret_key``,
        ``s3_region``, ``bucket`` and, when present, ``s3_public_endpoint``.
        """
        kwargs: dict[str, Any] = {
            "endpoint": settings.s3_endpoint,
            "access_key": settings.s3_access_key,
            "secret_key": settings.s3_secret_key,
            "region": settings.s3_region,
            "bucket": settings.bucket,
            "presign_endpoint": getattr(settings, "s3_public_endpoint", None) or None,
        }
        kwargs.update(overrides)
        return cls(**kwargs)

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the HTTP connection pool (idempotent)."""
        if self._stack is not None:
            return
        stack = contextlib.AsyncExitStack()
        session = _session()
        common: dict[str, Any] = {
            "region_name": self.region,
            "aws_access_key_id": self._access_key,
            "aws_secret_access_key": self._secret_key,
            "config": self._config,
        }
        try:
            self._client = await stack.enter_async_context(
                session.create_client("s3", endpoint_url=self.endpoint, **common)
            )
            if self.presign_endpoint == self.endpoint:
                self._presigner = self._client
            else:
                self._presigner = await stack.enter_async_context(
                    session.create_client("s3", endpoint_url=self.presign_endpoint, **common)
                )
        except BaseException:
            await stack.aclose()
            self._client = self._presigner = None
            raise
        self._stack = stack

    async def close(self) -> None:
        """Close the connection pool (idempotent)."""
        stack, self._stack = self._stack, None
        self._client = self._presigner = None
        if stack is not None:
            await stack.aclose()

    @property
    def client(self) -> Any:
        """The underlying aiobotocore S3 client (for calls this class does not wrap)."""
        if self._client is None:
            raise StorageError("Storage is not open: use 'async with Storage(...)' first")
        return self._client

    # -- errors --------------------------------------------------------------------

    def _error(self, exc: Exception, action: str, key: str | None = None) -> Exception:
        where = f"s3://{self.bucket}/{key}" if key is not None else f"s3://{self.bucket}"
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", "")) or str(
                exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
            )
            message = err.get("Message") or code
            if code in _NOT_FOUND_CODES:
                what = "bucket" if code == "NoSuchBucket" else (
                    "multipart upload" if code == "NoSuchUpload" else "object"
                )
                return NotFoundError(f"{action} {where}: {what} not found ({code})")
            return StorageError(f"{action} {where} refused by {self.endpoint}: {code}: {message}")
        if isinstance(exc, (BotoCoreError, OSError, asyncio.TimeoutError)):
            return StorageError(f"{action} {where}: S3 at {self.endpoint} unreachable: {exc}")
        return exc

    @contextlib.asynccontextmanager
    async def _translate(self, action: str, key: str | None = None) -> AsyncIterator[None]:
        try:
            yield
        except (TimeoutError, ClientError, BotoCoreError, OSError) as exc:
            if isinstance(exc, (NotFoundError, StorageError)):
                raise
            raise self._error(exc, action, key) from exc

    # -- bucket --------------------------------------------------------------------

    async def ensure_bucket(self) -> bool:
        """Create the bucket if it does not exist and write the readiness probe object
        (:data:`~cascade.platform.keys.READY_PROBE_KEY`) when it is missing; True when
        this call created the bucket."""
        created = await self._create_bucket()
        if created or await self.head(keys.READY_PROBE_KEY) is None:
            await self.put_bytes(keys.READY_PROBE_KEY, keys.READY_PROBE_BODY)
        return created

    async def _create_bucket(self) -> bool:
        async with self._translate("create bucket"):
            try:
                await self.client.head_bucket(Bucket=self.bucket)
                return False
            except ClientError as exc:
                if not isinstance(self._error(exc, "head"), NotFoundError):
                    raise
            try:
                await self.client.create_bucket(Bucket=self.bucket)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    return False
                raise
            return True

    async def ping(self, timeout: float = 5.0) -> None:
        """Check that S3 answers, the bucket exists and objects can be read back.

        Reads the readiness probe object when :meth:`ensure_bucket` wrote one: after a
        restart an S3 gateway (SeaweedFS's) answers for the bucket before its volume
        server serves data, and reads in that window fail with InternalError. Raises
        StorageError/NotFoundError (NotFoundError: no bucket; a missing probe object
        only means nobody wrote it, and the bucket answer stands).
        """
        async with self._translate("ping"):
            try:
                await asyncio.wait_for(self._ping(), timeout)
            except TimeoutError as exc:
                raise StorageError(
                    f"ping s3://{self.bucket}: S3 at {self.endpoint} did not answer "
                    f"within {timeout} s"
                ) from exc

    async def _ping(self) -> None:
        await self.client.head_bucket(Bucket=self.bucket)
        try:
            resp = await self.client.get_object(Bucket=self.bucket, Key=keys.READY_PROBE_KEY)
        except ClientError as exc:
            if isinstance(self._error(exc, "get", keys.READY_PROBE_KEY), NotFoundError):
                return
            raise
        async with resp["Body"] as body:
            await body.read()

    # -- reads ---------------------------------------------------------------------

    async def head(self, key: str) -> ObjectInfo | None:
        """Metadata of ``key``, or None when it does not exist."""
        _check_key(key)
        async with self._translate("head", key):
            try:
                resp = await self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if isinstance(self._error(exc, "head", key), NotFoundError):
                    return None
                raise
        return ObjectInfo(
            key=key,
            size=int(resp["ContentLength"]),
            etag=_strip_etag(resp.get("ETag")),
            last_modified=resp["LastModified"],
        )

    async def exists(self, key: str) -> bool:
        """True when ``key`` exists."""
        return await self.head(key) is not None

    async def get_stream(
        self,
        key: str,
        chunk: int = DEFAULT_CHUNK,
        *,
        start: int | None = None,
        end: int | None = None,
    ) -> AsyncIterator[bytes]:
        """Yield the object's bytes in chunks of at most ``chunk`` bytes.

        Never holds more than one chunk in memory. ``start``/``end`` (inclusive)
        select a byte range. Raises NotFoundError when the key is missing.
        """
        _check_key(key)
        if chunk <= 0:
            raise ValidationError(f"chunk must be positive, got {chunk}", field="chunk")
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start is not None or end is not None:
            params["Range"] = f"bytes={start or 0}-{'' if end is None else end}"
        async with self._translate("get", key):
            resp = await self.client.get_object(**params)
            async with resp["Body"] as body:
                async for piece in body.iter_chunks(chunk):
                    yield piece

    async def get_bytes(self, key: str, max_bytes: int = 16 * MiB) -> bytes:
        """The whole object, for small objects; TooLargeError above ``max_bytes``."""
        _check_key(key)
        async with self._translate("get", key):
            resp = await self.client.get_object(Bucket=self.bucket, Key=key)
            async with resp["Body"] as body:
                size = int(resp.get("ContentLength") or 0)
                if size > max_bytes:
                    raise TooLargeError(f"s3://{self.bucket}/{key}", size, max_bytes)
                buf = bytearray()
                async for piece in body.iter_chunks(DEFAULT_CHUNK):
                    buf += piece
                    if len(buf) > max_bytes:
                        raise TooLargeError(f"s3://{self.bucket}/{key}", len(buf), max_bytes)
        return bytes(buf)

    async def list(self, prefix: str = "", *, page_size: int = 1000) -> AsyncIterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order, page by page."""
        if not 1 <= page_size <= 1000:
            raise ValidationError(
                f"page size must be between 1 and 1000, got {page_size}", field="page_size"
            )
        token: str | None = None
        while True:
            params: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": prefix,
                "MaxKeys": page_size,
            }
            if token:
                params["ContinuationToken"] = token
            async with self._translate("list", prefix + "*"):
                page = await self.client.list_objects_v2(**params)
            for item in page.get("Contents", ()):
                yield ObjectInfo(
                    key=item["Key"],
                    size=int(item["Size"]),
                    etag=_strip_etag(item.get("ETag")),
                    last_modified=item["LastModified"],
                )
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                raise StorageError(
                    f"list s3://{self.bucket}/{prefix}*: server said the listing is truncated "
                    "but sent no continuation token"
                )

    # -- writes --------------------------------------------------------------------

    async def put_bytes(
        self, key: str, data: bytes, *, content_type: str = "application/octet-stream"
    ) -> ObjectInfo:
        """Store ``data`` under ``key`` in one request."""
        _check_key(key)
        async with self._translate("put", key):
            resp = await self.client.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType=content_type
            )
        return ObjectInfo(
            key=key,
            size=len(data),
            etag=_strip_etag(resp.get("ETag")),
            last_modified=dt.datetime.now(dt.UTC),
        )

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str = "application/octet-stream",
        part_size: int | None = None,
    ) -> ObjectInfo:
        """Store an async stream of byte chunks under ``key``.

        Buffers at most one part: a stream shorter than ``part_size`` becomes
        one PUT, a longer one a multipart upload (aborted if anything fails).
        """
        _check_key(key)
        part_size = part_size or self.part_size
        if part_size < MIN_PART_SIZE:
            raise ValidationError(
                f"part size must be at least {MIN_PART_SIZE} bytes, got {part_size}",
                field="part_size",
            )
        buf = bytearray()
        iterator = aiter(chunks)
        upload_id: str | None = None
        parts: list[UploadedPart] = []
        total = 0
        try:
            async for piece in iterator:
                buf += piece
                total += len(piece)
                while len(buf) >= part_size:
                    if upload_id is None:
                        upload_id = await self.create_multipart(key, content_type=content_type)
                    if len(parts) >= MAX_PARTS:
                        raise TooLargeError(f"upload s3://{self.bucket}/{key}", total,
                                            part_size * MAX_PARTS)
                    body = bytes(buf[:part_size])
                    del buf[:part_size]
                    parts.append(await self.upload_part(key, upload_id, len(parts) + 1, body))
            if upload_id is None:
                return await self.put_bytes(key, bytes(buf), content_type=content_type)
            if buf or not parts:
                parts.append(await self.upload_part(key, upload_id, len(parts) + 1, bytes(buf)))
            etag = await self.complete_multipart(key, upload_id, parts)
        except BaseException:
            if upload_id is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.abort_multipart(key, upload_id))
            raise
        return ObjectInfo(
            key=key, size=total, etag=etag, last_modified=dt.datetime.now(dt.UTC)
        )

    async def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        content_type: str = "application/octet-stream",
        part_size: int | None = None,
    ) -> ObjectInfo:
        """Upload a local file, multipart when it is larger than one part."""
        path = Path(path)
        if not path.is_file():
            raise NotFoundError(f"upload to s3://{self.bucket}/{key}: no such file {path}")
        read_size = part_size or self.part_size

        async def chunks() -> AsyncIterator[bytes]:
            fh = await asyncio.to_thread(path.open, "rb")
            try:
                while piece := await asyncio.to_thread(fh.read, read_size):
                    yield piece
            finally:
                await asyncio.to_thread(fh.close)

        return await self.put_stream(key, chunks(), content_type=content_type, part_size=part_size)

    async def delete(self, key: str) -> None:
        """Delete ``key`` (no error when it is already gone)."""
        _check_key(key)
        async with self._translate("delete", key):
            await self.client.delete_object(Bucket=self.bucket, Key=key)

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many were deleted."""
        if not prefix:
            raise ValidationError(
                "refusing to delete with an empty prefix (that is the whole bucket)",
                field="prefix",
            )
        deleted = 0
        batch: list[str] = []
        async for info in self.list(prefix):
            batch.append(info.key)
            if len(batch) == 1000:
                deleted += await self._delete_batch(batch)
                batch = []
        if batch:
            deleted += await self._delete_batch(batch)
        return deleted

    async def _delete_batch(self, keys: Iterable[str]) -> int:
        objects = [{"Key": k} for k in keys]
        async with self._translate("delete", objects[0]["Key"] if objects else None):
            resp = await self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
            )
        errors = resp.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageError(
                f"delete s3://{self.bucket}/{first.get('Key')}: {first.get('Code')}: "
                f"{first.get('Message')} ({len(errors)} of {len(objects)} keys failed)"
            )
        return len(objects)

    # -- multipart -----------------------------------------------------------------

    async def create_multipart(
        self, key: str, *, content_type: str = "application/octet-stream"
    ) -> str:
        """Start a multipart upload; returns its upload id."""
        _check_key(key)
        async with self._translate("start multipart upload", key):
            resp = await self.client.create_multipart_upload(
                Bucket=self.bucket, Key=key, ContentType=content_type
            )
        return str(resp["UploadId"])

    async def upload_part(
        self, key: str, upload_id: str, part_number: int, data: bytes
    ) -> UploadedPart:
        """Upload one part (all but the last at least 5 MiB)."""
        _check_key(key)
        _check_part_number(part_number)
        async with self._translate(f"upload part {part_number}", key):
            resp = await self.client.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=part_number, Body=data
            )
        return UploadedPart(part_number=part_number, etag=str(resp["ETag"]))

    async def complete_multipart(
        self, key: str, upload_id: str, parts: Iterable[UploadedPart]
    ) -> str:
        """Assemble the uploaded parts into the object; returns its ETag."""
        _check_key(key)
        ordered = sorted(parts, key=lambda p: p.part_number)
        if not ordered:
            raise ValidationError("a multipart upload needs at least one part", field="parts")
        numbers = [p.part_number for p in ordered]
        if len(set(numbers)) != len(numbers):
            raise ValidationError(f"duplicate part numbers in {numbers}", field="parts")
        async with self._translate("complete multipart upload", key):
            resp = await self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={
                    "Parts": [{"PartNumber": p.part_number, "ETag": p.etag} for p in ordered]
                },
            )
        return _strip_etag(resp.get("ETag"))

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        """Abandon a multipart upload and free its parts."""
        _check_key(key)
        async with self._translate("abort multipart upload", key):
            await self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id
            )

    async def list_parts(self, key: str, upload_id: str) -> builtins.list[UploadedPart]:
        """Parts uploaded so far (for instance through presigned part URLs)."""
        _check_key(key)
        parts: builtins.list[UploadedPart] = []
        marker = 0
        while True:
            async with self._translate("list parts", key):
                resp = await self.client.list_parts(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker
                )
            parts.extend(
                UploadedPart(part_number=int(p["PartNumber"]), etag=str(p["ETag"]))
                for p in resp.get("Parts", ())
            )
            if not resp.get("IsTruncated"):
                return parts
            marker = int(resp["NextPartNumberMarker"])

    # -- presigned URLs ------------------------------------------------------------

    async def _presign(self, method: str, params: dict[str, Any], ttl: int) -> str:
        if self._presigner is None:
            raise StorageError("Storage is not open: use 'async with Storage(...)' first")
        async with self._translate(f"presign {method}", params.get("Key")):
            url = await self._presigner.generate_presigned_url(
                method, Params={"Bucket": self.bucket, **params}, ExpiresIn=_check_ttl(ttl)
            )
        return str(url)

    async def presign_get(self, key: str, ttl: int = 900) -> str:
        """A URL that lets anyone GET ``key`` for ``ttl`` seconds."""
        return await self._presign("get_object", {"Key": _check_key(key)}, ttl)

    async def presign_put(self, key: str, ttl: int = 900, *, size: int | None = None) -> str:
        """A URL that lets anyone PUT ``key`` (one request, up to 5 GiB) for ``ttl`` seconds.

        With ``size`` the Content-Length is signed: a body of any other length is refused
        by S3 servers that check signed headers (AWS, MinIO, SeaweedFS).
        """
        params: dict[str, Any] = {"Key": _check_key(key)}
        if size is not None:
            params["ContentLength"] = size
        return await self._presign("put_object", params, ttl)

    async def presign_upload_part(
        self, key: str, upload_id: str, part_number: int, ttl: int = 900, *,
        size: int | None = None,
    ) -> str:
        """A URL that lets anyone PUT one part of an open multipart upload (``size``: signed)."""
        params: dict[str, Any] = {
            "Key": _check_key(key),
            "UploadId": upload_id,
            "PartNumber": _check_part_number(part_number),
        }
        if size is not None:
            params["ContentLength"] = size
        return await self._presign("upload_part", params, ttl)
