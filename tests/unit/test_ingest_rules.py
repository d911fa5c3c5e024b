"""Fast checks of the ingest rules: accepted names, S3 keys and event notifications, KV tokens,
completeness."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascade.errors import ValidationError
from cascade.ids import check_token
from cascade.platform.keys import decode_event_key, kv_token, part_key, split_raw_key
from cascade.platform.state import TraceRecord
from cascade.platform.tracestore import ExpectedSet, FileRecord, UnitRecord, assess
from cascade.traces.files import check_name, kernel_stems
from services.ingest.s3events import S3Notification, created_objects
from tests.support.s3_events import minio_event


@pytest.mark.parametrize(("name", "kind", "unit", "kid"), [
    ("kernel-1.trace", "kernel", "kernel-1", 1),
    ("kernel-42.traceg.xz", "kernel", "kernel-42", 42),
    ("kernel-3-ctx_0x7f00ab.trace.xz", "kernel", "kernel-3-ctx_0x7f00ab", 3),
    ("kernelslist", "kernelslist", "", None),
    ("kernelslist.g", "kernelslist", "", None),
    ("stats.csv", "stats", "", None),
    ("host_1.1700.pt.trace.json", "timeline", "host_1.1700.pt.trace.json", None),
    ("trace.json.gz", "timeline", "trace.json.gz", None),
    ("profile.sqlite", "timeline", "profile.sqlite", None),
    ("timeline.csv", "timeline", "timeline.csv", None),
])
def test_accepted_names(name: str, kind: str, unit: str, kid: int | None) -> None:
    tf = check_name(name)
    assert (tf.kind, tf.unit, tf.kernel_id) == (kind, unit, kid)


@pytest.mark.parametrize("name", [
    "", "..", "../kernel-1.trace", "a/kernel-1.trace", "a\\b.json", "/abs.json", "~x.json",
    "kernel-1.trace\x00", ".kernel-1.trace", "report.nsys-rep", "kernel-x.trace", "kernel-1.trace.gz",
    "notes.txt", "a b.json", "x" * 300 + ".json",
    # a trailing newline once slipped through `$` (found by `cascade bench hostile`)
    "kernel-1.traceg\n", "kernelslist.g\n", "timeline.json\n",
])
def test_refused_names(name: str) -> None:
    with pytest.raises(ValidationError) as err:
        check_name(name, field="files[0].name")
    assert err.value.field == "files[0].name"


@given(st.text(min_size=1, max_size=40))
def test_no_accepted_name_escapes_its_prefix(name: str) -> None:
    try:
        tf = check_name(name)
    except ValidationError:
        return
    assert "/" not in tf.name and "\\" not in tf.name and ".." not in tf.name
    assert not tf.name.startswith(".") and "\x00" not in tf.name
    assert split_raw_key(f"traces/t1/raw/{tf.name}") == ("t1", tf.name)
    assert check_token(kv_token(tf.name)) == kv_token(tf.name)


def test_keys_outside_raw_are_refused() -> None:
    for key in ("traces/t1/parts/kernel-1.trace", "traces/t1/raw/sub/kernel-1.trace",
                "bundles/t1/raw/kernel-1.trace", "traces/t.1/raw/kernel-1.trace", "traces/t1/raw/"):
        with pytest.raises(ValidationError):
            split_raw_key(key)
    assert part_key("t1", "kernel-1", "abc-2") == "traces/t1/parts/kernel-1/abc-2.msgpack"


def test_event_parsing_handles_prefixes_and_url_encoding() -> None:
    import msgspec

    note = msgspec.json.decode(minio_event("b", "traces/t1/raw/my file+x.json", 5, "abc"),
                               type=S3Notification)
    assert list(created_objects(note)) == [("b", "traces/t1/raw/my file+x.json", 5, "abc")]
    removed = msgspec.json.decode(minio_event("b", "k", 1, "e", "s3:ObjectRemoved:Delete"),
                                  type=S3Notification)
    assert list(created_objects(removed)) == []
    assert decode_event_key("traces%2Ft1%2Fraw%2Fa+b.csv") == "traces/t1/raw/a b.csv"


def test_kernelslist_stems_skip_copies() -> None:
    text = "MemcpyHtoD,0x00007f,400\nkernel-1.traceg\n\n./kernel-2-ctx_0x1.traceg.xz\nkernel-3.trace\n"
    assert kernel_stems(text) == ["kernel-1", "kernel-2-ctx_0x1", "kernel-3"]


def _file(name: str, etag: str = "e1") -> FileRecord:
    tf = check_name(name)
    return FileRecord(name=name, key=f"traces/t/raw/{name}", size=10, etag=etag, kind=tf.kind,
                      unit=tf.unit)


def _unit(unit: str, state: str, etag: str = "e1", kid: int | None = None) -> UnitRecord:
    return UnitRecord(unit=unit, state=state, etag=etag, kernel_id=kid)  # type: ignore[arg-type]


def test_assess_counts_only_current_etags_and_lists_missing() -> None:
    record = TraceRecord(id="t", name="t", source_gpu="SM90_H100", sealed=True)
    files = [_file("kernel-1.traceg"), _file("kernel-2.traceg", "new"), _file("kernelslist.g")]
    units = [_unit("kernel-1", "prepared", kid=1), _unit("kernel-2", "prepared", "old", kid=2)]
    expected = ExpectedSet(files=["kernel-1.traceg", "kernel-2.traceg", "kernel-3.traceg"],
                           source="kernelslist")
    a = assess(record, expected, files, units)
    assert a.prepared == ["kernel-1"] and a.pending == ["kernel-2"]
    assert a.missing == ["kernel-3.traceg"] and not a.complete
    assert a.kernels_total == 2 and a.kernels_prepared == 1
    done = assess(record, None, files[:1], units[:1])
    assert done.complete
    failed = assess(record, None, files[:1], [_unit("kernel-1", "failed", kid=1)])
    assert failed.failed == ["kernel-1"] and not failed.complete
    counted = assess(record, ExpectedSet(kernels=3), files[:1], units[:1])
    assert counted.missing == ["2 of 3 kernel files"]
    empty = assess(record, None, [], [])
    assert empty.missing == ["at least one kernel trace file"] and not empty.complete


@pytest.mark.parametrize("token", ["abc\n", "a.b", "a b", "", "a*"])
def test_tokens_refuse_separators_and_a_trailing_newline(token: str) -> None:
    with pytest.raises(ValidationError):
        check_token(token)
