"""S3 event notifications as MinIO publishes them to NATS, for the tests of ingest's event
parsing (``tests/unit/test_ingest_rules.py``) and its S3-event intake path
(``tests/integration/test_ingest.py``)."""

from __future__ import annotations

import json
from urllib.parse import quote_plus


def minio_event(bucket: str, key: str, size: int, etag: str, name: str = "s3:ObjectCreated:Put") -> bytes:
    """One notification exactly as MinIO publishes it to NATS."""
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
