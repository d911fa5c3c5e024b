"""The tests' wait helpers (tests/support/wait.py) without a server: wait_until returns the value
and a timeout names what it waited for and the last thing seen (the KV watch, on the real
nats-server: tests/integration/test_wait.py)."""

from __future__ import annotations

import pytest

from tests.support.wait import wait_until, wait_until_blocking


async def test_wait_until_returns_the_value_and_names_what_it_waited_for() -> None:
    calls: list[int] = []

    async def third_time() -> int | None:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else None

    assert await wait_until(third_time, 5, what="three calls", interval=0.01) == 3

    def refuses() -> bool:
        raise ConnectionError("not listening")

    with pytest.raises(TimeoutError, match=r"waiting for the server.*not listening"):
        await wait_until(refuses, 0.2, what="the server", interval=0.01, ignore=(ConnectionError,))
    with pytest.raises(TimeoutError, match=r"after 0.1 s waiting for a file; last seen: False"):
        wait_until_blocking(lambda: False, 0.1, what="a file", interval=0.01)
