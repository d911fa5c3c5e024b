"""The prepare service's bundle jobs: one per finished unit, a redelivered unit's dropped.

JetStream stores one message per de-dup id (``Nats-Msg-Id``) within its window. A trace of two
timeline files changes no kernel count when each is prepared or fails: were the id made of the
counts alone, the second file's job would be a duplicate of the first one's, dropped, and the
trace would wait for ingest's reconcile (about 20 s in `cascade up`) to be bundled.
"""

from __future__ import annotations

from typing import Any

from cascade.platform import subjects
from cascade.platform.messages.jobs import BundleJob
from cascade.platform.state import TraceRecord
from services.prepare.service import PrepareService


class _Bus:
    def __init__(self) -> None:
        self.published: list[tuple[str, Any, str | None]] = []

    async def publish(self, subject: str, message: Any, *, msg_id: str | None = None,
                      **_: Any) -> None:
        self.published.append((subject, message, msg_id))


class _Store:
    def __init__(self, record: TraceRecord) -> None:
        self.record = record

    async def get(self, tid: str) -> TraceRecord | None:
        return self.record if tid == self.record.id else None


def _service(record: TraceRecord) -> tuple[PrepareService, _Bus]:
    svc = PrepareService.__new__(PrepareService)  # only the bus and the store are used
    bus = _Bus()
    svc.bus = bus  # type: ignore[assignment]
    svc.store = _Store(record)  # type: ignore[assignment]
    return svc, bus


async def test_each_timeline_unit_queues_its_own_bundle_job() -> None:
    record = TraceRecord(id="tr-two", name="two timelines", source_gpu="SM90_H100", kind="timeline",
                         state="preparing", sealed=True, sealed_at=1000.0)
    svc, bus = _service(record)
    await svc._maybe_bundle("tr-two", True, "timeline.jsonl:etag-1")
    await svc._maybe_bundle("tr-two", True, "timeline.pt.trace.json:etag-2")  # counts unchanged
    await svc._maybe_bundle("tr-two", True, "timeline.jsonl:etag-1")  # a redelivery
    await svc._maybe_bundle("tr-two", True, "timeline.jsonl:etag-3")  # the file uploaded again
    assert all(s == subjects.JOB_PREPARE and isinstance(m, BundleJob) and m.trace_id == "tr-two"
               for s, m, _ in bus.published)
    ids = [msg_id for _, _, msg_id in bus.published]
    assert len(ids) == 4 and ids[0] == ids[2]
    assert len({ids[0], ids[1], ids[3]}) == 3


async def test_no_bundle_job_before_the_seal_or_after_ready() -> None:
    for record in (TraceRecord(id="t", name="t", source_gpu="SM90_H100", state="receiving"),
                   TraceRecord(id="t", name="t", source_gpu="SM90_H100", state="ready",
                               sealed=True, sealed_at=1.0)):
        svc, bus = _service(record)
        await svc._maybe_bundle("t", True, "timeline.jsonl:e")
        assert bus.published == []
