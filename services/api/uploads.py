"""Trace uploads for ``/api/traces``: presigned targets straight to S3 (multipart part URLs for
big files), assembling a multipart upload, and handing a verified object to ingest. The api
never writes trace state that ingest owns: an upload is declared (its size, when the URLs
expire) and reported as an ``UploadReported`` event; ingest records it."""

from __future__ import annotations

import asyncio
import math
import time

from cascade.errors import (
    ConflictError,
    NotFoundError,
    StorageError,
    TooLargeError,
    ValidationError,
)
from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.keys import raw_key
from cascade.platform.messages.trace import UploadReported
from cascade.platform.settings import Settings
from cascade.platform.storage import Storage, UploadedPart
from cascade.platform.tracestore import DeclaredUpload, TraceStore, declared_mismatch
from cascade.platform.uploadlimits import MAX_UPLOAD_URLS, MIN_PART_SIZE, PART_URLS_PER_FILE
from cascade.traces.files import check_name
from services.api.schemas.traces import (
    CompleteRequest,
    MultipartUpload,
    PartUrl,
    UploadedResponse,
    UploadFile,
    UploadsResponse,
    UploadTarget,
)

MiB = 1024 * 1024
#: S3 error codes of a complete-multipart call that are the client's fault, not the server's.
CLIENT_FAULTS = ("NoSuchUpload", "InvalidPart", "InvalidPartOrder", "MalformedXML",
                 "EntityTooSmall", "InvalidArgument", "InvalidRequest", "NoSuchKey")
#: Uploads declared to the trace store at once.
DECLARE_BATCH = 256


def part_size(size: int, threshold: int) -> int:
    """Part size for a multipart upload of ``size`` bytes: the threshold (at most 16 MiB,
    at least S3's 5 MiB), grown in whole MiB when the file would need over
    :data:`PART_URLS_PER_FILE` parts."""
    need = math.ceil(math.ceil(size / PART_URLS_PER_FILE) / MiB) * MiB
    return max(MIN_PART_SIZE, min(16 * MiB, threshold), need)


def upload_urls(size: int, threshold: int) -> int:
    """Presigned URLs a file of ``size`` bytes takes: one PUT below ``threshold``, else its parts."""
    if size < threshold:
        return 1
    return max(1, math.ceil(size / part_size(size, threshold)))


def unique_files(files: list[UploadFile], max_upload_bytes: int,
                 threshold: int = 64 * MiB) -> list[UploadFile]:
    """The files to upload, each name once (the first), every name and size checked (400 naming
    the file's index), and at most :data:`MAX_UPLOAD_URLS` presigned URLs in all (400 saying how
    many the request needs)."""
    seen: set[str] = set()
    unique: list[UploadFile] = []
    urls = 0
    for i, f in enumerate(files):
        check_name(f.name, field=f"files[{i}].name")
        if f.size > max_upload_bytes:
            raise ValidationError(f"{f.name} is declared as {f.size} bytes, over the limit of "
                                  f"{max_upload_bytes} bytes (max_upload_bytes)", field=f"files[{i}].size")
        if f.name in seen:
            continue
        seen.add(f.name)
        unique.append(f)
        urls += upload_urls(f.size, threshold)
    if urls > MAX_UPLOAD_URLS:
        raise ValidationError(f"these {len(unique)} files need {urls:,} upload URLs (a single PUT below "
                              f"{threshold:,} bytes, else one per part of up to {PART_URLS_PER_FILE:,} "
                              f"parts), over the {MAX_UPLOAD_URLS:,} one request may ask for: ask for "
                              "fewer files at a time", field="files")
    return unique


