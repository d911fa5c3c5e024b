"""The Chrome-trace (PyTorch / Kineto) reader under hostile input: bounded strings, values,
depth and event counts, and wrong JSON types, each a TraceFormatError naming the file, the
line, the event and the field (the CLI on such input: tests/integration/test_json_limits.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from cascade.errors import TraceFormatError
from cascade.traces.chrome import read_chrome_trace
from cascade.traces.jsonstream import JsonLimits, iter_chrome_json, use_limits
from cascade.traces.timeline import import_timeline
from tests.support.hostile_json import KERNEL, MiB, gzip_bomb


@pytest.mark.parametrize(("where", "prefix", "suffix"), [
    ("kernel name", b'{"traceEvents": [\n{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "name": ',
     b"}]}"),
    ("args value", (b'{"traceEvents": [\n{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, '
                    b'"args": {"Input type": ['), b"]}}]}"),
    ("top-level key", b'{"traceEvents": [],\n', b': 1}'),
    ("deviceProperties", b'{"traceEvents": [],\n"deviceProperties": [{"name": ', b"}]}"),
    ("array form", b'[\n{"ph": "X", "cat": "kernel", "name": ', b"}"),
])
def test_huge_string_in_a_gzip_is_refused_while_it_is_read(tmp_path: Path, where: str,
                                                            prefix: bytes, suffix: bytes) -> None:
    path = gzip_bomb(tmp_path / "bomb.json.gz", prefix, 64, suffix)
    assert path.stat().st_size < 2 * MiB  # 64 MiB of JSON text inside
    with pytest.raises(TraceFormatError) as err:
        import_timeline(path)
    exc = err.value
    assert exc.file == str(path) and exc.line == 2, where
    assert "JSON strings of at most 1,048,576 characters" in exc.expected
    assert "CASCADE_TRACE_JSON_MAX_STRING_CHARS" in exc.expected


def test_limits_come_from_use_limits_and_settings(tmp_path: Path) -> None:
    from cascade.platform.settings import load_settings

    body = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1,
                                        "name": "k" * 500}] * 5}).encode()
    assert len(read_chrome_trace(json.loads(body)).table) == 5
    settings = load_settings({"CASCADE_TRACE_JSON_MAX_STRING_CHARS": "100",
                              "CASCADE_TRACE_JSON_MAX_EVENTS": "3"})
    limits = JsonLimits.from_settings(settings)
    assert (limits.max_string_chars, limits.max_events) == (100, 3)
    p = tmp_path / "t.json"
    p.write_bytes(body)
    with use_limits(limits), pytest.raises(TraceFormatError, match="at most 100 characters"):
        import_timeline(p)
    with use_limits(JsonLimits(max_events=3)), pytest.raises(TraceFormatError) as err:
        import_timeline(p)
    assert "at most 3 trace events (CASCADE_TRACE_JSON_MAX_EVENTS)" in err.value.expected
    assert len(import_timeline(p)) == 5  # outside the block: the defaults again


def test_value_size_and_nesting_depth_are_bounded() -> None:
    deep = b'{"traceEvents": [{"ph": "X", "args": {"x": ' + b"[" * 80 + b"]" * 80 + b"}}]}"
    with pytest.raises(TraceFormatError) as err:
        list(iter_chrome_json(io.BytesIO(deep), name="deep.json"))
    assert "nested at most 64 levels deep (CASCADE_TRACE_JSON_MAX_DEPTH)" in err.value.expected
    # brackets inside strings do not count, and a deep-but-allowed value passes
    quoted = b'{"traceEvents": [{"name": "' + b"[" * 200 + b'", "a": [[[[1]]]]}]}'
    assert len(list(iter_chrome_json(io.BytesIO(quoted)))) == 1
    with pytest.raises(TraceFormatError, match="nested at most 3 levels"):
        list(iter_chrome_json(io.BytesIO(quoted), limits=JsonLimits(max_depth=3)))
    # a 100,000-deep bomb (past the C scanner's recursion limit) is the same clean error
    bomb = b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    with pytest.raises(TraceFormatError, match="nested at most"):
        list(iter_chrome_json(io.BytesIO(bomb)))
    many = b'{"traceEvents": [{"args": [' + b",".join([b"1"] * 20_000) + b"]}]}"
    with pytest.raises(TraceFormatError) as err:
        list(iter_chrome_json(io.BytesIO(many), read_bytes=1024,
                              limits=JsonLimits(max_value_bytes=10_000)))
    assert "at most 10,000 bytes (CASCADE_TRACE_JSON_MAX_VALUE_BYTES)" in err.value.expected


_CPU_OP: dict[str, Any] = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 20,
                           "args": {"External id": 3, "Input Dims": [[4, 4], [4, 4]],
                                    "Input type": ["float", "float"]}}


@pytest.mark.parametrize(("event", "field", "expected", "got"), [
    ({**KERNEL, "ts": "soon"}, "ts", "a numeric", "str 'soon'"),
    ({**KERNEL, "ts": None}, "ts", "a numeric", "NoneType None"),
    ({**KERNEL, "dur": [5]}, "dur", "a non-negative numeric", "list [5]"),
    ({**KERNEL, "dur": {"us": 5}}, "dur", "a non-negative numeric", "dict {'us': 5}"),
    ({**KERNEL, "name": 42}, "name", "a string", "int 42"),
    ({**KERNEL, "name": ["sgemm"]}, "name", "a string", "list ['sgemm']"),
    ({**KERNEL, "args": "grid=1,2,3"}, "args", "a JSON object", "str 'grid=1,2,3'"),
    ({**KERNEL, "args": [1, 2]}, "args", "a JSON object", "list [1, 2]"),
    ({**KERNEL, "args": {"grid": "1x2x3"}}, "args.grid", "a JSON array", "str '1x2x3'"),
    ({**KERNEL, "args": {"block": [32, "1", 1]}}, "args.block", "an array of numbers",
     "list [32, '1', 1]"),
    ({**KERNEL, "args": {"correlation": "7"}}, "args.correlation", "a finite number", "str '7'"),
    ({**KERNEL, "args": {"registers per thread": True}}, "args.registers per thread",
     "a finite number", "bool True"),
    ({**_CPU_OP, "args": {"Input Dims": "4x4"}}, "args.Input Dims", "a JSON array", "str '4x4'"),
    ({**_CPU_OP, "args": {"External id": [3]}}, "args.External id", "a finite number", "list [3]"),
    ({**_CPU_OP, "ts": True}, "ts", "a numeric", "bool True"),
    ({"ph": "X", "cat": "cuda_runtime", "name": {"n": 1}, "ts": 1}, "name", "a string",
     "dict {'n': 1}"),
])
def test_wrong_json_types_name_file_line_event_and_field(tmp_path: Path, event: dict[str, Any],
                                                         field: str, expected: str,
                                                         got: str) -> None:
    doc = {"traceEvents": [_CPU_OP, KERNEL, event]}
    path = tmp_path / "types.json"
    path.write_text(json.dumps(doc, indent=None).replace("}, {", "},\n{"))
    with pytest.raises(TraceFormatError) as err:
        import_timeline(path)
    exc = err.value
    cat = event["cat"]
    assert exc.file == str(path) and exc.line == 3
    assert exc.expected == f"{expected} {field!r} on the {cat!r} event #3"
    assert exc.got == got
    assert str(exc).startswith(f"{path}:3: expected {expected} {field!r}")


def test_well_typed_events_still_read(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"traceEvents": [_CPU_OP, KERNEL,
                                                {"ph": "X", "cat": "python_function",
                                                 "name": 5, "args": "x", "ts": "?"}]}))
    table = import_timeline(path)
    assert list(table["name"]) == ["sgemm"] and int(table["grid_y"][0]) == 2


def test_too_long_device_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"traceEvents": [KERNEL],
                                "deviceProperties": [{"id": 0, "name": "H" * 5000}]}))
    with pytest.raises(TraceFormatError, match="GPU name of at most 256 characters"):
        import_timeline(path)


@pytest.mark.parametrize(("line", "expected", "got"), [
    ('{"name": "k", "duration_ns": "x"}', "'duration_ns' as a number", "str 'x'"),
    ('{"name": "k", "grid": [1, "a", 2]}', "'grid_y' as a number", "str 'a'"),
    ('{"name": "k", "regs": true}', "'regs' as a number", "bool True"),
    ('{"name": "k", "op": 5}', "'op' as a string", "int 5"),
])
def test_jsonl_wrong_types_name_line_and_field(tmp_path: Path, line: str, expected: str,
                                               got: str) -> None:
    from cascade.traces.cascadetimeline import import_cascade_jsonl

    path = tmp_path / "k.jsonl"
    path.write_text('{"name": "ok", "duration_ns": 5}\n' + line + "\n")
    with pytest.raises(TraceFormatError) as err:
        import_cascade_jsonl(path)
    assert (err.value.file, err.value.line, err.value.expected, err.value.got) == (
        str(path), 2, expected, got)


def test_jsonl_huge_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    from cascade.traces.cascadetimeline import import_cascade_jsonl

    path = tmp_path / "k.jsonl"
    with path.open("w") as fh:
        fh.write('{"name": "ok"}\n{"name": "')
        fh.write("A" * (3 * MiB))
        fh.write('"}\n')
    with use_limits(JsonLimits(max_value_bytes=MiB)), pytest.raises(TraceFormatError) as err:
        import_cascade_jsonl(path)
    assert err.value.line == 2 and "lines of at most 1,048,576 characters" in err.value.expected
