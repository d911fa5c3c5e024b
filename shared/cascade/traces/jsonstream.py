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

Hostile input is bounded by :class:`JsonLimits` (settings ``CASCADE_TRACE_JSON_*``, applied
with :func:`use_limits`): the longest string, the largest single value, the nesting depth
and the number of items. A string over the limit is refused while it is still being read,
so a compressed file holding one gigabyte-long string costs at most about the value limit
in memory, never the string itself.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import msgspec

from cascade.errors import TraceFormatError

#: Bytes read from the (decompressed) file at a time.
READ_BYTES = 1 << 20
#: Largest single JSON value (one event, or one top-level value besides traceEvents).
MAX_VALUE_BYTES = 16 << 20

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
#: A complete JSON string token, or an unterminated one running to the end of the text.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?$)', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class JsonLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on one Chrome-trace JSON document (each a setting, ``CASCADE_TRACE_JSON_*``)."""

    max_string_chars: int = 1 << 20
    """Longest JSON string (key or value), in characters of JSON text."""
    max_value_bytes: int = MAX_VALUE_BYTES
    """Largest single value: one event, or one top-level value besides ``traceEvents``."""
    max_depth: int = 64
    """Deepest nesting of arrays and objects inside one value."""
    max_events: int = 50_000_000
    """Most items: events of ``traceEvents`` plus other top-level keys."""

    @classmethod
    def from_settings(cls, settings: Any) -> JsonLimits:
        """The limits a :class:`cascade.platform.settings.Settings` holds (defaults for missing ones)."""
        default = cls()
        return cls(
            max_string_chars=int(getattr(settings, "trace_json_max_string_chars",
                                         default.max_string_chars)),
            max_value_bytes=int(getattr(settings, "trace_json_max_value_bytes",
                                        default.max_value_bytes)),
            max_depth=int(getattr(settings, "trace_json_max_depth", default.max_depth)),
            max_events=int(getattr(settings, "trace_json_max_events", default.max_events)),
        )


_DEFAULT_LIMITS = JsonLimits()
_LIMITS: contextvars.ContextVar[JsonLimits | None] = contextvars.ContextVar(
    "cascade_json_limits", default=None)


def current_limits() -> JsonLimits:
    """The limits readers use here (:func:`use_limits` sets them; defaults otherwise)."""
    return _LIMITS.get() or _DEFAULT_LIMITS


@contextlib.contextmanager
def use_limits(limits: JsonLimits) -> Iterator[JsonLimits]:
    """Read Chrome traces under ``limits`` inside the ``with`` block (this context only)."""
    token = _LIMITS.set(limits)
    try:
        yield limits
    finally:
        _LIMITS.reset(token)


def _setting(name: str) -> str:
    return f"CASCADE_TRACE_JSON_{name.upper()}"


class _Buffer:
    """A sliding window of decoded text over a binary stream, with line accounting."""

    def __init__(self, fh: IO[bytes], fname: str, read_bytes: int,
                 limits: JsonLimits | None = None) -> None:
        self.fh = fh
        self.limits = limits or current_limits()
        self.items = 0
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

    def count_item(self) -> None:
        """Count one more top-level item (event or key) against ``max_events``."""
        self.items += 1
        if self.items > self.limits.max_events:
            raise self.error(f"at most {self.limits.max_events:,} trace events "
                             f"({_setting('max_events')})")

    def _check_strings(self, start: int, end: int) -> None:
        """Refuse a string token in ``text[start:end]`` over ``max_string_chars`` (an
        unterminated one at the end counts with what arrived of it so far)."""
        limit = self.limits.max_string_chars
        if end - start <= limit:
            return
        for m in _STRING.finditer(self.text, start, end):
            if m.end() - m.start() - 2 > limit:
                raise TraceFormatError(
                    self.fname, self.line(m.start()),
                    f"JSON strings of at most {limit:,} characters ({_setting('max_string_chars')})",
                    f"a string of more than {limit:,} characters starting "
                    f"{self.text[m.start():m.start() + 40]}...")

    def _check_depth(self, start: int, end: int) -> None:
        limit = self.limits.max_depth
        if self.text.count("[", start, end) + self.text.count("{", start, end) <= limit:
            return
        depth = 0
        pos = start
        for m in _STRING.finditer(self.text, start, end):
            depth = self._depth_between(pos, m.start(), depth, limit)
            pos = m.end()
        self._depth_between(pos, end, depth, limit)

    def _depth_between(self, start: int, end: int, depth: int, limit: int) -> int:
        for b in _BRACKETS.finditer(self.text, start, end):
            depth += 1 if b.group() in "[{" else -1
            if depth > limit:
                raise self.error(f"JSON nested at most {limit} levels deep "
                                 f"({_setting('max_depth')})", b.start())
        return depth

    def value(self) -> Any:
        """Decode the JSON value at the (non-whitespace) position."""
        limits = self.limits
        grow = self.read_bytes
        while True:
            start = self.pos
            try:
                obj, end = _DECODER.raw_decode(self.text, start)
            except json.JSONDecodeError as exc:
                if self.eof:
                    self._check_strings(start, len(self.text))
                    raise self.error(f"a JSON value ({exc.msg})", exc.pos) from None
                obj, end = None, -1
            except RecursionError:
                raise self.error(f"JSON nested at most {limits.max_depth} levels deep "
                                 f"({_setting('max_depth')})") from None
            if end >= 0 and (end < len(self.text) or self.eof):
                self._check_strings(start, end)
                self._check_depth(start, end)
                self.pos = end
                return obj
            # incomplete (or possibly a number cut at the buffer's end): check what arrived
            # of it, then read more and retry
            self._check_strings(start, len(self.text))
            if len(self.text) - start > limits.max_value_bytes:
                raise self.error(f"JSON values (events) of at most {limits.max_value_bytes:,} "
                                 f"bytes ({_setting('max_value_bytes')})")
            self.fill(grow)
            grow = min(grow * 2, max(limits.max_value_bytes, self.read_bytes))


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
        buf.count_item()
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
                     read_bytes: int = READ_BYTES,
                     limits: JsonLimits | None = None) -> Iterator[tuple[str, Any, int]]:
    """Items of a Chrome-trace JSON file in file order: ``("event", value, line)`` for each
    element of ``traceEvents`` and ``(key, value, line)`` for every other top-level key
    (``line``: the 1-based line the value starts on).

    ``source``: a path (``.gz`` decompressed) or a binary file object. ``limits``: default
    :func:`current_limits`.
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
            yield from _document(_Buffer(fh, fname, read_bytes, limits))
        return
    fname = name or str(getattr(source, "name", "<chrome trace>"))
    yield from _document(_Buffer(source, fname, read_bytes, limits))


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
                buf.count_item()
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
