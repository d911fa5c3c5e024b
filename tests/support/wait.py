"""Waiting in tests without sleep-polling where an event exists.

- :func:`wait_for_kv` waits on a JetStream KV *watch* (the project's :meth:`KV.watch`): it sees
  the current value first, then every change, and returns the first value that satisfies the
  predicate. A run's, a sim's or a trace's state lives in KV, so waiting on one uses this.
- :func:`wait_until` (and :func:`wait_until_blocking` for synchronous tests) re-checks a
  condition that has no event to watch (HTTP answers, files, processes) until it holds.

Both raise :class:`TimeoutError` naming what was awaited, the timeout and the last thing seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar, cast

from cascade.platform.bus import KV, Bus, KVChange

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
_MAX_SHOWN = 600


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."


async def wait_for_kv(
    source: Bus | KV,
    bucket: str,
    key: str,
    predicate: Callable[[T], bool],
    *,
    type_: type[T],
    timeout: float = DEFAULT_TIMEOUT_S,
) -> T:
    """The first value of ``bucket``/``key`` (current or later) for which ``predicate`` holds.

    ``source`` is a connected :class:`Bus` (the bucket is opened from it) or an open :class:`KV`
    of that bucket. ``key`` may be a subject-style pattern (``>``, ``run-1.*``): then every
    matching key's values are offered to ``predicate``. A deleted key is skipped. Values are
    decoded as ``type_``. Raises :class:`TimeoutError` naming the bucket and key, the last
    value seen and the timeout.
    """
    if isinstance(source, KV):
        if source.bucket != bucket:
            raise ValueError(f"wait_for_kv: the KV given is bucket {source.bucket!r}, not {bucket!r}")
        kv = source
    else:
        kv = await source.kv(bucket)
    seen: list[T] = []

    async def first_match() -> T:
        changes = cast(AsyncGenerator[KVChange[T], None], kv.watch(type_, key))
        async with contextlib.aclosing(changes):
            async for change in changes:
                if change.value is None:
                    continue
                seen[:] = [change.value]
                if predicate(change.value):
                    return change.value
        raise AssertionError(f"the watch on {bucket}/{key} ended")  # a watch never ends on its own

    try:
        return await asyncio.wait_for(first_match(), timeout)
    except TimeoutError:
        last = _shown(seen[0]) if seen else "nothing (no value under that key)"
        raise TimeoutError(
            f"{bucket}/{key}: no value satisfied the condition within {timeout} s; last seen: {last}"
        ) from None


async def wait_until(
    check: Callable[[], T | Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    what: str,
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``check`` (sync or async) until it returns something truthy; return that.

    For conditions that no event announces (an HTTP answer, a file, a process). Exceptions
    of the types in ``ignore`` count as "not yet" (e.g. ``aiohttp.ClientError`` while a server
    starts). Raises :class:`TimeoutError` naming ``what``, the timeout and the last result or
    ignored error.
    """
    deadline = time.monotonic() + timeout
    last: object = "never checked"
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except ignore as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}; last seen: {_shown(last)}")
        await asyncio.sleep(interval)


def wait_until_blocking(
    check: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    what: str,
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`wait_until` for synchronous tests (blocks the thread between checks)."""
    deadline = time.monotonic() + timeout
    last: object = "never checked"
    while True:
        try:
            result = check()
        except ignore as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}; last seen: {_shown(last)}")
        time.sleep(interval)


__all__ = ["DEFAULT_TIMEOUT_S", "wait_for_kv", "wait_until", "wait_until_blocking"]

