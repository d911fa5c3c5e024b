"""Paged newest-first lists and the trace index's bookkeeping, without servers."""

from __future__ import annotations

import random

import msgspec
import pytest

from cascade.errors import ValidationError
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import FileRecord, UnitRecord
from services.api.paging import NewestFirst, PageRequest, decode_cursor, encode_cursor, record_key
from services.api.trace_index import TraceIndex


def _records(n: int, seed: int = 0) -> list[TraceRecord]:
    rng = random.Random(seed)
    states = ("receiving", "preparing", "ready", "failed")
    return [TraceRecord(id=f"tr-{i:04d}", name=f"trace {i}", source_gpu="SM90_H100",
                        state=states[i % 4], created_at=float(rng.randrange(0, 50)))  # type: ignore[arg-type]
            for i in range(n)]


def _walk(index: NewestFirst[TraceRecord], **want: object) -> list[TraceRecord]:
    out: list[TraceRecord] = []
    cursor = None
    while True:
        page = index.page(PageRequest(cursor=cursor, **want))  # type: ignore[arg-type]
        out += page.items
        if page.next_cursor is None:
            return out
        cursor = decode_cursor(page.next_cursor)


def test_pages_walk_every_record_once_newest_first_with_ties() -> None:
    index: NewestFirst[TraceRecord] = NewestFirst(created=lambda r: r.created_at,
                                                  state=lambda r: r.state, name=lambda r: r.name)
    records = _records(257)
    for r in records:
        index.put(r.id, r)
    want = sorted(records, key=lambda r: (r.created_at, r.id), reverse=True)
    assert _walk(index, limit=10) == want
    assert _walk(index, limit=1000) == want
    assert _walk(index, limit=7, state="ready") == [r for r in want if r.state == "ready"]
    assert _walk(index, limit=3, name="TRACE 1") == [r for r in want if "trace 1" in r.name]
    assert index.page(PageRequest(limit=5, name="trace 1")).total == sum(
        "trace 1" in r.name for r in records)


def test_a_page_does_not_shift_when_records_change_meanwhile() -> None:
    index: NewestFirst[TraceRecord] = NewestFirst(created=lambda r: r.created_at,
                                                  state=lambda r: r.state, name=lambda r: r.name)
    records = _records(30)
    for r in records:
        index.put(r.id, r)
    first = index.page(PageRequest(limit=10))
    assert first.next_cursor is not None
    newer = msgspec.structs.replace(records[0], id="tr-new", created_at=1e9)
    index.put(newer.id, newer)
    index.put(records[3].id, msgspec.structs.replace(records[3], state="ready"))
    index.remove(first.items[-1].id)
    rest = index.page(PageRequest(limit=100, cursor=decode_cursor(first.next_cursor)))
    seen = {r.id for r in first.items} | {r.id for r in rest.items}
    assert "tr-new" not in {r.id for r in rest.items}
    assert seen == {r.id for r in records}


def test_cursors_round_trip_and_bad_ones_name_the_field() -> None:
    key = record_key(1234.5678901, "tr-abc")
    assert decode_cursor(encode_cursor(key)) == key
    for bad in ("", "x.tr", "12", "12.", "-1.a", "1.a b", "1" * 21 + ".a"):
        with pytest.raises(ValidationError) as err:
            decode_cursor(bad)
        assert err.value.field == "cursor"  # type: ignore[attr-defined]


def _encode(value: object) -> bytes:
    return msgspec.json.encode(value)


def test_trace_index_keeps_details_drops_rows_and_forgets_what_went() -> None:
    index = TraceIndex(bus=None)  # type: ignore[arg-type]
    record = TraceRecord(id="tr-1", name="one", source_gpu="SM90_H100")
    index._apply("tr-1", "PUT", _encode(record), 5)
    index._apply("tr-1.files.kernel-1=2Etraceg", "PUT", _encode(FileRecord(
        name="kernel-1.traceg", key="k", size=1, etag="e", kind="kernel")), 6)
    index._apply("tr-1.units.kernel-1", "PUT", _encode(UnitRecord(
        unit="kernel-1", kernel_id=1, row={"name": "k", "big": list(range(100))})), 7)
    index._apply("tr-2", "PUT", _encode(msgspec.structs.replace(record, id="tr-2")), 8)
    assert [u.unit for u in index.units("tr-1")] == ["kernel-1"]
    assert not hasattr(index.units("tr-1")[0], "row")
    assert [f.name for f in index.files("tr-1")] == ["kernel-1.traceg"]
    assert index._applied == 8
    # a watch started again sees tr-1 and its file only: tr-2 and the unit were deleted meanwhile
    index._forget_unseen({"tr-1", "tr-1.files.kernel-1=2Etraceg"})
    assert index.get("tr-2") is None and index.get("tr-1") is not None
    assert index.units("tr-1") == [] and len(index.files("tr-1")) == 1
    index._apply("tr-1", "DEL", None, 9)
    assert index.get("tr-1") is None and index.files("tr-1") == []
