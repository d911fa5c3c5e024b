"""An SSE stream's event feed: a consumer lost with its NATS node is replaced after the last
event taken, and a consumer its node made again (replaying from its first sequence) repeats
nothing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import nats.js.errors

from cascade.platform.bus import BusStats
from cascade.platform.runevents import EventFeed as _EventFeed


def _msg(seq: int) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(sequence=SimpleNamespace(stream=seq)))


class _Sub:
    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    async def fetch(self, _n: int, timeout: float) -> list[Any]:
        item = self.batches.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    async def consumer_info(self) -> Any:
        return SimpleNamespace(num_pending=0)

    async def unsubscribe(self) -> None:
        return None


class _Bus:
    """Each consumer opened gets the next scripted list of fetch answers."""

    def __init__(self, scripts: list[list[Any]]) -> None:
        self.scripts = scripts
        self.starts: list[int | None] = []
        self.stats = BusStats()
        self.jsm = SimpleNamespace(add_consumer=self._add, delete_consumer=self._delete)
        self.js = SimpleNamespace(pull_subscribe_bind=self._bind)

    async def _add(self, _stream: str, config: Any) -> Any:
        self.starts.append(config.opt_start_seq)
        return SimpleNamespace(name=f"c{len(self.starts)}")

    async def _delete(self, _stream: str, _name: str) -> None:
        return None

    async def _bind(self, **_kw: Any) -> _Sub:
        return _Sub(self.scripts.pop(0))


async def test_a_lost_consumer_is_replaced_after_the_last_event() -> None:
    bus = _Bus([[[_msg(5), _msg(7)], nats.js.errors.ServiceUnavailableError()], [[_msg(9)]]])
    feed = _EventFeed(bus, ["cascade.run.r.>"], None)
    await feed.open()
    got = [m.metadata.sequence.stream for m in await feed.fetch()]
    assert got == [5, 7] and await feed.fetch() == []  # lost: closed
    got += [m.metadata.sequence.stream for m in await feed.fetch()]  # reopened after 7
    assert got == [5, 7, 9] and bus.starts == [None, 8]
    assert bus.stats.jetstream_consumers_open == {"events": 1}
    assert bus.stats.jetstream_consumers_created == {"events": 2}


async def test_a_consumer_replaying_from_its_start_repeats_nothing() -> None:
    bus = _Bus([[[_msg(3), _msg(4)], [_msg(3), _msg(4), _msg(6)]], [[_msg(8)]]])
    feed = _EventFeed(bus, ["cascade.run.r.>"], 3)
    await feed.open()
    seen = [m.metadata.sequence.stream for m in await feed.fetch()]
    seen += [m.metadata.sequence.stream for m in await feed.fetch()]  # 3, 4 again: dropped
    seen += [m.metadata.sequence.stream for m in await feed.fetch()]
    assert seen == [3, 4, 6, 8] and bus.starts == [3, 7]
