"""S3 bucket notifications as MinIO publishes them to NATS (AWS record format).

MinIO sends one JSON document per event::

    {"EventName": "s3:ObjectCreated:Put", "Key": "bucket/traces/t1/raw/kernel-1.traceg",
     "Records": [{"eventName": "s3:ObjectCreated:Put",
                  "s3": {"bucket": {"name": "bucket"},
                         "object": {"key": "traces%2Ft1%2Fraw%2Fkernel-1.traceg",
                                    "size": 123, "eTag": "..."}}}]}

Keys in records are URL-encoded with ``+`` for spaces; event names may or
may not carry the ``s3:`` prefix. :func:`created_objects` yields the
``(bucket, key, size, etag)`` of every object-created record.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from cascade.platform.keys import decode_event_key


class S3ObjectInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The ``s3.object`` part of a record."""

    key: str = ""
    size: int = 0
    etag: str = msgspec.field(default="", name="eTag")


class S3BucketInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The ``s3.bucket`` part of a record."""

    name: str = ""


class S3Entity(msgspec.Struct, frozen=True, kw_only=True):
    """The ``s3`` part of a record."""

    bucket: S3BucketInfo = S3BucketInfo()
    object: S3ObjectInfo = S3ObjectInfo()


class S3Record(msgspec.Struct, frozen=True, kw_only=True):
    """One AWS-format event record."""

    event_name: str = msgspec.field(default="", name="eventName")
    s3: S3Entity = S3Entity()


class S3Notification(msgspec.Struct, frozen=True, kw_only=True):
    """One notification message on ``cascade.s3.events``."""

    event_name: str = msgspec.field(default="", name="EventName")
    key: str = msgspec.field(default="", name="Key")
    records: list[S3Record] = msgspec.field(default_factory=list, name="Records")


def event_kind(name: str) -> str:
    """Event name without the optional ``s3:`` prefix (``ObjectCreated:Put``)."""
    return name.removeprefix("s3:")


def created_objects(note: S3Notification) -> Iterator[tuple[str, str, int, str]]:
    """``(bucket, key, size, etag)`` of each ObjectCreated record (keys URL-decoded)."""
    for record in note.records:
        if not event_kind(record.event_name or note.event_name).startswith("ObjectCreated"):
            continue
        obj = record.s3.object
        yield (record.s3.bucket.name, decode_event_key(obj.key), obj.size, obj.etag.strip('"'))
