"""Streaming reader of Chrome-trace JSON documents (PyTorch profiler / Kineto), bounded memory.

A Kineto trace is one JSON object whose ``traceEvents`` array holds almost all of
its bytes. :func:`iter_chrome_json` walks the top level itself and decodes one
array element (or one small top-level value) at a time with the standard
library's C scanner, so memory stays at one read buffer plus the element being
decoded, whatever the file size. ``.gz`` files are decompressed on the fly.

Both Chrome-trace forms are accepted: the object form (``{"traceEvents": [...],
...}``) and the bare array form (``[{...}, {...}``, whose closing ``]`` is
optional by the format). Anything else raises :class:`TraceFormatError` naming
the file, the line and what was expected there; never a bare ``ValueError``.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from cascade.errors import TraceFormatError

#: Bytes read from the (decompressed) file at a time.
READ_BYTES = 1 << 20
#: Largest single JSON value (one event, or one top-level value besides traceEvents).
MAX_VALUE_BYTES = 256 << 20

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Buffer:
    """A sliding window of decoded text over a binary stream, with line accounting."""

    def __init__(self, fh: IO[bytes], fname: str, read_bytes: int) -> None:
        self.fh = fh
        self.fname = fname
        self.read_bytes = read_bytes
        self.text = ""
        self.pos = 0
        self.eof = False
        self.line_base = 1  # line number of text[0]
        self._lpos = 0  # a position in text whose line number is known: _lline
        self._lline = 1
        self.value_line = 1
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")

    def line(self, pos: int | None = None) -> int:
        """1-based line number of ``pos`` (default: the current position)."""
        p = self.pos if pos is None else pos
        if p < self._lpos:
            self._lpos, self._lline = 0, self.line_base
        self._lline += self.text.count("\n", self._lpos, p)
        self._lpos = p
        return self._lline

    def error(self, expected: str, pos: int | None = None) -> TraceFormatError:
        p = self.pos if pos is None else pos
        got = self.text[p:p + 60] if p < len(self.text) else "end of file"
        return TraceFormatError(self.fname, self.line(p), expected, got or "end of file")

    def fill(self, at_least: int = 0) -> bool:
        """Read more text (keeping what is unread); False at end of file."""
        if self.eof:
            return False
        want = max(self.read_bytes, at_least)
        try:
            data = self.fh.read(want)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(self.fname, self.line(len(self.text)),
                                   "a readable (gzip) stream", str(exc)) from None
        try:
            new = self._utf8.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise TraceFormatError(self.fname, self.line(len(self.text)), "UTF-8 text",
                                   str(exc)) from None
        if self.pos:
            self.line_base = self.line(self.pos)
            self.text = self.text[self.pos:]
            self.pos = 0
            self._lpos, self._lline = 0, self.line_base
        self.text += new
        if not data:
            self.eof = True
        return bool(data) or bool(new)

    def peek(self) -> str:
        """The next non-whitespace character ('' at end of file), position moved onto it."""
        while True:
            self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.fill():
                return ""

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise self.error(what)
        self.pos += 1

    def value(self) -> Any:
        """Decode the JSON value at the (non-whitespace) position."""
        grow = self.read_bytes
        while True:
            start = self.pos
            try:
                obj, end = _DECODER.raw_decode(self.text, start)
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise self.error(f"a JSON value ({exc.msg})", exc.pos) from None
                obj, end = None, -1
            except RecursionError:
                raise self.error("JSON nested less than a thousand levels deep") from None
            if end >= 0 and (end < len(self.text) or self.eof):
                self.pos = end
                return obj
            # incomplete (or possibly a number cut at the buffer's end): read more and retry
            if len(self.text) - start > MAX_VALUE_BYTES:
                raise self.error(f"JSON values (events) under {MAX_VALUE_BYTES >> 20} MiB")
            self.fill(grow)
            grow = min(grow * 2, MAX_VALUE_BYTES)


def _array(buf: _Buffer, what: str, closing_optional: bool) -> Iterator[Any]:
    """Elements of the array at the position; ``buf.value_line`` is each one's first line."""
    buf.expect("[", f"'[' opening {what}")
    c = buf.peek()
    if c == "]":
        buf.pos += 1
        return
    while True:
        if c == "" and closing_optional:
            return
        buf.value_line = buf.line()
        yield buf.value()
        c = buf.peek()
        if c == ",":
            buf.pos += 1
            c = buf.peek()
            if c == "]":  # tolerated trailing comma
                buf.pos += 1
                return
            continue
        if c == "]":
            buf.pos += 1
            return
        if c == "" and closing_optional:
            return
        raise buf.error(f"',' or ']' in {what}")


def iter_chrome_json(source: str | Path | IO[bytes], *, name: str | None = None,
                     read_bytes: int = READ_BYTES) -> Iterator[tuple[str, Any, int]]:
    """Items of a Chrome-trace JSON file in file order: ``("event", value, line)`` for each
    element of ``traceEvents`` and ``(key, value, line)`` for every other top-level key
    (``line``: the 1-based line the value starts on).

    ``source``: a path (``.gz`` decompressed) or a binary file object.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        fname = name or str(path)
        try:
            raw: IO[bytes] = path.open("rb")
        except OSError as exc:
            raise TraceFormatError(fname, None, "a readable file", str(exc)) from None
        with raw:
            head = raw.read(2)
            raw.seek(0)
            fh = cast(IO[bytes], gzip.GzipFile(fileobj=raw)) if head == b"\x1f\x8b" else raw
            yield from _document(_Buffer(fh, fname, read_bytes))
        return
    fname = name or str(getattr(source, "name", "<chrome trace>"))
    yield from _document(_Buffer(source, fname, read_bytes))


def _document(buf: _Buffer) -> Iterator[tuple[str, Any, int]]:
    c = buf.peek()
    if c == "\ufeff":
        buf.pos += 1
        c = buf.peek()
    if c == "[":
        for ev in _array(buf, "the trace event array", closing_optional=True):
            yield "event", ev, buf.value_line
    elif c == "{":
        buf.pos += 1
        c = buf.peek()
        if c == "}":
            buf.pos += 1
        else:
            while True:
                if buf.peek() != '"':
                    raise buf.error("a quoted top-level key")
                key = buf.value()
                buf.expect(":", f"':' after the top-level key {key!r}")
                if key == "traceEvents":
                    if buf.peek() != "[":
                        raise buf.error("'traceEvents' as a JSON array")
                    for ev in _array(buf, "'traceEvents'", closing_optional=False):
                        yield "event", ev, buf.value_line
                else:
                    if buf.peek() == "":
                        raise buf.error(f"a value for the top-level key {key!r}")
                    line = buf.line()
                    yield str(key), buf.value(), line
                c = buf.peek()
                if c == ",":
                    buf.pos += 1
                    continue
                if c == "}":
                    buf.pos += 1
                    break
                raise buf.error("',' or '}' between top-level keys")
    else:
        raise buf.error("a Chrome trace: a JSON object with 'traceEvents' or a JSON array of events")
    if buf.peek() != "":
        raise buf.error("the end of the file after the top-level JSON value")


def iter_chrome_bytes(data: bytes, name: str = "<chrome trace>") -> Iterator[tuple[str, Any, int]]:
    """:func:`iter_chrome_json` over bytes in memory (tests, small uploads)."""
    if data[:2] == b"\x1f\x8b":
        return iter_chrome_json(cast(IO[bytes], gzip.GzipFile(fileobj=io.BytesIO(data))), name=name)
    return iter_chrome_json(io.BytesIO(data), name=name)
