"""Routers that spread requests over replicas, registered by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from cascade.registry import Registry


class Router(Protocol):
    def choose(self, outstanding: Sequence[int]) -> int:
        """Replica index for the next request, given each replica's outstanding requests."""
        ...


class RoundRobin(msgspec.Struct, frozen=True, kw_only=True, tag="round_robin", tag_field="kind"):
    """Replica i mod N for the i-th request."""


class LeastOutstanding(msgspec.Struct, frozen=True, kw_only=True, tag="least_outstanding",
                       tag_field="kind"):
    """The replica with the fewest routed-but-unfinished requests (ties: lowest index)."""


class _RoundRobin:
    def __init__(self, replicas: int) -> None:
        self._n = replicas
        self._next = 0

    def choose(self, outstanding: Sequence[int]) -> int:
        i = self._next
        self._next = (i + 1) % self._n
        return i


class _LeastOutstanding:
    def __init__(self, replicas: int) -> None:
        self._n = replicas

    def choose(self, outstanding: Sequence[int]) -> int:
        best = 0
        low = outstanding[0]
        for i in range(1, self._n):
            if outstanding[i] < low:
                best, low = i, outstanding[i]
        return best


RouterFactory = Callable[[msgspec.Struct, int], Router]

ROUTERS: Registry[RouterFactory] = Registry("router")
ROUTERS.register("round_robin", RoundRobin, lambda cfg, n: _RoundRobin(n))
ROUTERS.register("least_outstanding", LeastOutstanding, lambda cfg, n: _LeastOutstanding(n))
