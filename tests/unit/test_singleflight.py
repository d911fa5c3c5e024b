"""One build at a time per key (:class:`cascade.singleflight.SingleFlight`): concurrent callers
share it, its error reaches them all, a cancelled waiter leaves it running."""

from __future__ import annotations

import asyncio

import pytest

from cascade.singleflight import SingleFlight


async def test_concurrent_callers_share_one_build_and_its_error() -> None:
    flight: SingleFlight[str, int] = SingleFlight()
    calls = 0
    gate = asyncio.Event()

    async def build() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        return 42

    tasks = [asyncio.create_task(flight.run("k", build)) for _ in range(5)]
    await asyncio.sleep(0)
    assert len(flight) == 1
    gate.set()
    assert await asyncio.gather(*tasks) == [42] * 5 and calls == 1 and len(flight) == 0

    async def broken() -> int:
        await asyncio.sleep(0.01)
        raise ValueError("no such model")

    failing = [asyncio.create_task(flight.run("k", broken)) for _ in range(3)]
    results = await asyncio.gather(*failing, return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results) and len(flight) == 0
    assert await flight.run("k", build) == 42 and calls == 2  # nothing cached here: a new build


async def test_a_cancelled_waiter_leaves_the_build_running() -> None:
    flight: SingleFlight[str, str] = SingleFlight()
    gate = asyncio.Event()

    async def build() -> str:
        await gate.wait()
        return "built"

    first = asyncio.create_task(flight.run("k", build))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(flight.run("k", build))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.set()
    assert await first == "built"
