"""Newest-first pages of records held in memory: ``limit``, an opaque ``cursor``, filters by
state and name.

:class:`NewestFirst` keeps records by id and lists them by (``created_at``, id) descending.
A cursor names the last record of a page (its creation time in microseconds and its id); the
next page starts right after it, so records created meanwhile never shift a page that is being
walked. Every string the cursor pattern admits is a position, so a well-formed cursor is never
refused. The sorted views are rebuilt lazily, once per change, not per request.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from aiohttp import web

from cascade.errors import ValidationError

T = TypeVar("T")

#: Most records one page holds.
MAX_LIMIT = 1000
#: Records per page when ``limit`` is not given.
DEFAULT_LIMIT = 100
#: What a cursor looks like: ``{created_us}.{id}``; clients pass it back as they got it.
CURSOR_PATTERN = r"^[0-9]{1,20}\.[!-~]{1,200}$"

Key = tuple[int, str]


def page_query(what: str, states: list[str]) -> dict[str, str | tuple[str, dict[str, Any]]]:
    """The OpenAPI query parameters of a paged list of ``what``."""
    return {
        "limit": (f"{what} per page (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})",
                  {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
        "cursor": ("the previous page's next_cursor: continue after its last entry (opaque)",
                   {"type": "string", "pattern": CURSOR_PATTERN, "maxLength": 221}),
        "state": (f"only {what} in this state", {"type": "string", "enum": states}),
        "name": (f"only {what} whose name or id contains this text, case-insensitive",
                 {"type": "string", "maxLength": 200}),
    }


def record_key(created_at: float, record_id: str) -> Key:
    """The sort key of a record: creation time in whole microseconds, then id."""
    return (max(0, round(created_at * 1e6)), record_id)


def encode_cursor(key: Key) -> str:
    """The cursor naming ``key``."""
    return f"{key[0]}.{key[1]}"


def decode_cursor(value: str, field: str = "cursor") -> Key:
    """The position a cursor names; 400 naming the field when it is not one."""
    head, sep, tail = value.partition(".")
    if (not sep or not head.isascii() or not head.isdigit() or len(head) > 20 or not tail
            or len(tail) > 200 or not all("!" <= c <= "~" for c in tail)):
        raise ValidationError("not a cursor of this list: pass back next_cursor as it came",
                              field=field)
    return (int(head), tail)


@dataclasses.dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page: its records, the cursor of the next page (None on the last) and how many
    records match the filters in all."""

    items: list[T]
    next_cursor: str | None
    total: int


@dataclasses.dataclass(frozen=True, slots=True)
class PageRequest:
    """What a client asked for."""

    limit: int = DEFAULT_LIMIT
    cursor: Key | None = None
    state: str | None = None
    name: str = ""


class NewestFirst(Generic[T]):
    """Records by id, listed newest first, paged."""

    def __init__(self, *, created: Callable[[T], float], state: Callable[[T], str],
                 name: Callable[[T], str]) -> None:
        self._created = created
        self._state = state
        self._name = name
        self._records: dict[str, T] = {}
        self._keys: dict[str, Key] = {}
        self._text: dict[str, str] = {}
        self._sorted: list[Key] | None = None
        self._by_state: dict[str, list[Key]] | None = None

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._records

    def get(self, record_id: str) -> T | None:
        """The record, or None."""
        return self._records.get(record_id)

    def values(self) -> Iterator[T]:
        """Every record (no order)."""
        return iter(list(self._records.values()))

    def put(self, record_id: str, record: T) -> None:
        """Add or replace a record."""
        old = self._records.get(record_id)
        key = record_key(self._created(record), record_id)
        self._records[record_id] = record
        self._text[record_id] = f"{self._name(record)}\n{record_id}".lower()
        if old is None or self._keys.get(record_id) != key:
            self._sorted = None
            self._by_state = None
        elif self._state(old) != self._state(record):
            self._by_state = None
        self._keys[record_id] = key

    def remove(self, record_id: str) -> None:
        """Forget a record (a no-op when absent)."""
        if self._records.pop(record_id, None) is not None:
            self._keys.pop(record_id, None)
            self._text.pop(record_id, None)
            self._sorted = None
            self._by_state = None

    def _ordered(self, state: str | None) -> list[Key]:
        if self._sorted is None:
            self._sorted = sorted(self._keys.values())
        if state is None:
            return self._sorted
        if self._by_state is None:
            groups: dict[str, list[Key]] = {}
            for key in self._sorted:
                groups.setdefault(self._state(self._records[key[1]]), []).append(key)
            self._by_state = groups
        return self._by_state.get(state, [])

    def page(self, want: PageRequest) -> Page[T]:
        """The records after ``want.cursor`` (newest first) matching the filters."""
        keys = self._ordered(want.state)
        end = bisect.bisect_left(keys, want.cursor) if want.cursor is not None else len(keys)
        needle = want.name.lower()
        items: list[T] = []
        last: Key | None = None
        more = False
        i = end - 1
        while i >= 0:
            key = keys[i]
            i -= 1
            if needle and needle not in self._text[key[1]]:
                continue
            if len(items) == want.limit:
                more = True
                break
            items.append(self._records[key[1]])
            last = key
        total = sum(1 for key in keys if needle in self._text[key[1]]) if needle else len(keys)
        return Page(items=items, next_cursor=encode_cursor(last) if more and last else None,
                    total=total)


def page_request(request: web.Request, states: tuple[str, ...]) -> PageRequest:
    """The page a request's query asks for (400 naming the parameter when one is wrong)."""
    from services.api.http import query_int

    query = request.query
    limit = query_int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    raw_cursor = query.get("cursor")
    cursor = decode_cursor(raw_cursor) if raw_cursor is not None else None
    state = query.get("state")
    if state is not None and state not in states:
        raise ValidationError(f"expected one of {', '.join(states)}, got {state[:40]!r}",
                              field="state")
    name = query.get("name", "")
    if len(name) > 200:
        raise ValidationError("at most 200 characters", field="name")
    return PageRequest(limit=limit, cursor=cursor, state=state, name=name.strip())
