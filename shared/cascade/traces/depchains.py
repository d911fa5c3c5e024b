"""Register dependency chains of a kernel's warps: the longest run of instructions each reading a
register the one before wrote. Order-dependent (unlike the counts, which are taken per distinct
line), so only the warps of a sample of blocks are followed, line by line in order.
"""

from __future__ import annotations

import math
from typing import Any

from cascade.traces.addresses import CACHE_MAX
from cascade.traces.lines import FieldError, fourth_space, parse_tokens


class DependencyChains:
    """The longest dependency chain of each sampled warp (:meth:`mean` over them)."""

    def __init__(self) -> None:
        self.depth: dict[int, int] = {}
        """register -> chain length up to the instruction that last wrote it (this warp)"""
        self.chain = 0
        """longest chain of the current warp"""
        self.chains: list[int] = []
        """longest chain of every finished sampled warp"""
        self.raw: dict[bytes, list[Any]] = {}
        """raw traces: warp prefix -> [register depths, longest chain] of its interleaved lines"""
        self._regcache: dict[bytes, tuple[int, tuple[int, ...]]] = {}

    def begin_warp(self) -> None:
        """A new warp of a post-processed trace starts."""
        self.depth = {}
        self.chain = 0

    def end_warp(self) -> None:
        """The current (sampled) warp ended: keep its longest chain."""
        self.chains.append(self.chain)
        self.depth = {}

    def retire_raw(self, key: bytes) -> None:
        """A raw trace's warp ``key`` exited: keep its longest chain if it was followed."""
        dep = self.raw.pop(key, None)
        if dep is not None:
            self.chains.append(dep[1])

    def finish_raw(self) -> None:
        """End of a raw trace: keep the longest chain of every warp still followed."""
        for st in self.raw.values():
            self.chains.append(st[1])

    def mean(self) -> float:
        """Mean longest chain over the sampled warps (NaN: none)."""
        return (sum(self.chains) / len(self.chains)) if self.chains else math.nan

    def _regs_of(self, rest: bytes, lineinfo: bool) -> tuple[int, tuple[int, ...]]:
        r = self._regcache.get(rest)
        if r is None:
            try:
                parsed = parse_tokens(rest.split(), lineinfo)
                r = (parsed[2], parsed[4])
            except FieldError:
                r = (-1, ())
            if len(self._regcache) > CACHE_MAX:
                self._regcache.clear()
            self._regcache[rest] = r
        return r

    def warp_lines(self, seg: list[bytes], prefixed: bool, lineinfo: bool) -> None:
        """The next instruction lines of the current warp, in order (``prefixed``: each starts
        with a ``tb warp`` location prefix)."""
        depth = self.depth
        best = self.chain
        regcache = self._regcache
        for line in seg:
            r = regcache.get(line)
            if r is None:
                rest = line
                if prefixed:
                    p = fourth_space(line)
                    rest = line[p + 1 :] if p >= 0 else line
                r = self._regs_of(rest, lineinfo)
                regcache[line] = r
            d = 1
            for s in r[1]:
                x = depth.get(s)
                if x is not None and x >= d:
                    d = x + 1
            dest = r[0]
            if dest >= 0 and dest != 255:
                depth[dest] = d
            best = max(best, d)
        self.chain = best

    def raw_lines(self, sel: list[bytes], lineinfo: bool) -> None:
        """Raw trace lines (``cta_x cta_y cta_z warp`` prefixed, warps interleaved) of the
        sampled blocks, in order."""
        states = self.raw
        for line in sel:
            p = fourth_space(line)
            if p < 0:
                continue
            key = line[:p]
            st = states.get(key)
            if st is None:
                st = states[key] = [{}, 0]
            r = self._regs_of(line[p + 1 :], lineinfo)
            depth: dict[int, int] = st[0]
            d = 1
            for s in r[1]:
                x = depth.get(s)
                if x is not None and x >= d:
                    d = x + 1
            dest = r[0]
            if dest >= 0 and dest != 255:
                depth[dest] = d
            st[1] = max(st[1], d)

