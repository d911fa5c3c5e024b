"""The tests' wait helpers (tests/support/wait.py) on the real nats-server: a KV watch sees the
current value and later ones, and a timeout names the key, the last value and the limit."""

from __future__ import annotations

import asyncio

import pytest

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.state import RunRecord
from tests.support.fixtures_nats import unique
from tests.support.wait import wait_for_kv, wait_until, wait_until_blocking


def _run(run_id: str, state: str) -> RunRecord:
    return RunRecord(id=run_id, trace_id="t", configs=["SM90_H100"], state=state)  # type: ignore[arg-type]


async def test_current_value_that_already_matches_is_returned(bus: Bus) -> None:
    run_id = unique("run")
    await (await bus.kv(subjects.KV_RUNS)).put(run_id, _run(run_id, "completed"))
    got = await wait_for_kv(bus, subjects.KV_RUNS, run_id, lambda r: r.state == "completed",
                            type_=RunRecord, timeout=5)
    assert got.id == run_id and got.state == "completed"


async def test_later_value_is_seen_through_the_watch(bus: Bus) -> None:
    run_id = unique("run")
    kv = await bus.kv(subjects.KV_RUNS)
    await kv.put(run_id, _run(run_id, "queued"))
    seen: list[str] = []
    watching = asyncio.Event()

    def finished(r: RunRecord) -> bool:
        seen.append(r.state)
        watching.set()
        return r.state in ("completed", "failed")

    waiter = asyncio.create_task(wait_for_kv(kv, subjects.KV_RUNS, run_id, finished, type_=RunRecord, timeout=10))
    await asyncio.wait_for(watching.wait(), 5)  # the current value came through: the watch is live
    for state in ("running", "completed"):
        await kv.put(run_id, _run(run_id, state))
    got = await waiter
    assert got.state == "completed" and seen == ["queued", "running", "completed"]


async def test_timeout_names_the_key_the_last_value_and_the_limit(bus: Bus) -> None:
    run_id = unique("run")
    await (await bus.kv(subjects.KV_RUNS)).put(run_id, _run(run_id, "running"))
    with pytest.raises(TimeoutError) as err:
        await wait_for_kv(bus, subjects.KV_RUNS, run_id, lambda r: r.state == "completed",
                          type_=RunRecord, timeout=0.5)
    text = str(err.value)
    assert f"{subjects.KV_RUNS}/{run_id}" in text and "0.5 s" in text and "state='running'" in text
    with pytest.raises(TimeoutError, match="nothing"):
        await wait_for_kv(bus, subjects.KV_RUNS, unique("absent"), lambda _r: True, type_=RunRecord, timeout=0.3)


async def test_a_kv_of_another_bucket_is_refused(bus: Bus) -> None:
    with pytest.raises(ValueError, match=subjects.KV_SIMS):
        await wait_for_kv(await bus.kv(subjects.KV_SIMS), subjects.KV_RUNS, "k", lambda _r: True,
                          type_=RunRecord, timeout=1)


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
