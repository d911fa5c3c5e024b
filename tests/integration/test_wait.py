"""The tests' wait helpers (tests/support/wait.py) on the real nats-server: a KV watch sees the
current value and later ones, and a timeout names the key, the last value and the limit."""

from __future__ import annotations

import asyncio

import pytest

from cascade.platform import subjects
from cascade.platform.bus import Bus
from cascade.platform.state import RunRecord
from tests.support.fixtures_nats import unique
from tests.support.wait import wait_for_kv


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
