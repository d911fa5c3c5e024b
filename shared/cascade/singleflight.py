"""One build at a time per key: callers asking for a key whose value is being built wait for that
build (its result or its error) instead of starting another. No I/O; the caller keeps what was
built (the api's step-model caches keep a bounded LRU beside it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Shares each key's in-flight build among its concurrent callers."""

    def __init__(self) -> None:
        self._building: dict[K, asyncio.Future[V]] = {}

    def __len__(self) -> int:
        return len(self._building)

    async def run(self, key: K, build: Callable[[], Awaitable[V]]) -> V:
        """``build()``'s value for ``key``, or the value of the build already running for it.

        A waiter cancelled while it waits does not cancel the build (it is shielded); the build's
        error reaches every waiter."""
        pending = self._building.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._building[key] = fut
        try:
            value = await build()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the waiters re-raise it themselves
            raise
        else:
            fut.set_result(value)
            return value
        finally:
            self._building.pop(key, None)