async def upload_targets(storage: Storage, store: TraceStore, settings: Settings, trace_id: str,
                         files: list[UploadFile]) -> UploadsResponse:
    """Declare each file to the trace store (ingest checks each arrival against it) and presign
    where it goes: one PUT below ``multipart_threshold_bytes``, else a multipart upload."""
    ttl = settings.presign_ttl_s
    put_ttl = min(settings.presign_put_ttl_s, ttl)
    threshold = settings.multipart_threshold_bytes
    now = time.time()
    for start in range(0, len(files), DECLARE_BATCH):
        await asyncio.gather(*(
            store.declare(trace_id, DeclaredUpload(name=f.name, size=f.size, issued_at=now,
                                                   expires_at=now + (put_ttl if f.size < threshold else ttl)))
            for f in files[start:start + DECLARE_BATCH]))
    targets: list[UploadTarget] = []
    for f in files:
        key = raw_key(trace_id, f.name)
        if f.size < threshold:
            targets.append(UploadTarget(name=f.name, key=key, size=f.size,
                                        url=await storage.presign_put(key, ttl=put_ttl, size=f.size)))
            continue
        size = part_size(f.size, threshold)
        count = max(1, math.ceil(f.size / size))
        upload_id = await storage.create_multipart(key)
        sizes = [min(size, f.size - (n - 1) * size) for n in range(1, count + 1)]
        parts = [
            PartUrl(part_number=n, size=sizes[n - 1],
                    url=await storage.presign_upload_part(key, upload_id, n, ttl=ttl, size=sizes[n - 1]))
            for n in range(1, count + 1)
        ]
        targets.append(UploadTarget(name=f.name, key=key, size=f.size,
                                    multipart=MultipartUpload(upload_id=upload_id, part_size=size, parts=parts)))
    shortest = put_ttl if any(t.multipart is None for t in targets) else ttl
    return UploadsResponse(trace_id=trace_id, expires_in=shortest, uploads=targets)


async def complete_multipart(storage: Storage, settings: Settings, trace_id: str,
                             body: CompleteRequest) -> tuple[str, str, int]:
    """Assemble a multipart upload from its parts (a part listed twice: the last one): its key,
    ETag and size. An upload not in progress with these parts is a 409; an object over
    ``max_upload_bytes`` is deleted (413)."""
    key = raw_key(trace_id, body.name)
    parts = {p.part_number: p for p in body.parts}
    try:
        etag = await storage.complete_multipart(
            key, body.upload_id, [UploadedPart(part_number=n, etag=parts[n].etag) for n in sorted(parts)])
    except (StorageError, NotFoundError) as exc:
        if isinstance(exc, StorageError) and not any(c in str(exc) for c in CLIENT_FAULTS):
            raise
        raise ConflictError(f"upload_id: no multipart upload of {body.name!r} in progress with "
                            f"these parts ({exc})", state="no-upload") from None
    info = await storage.head(key)
    if info is None:
        raise NotFoundError(f"s3 object {key} is missing after completing its upload")
    if info.size > settings.max_upload_bytes:
        await storage.delete(key)
        raise TooLargeError(f"{body.name}", info.size, settings.max_upload_bytes)
    return key, info.etag or etag, info.size


async def uploaded_object(storage: Storage, trace_id: str, name: str, claimed_etag: str) -> tuple[str, str, int]:
    """An object the client says it uploaded: its key, ETag and size (409 when it is not there
    yet, or stored with another ETag than ``claimed_etag``)."""
    key = raw_key(trace_id, name)
    info = await storage.head(key)
    if info is None:
        raise ConflictError(f"name: {name!r} has not been uploaded yet (no object {key})", state="not-uploaded")
    claimed = claimed_etag.strip('"')
    if claimed and claimed != info.etag:
        raise ConflictError(
            f"etag: {name!r} is stored with ETag {info.etag}, not {claimed} "
            "(the upload was replaced or did not finish)"
        )
    return key, info.etag, info.size


async def report_upload(bus: Bus, store: TraceStore, trace_id: str, name: str, key: str, etag: str,
                        size: int) -> UploadedResponse:
    """Hand a verified object to ingest (``UploadReported``); then a 409 naming both sizes when
    it is not the size its upload was declared with (ingest fails the file with the same reason)."""
    await bus.publish(
        subjects.trace_event(trace_id, "uploaded"),
        UploadReported(trace_id=trace_id, key=key, etag=etag, size=size, file=name),
        msg_id=f"uploaded:{trace_id}:{name}:{etag}",
    )
    declared = await store.declared(trace_id, name)
    why = declared_mismatch(declared, size) if declared is not None else ""
    if why:
        raise ConflictError(why, state="size-mismatch")
    return UploadedResponse(name=name, key=key, etag=etag, size=size)
