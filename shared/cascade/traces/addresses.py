"""Address features of an instruction trace's memory lines: global sectors and cache lines
(with the footprint sampler's reuse), shared-memory bank conflicts and extent, local bytes.

:class:`~cascade.traces.parse.KernelTraceParser` hands :class:`AddressFeatures` each distinct
memory line once, with the number of times it was seen. For mode 1/2 lines
(:meth:`AddressFeatures.fast_memory`) the *address pattern* (the text after the base address:
stride or delta list and immediate) is decoded and validated once, so only the base is
converted per line; bank conflicts are cached per (pattern, base modulo 4) and a global
access's sector count and line offsets per (pattern, base modulo 128), since they are
invariant under those shifts. Every cache is capped and cleared when full.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from functools import reduce
from itertools import accumulate
from operator import or_
from typing import NamedTuple

from cascade.traces import opcodes as oc
from cascade.traces.header import SPACE_WINDOW_BYTES
from cascade.traces.memory import (
    LINE_SHIFT,
    SECTOR_SHIFT,
    LineSampler,
    bank_conflict_wavefronts,
    lane_addresses,
    strided_span,
    units_touched,
)

#: Entries a per-line cache of the trace parser keeps before it is cleared.
CACHE_MAX = 1 << 17
#: Decoded address patterns kept (each ~0.7 KB: key text, 32 offsets as an int64 array).
_PATTERN_MAX = 1 << 16
#: Pattern lookups per hit-rate window (see AddressFeatures.fast_memory).
_PATTERN_WINDOW = 8192
#: :meth:`AddressFeatures.fast_memory`'s answer for a pattern it does not keep (the caller takes the
#: plain path).
NOT_KEPT = -99


class AddressFeatures:
    """Address features of one kernel's memory lines, summed as lines are handed in.

    ``shmem_base`` / ``local_base``: the header's shared / local window bases (-1: none), set
    before the first line; a generic address inside a window belongs to that space.
    """

    def __init__(self) -> None:
        self.shmem_base = -1
        self.local_base = -1
        self.gmem_requests = 0
        self.gmem_ld = 0
        self.gmem_st = 0
        self.gmem_atom = 0
        self.smem_acc = 0
        self.smem_conf = 0
        self.smem_extent = 0
        self.local_bytes = 0
        self.sampler = LineSampler()
        self._bank_cache: dict[tuple[int, int, int, int], int] = {}
        self._patterns: dict[tuple[int, int, int, bytes], _Pattern] = {}
        self._pattern_ids = 0
        self._pat_lookups = 0
        self._pat_hits = 0
        self._pat_admit = True
        self._bank_fast: dict[int, int] = {}
        self._gcache: dict[int, tuple[int, tuple[int, ...] | None]] = {}

    def _pattern(self, mode: int, n: int, width: int, rest: bytes) -> _Pattern | None:
        """Validate and decode what follows the base address of a mode 1/2 line (None if bad)."""
        t = rest.split()
        try:
            stride = 0
            deltas: list[int] = []
            if mode == 1:
                stride = int(t[0])
                used = 1
                offs: Sequence[int] = range(0, n * stride, stride) if stride else (0,) * n
            else:
                used = n - 1 if n > 0 else 0
                deltas = list(map(int, t[:used]))
                if len(deltas) != used:
                    return None
                try:
                    offs = array("q", accumulate(deltas, initial=0))
                except OverflowError:  # beyond 64 bits: nonsense, but the general path takes it
                    offs = tuple(accumulate(deltas, initial=0))
            if len(t) > used:
                int(t[used])
                if len(t) > used + 1 and t[used + 1] != b"STORE_DATA":
                    return None
        except (ValueError, IndexError):
            return None
        self._pattern_ids += 1
        wide = mode == 1 and abs(stride) <= 1 << SECTOR_SHIFT
        # lanes aligned to a power-of-two width <= a sector never straddle a sector or a line
        aligned = 0 < width <= 1 << SECTOR_SHIFT and not width & (width - 1) and not (
            (stride if mode == 1 else reduce(or_, deltas, 0)) & (width - 1))
        span = (n - 1) * stride
        return _Pattern(self._pattern_ids, offs, max(offs) if offs else 0, stride, n, width, wide,
                        aligned, min(0, span), max(0, span) + width - 1)

    def fast_memory(  # noqa: C901 - one inlined hot path per memory-op shape, kept flat for speed
        self, head: tuple[str, int, int, int, int, int], tail: bytes, c: int, check: int = -1
    ) -> int | None:
        """Address features of a mode 1/2 memory line from its cached address pattern.

        ``tail`` starts at the base address. The pattern (what follows the
        base: stride or deltas, immediate) is decoded once per distinct text;
        bank conflicts are cached per pattern and base modulo 4, the sectors
        and relative lines of a global access per pattern and base modulo 128
        (they are invariant under shifts by those). Patterns are only kept
        while they are reused: when fewer than 1 in 4 lookups of a window hit,
        only 1 in 16 new patterns is decoded and stored, the others return
        ``NOT_KEPT`` and take the plain path, so unique address lists
        (gathers) cost no memory and no extra time. Returns the class override
        as :meth:`memory` does, or None when the line needs the general path
        (``check``: the base the full parse found, to confirm this split of
        the line agrees).
        """
        _op, _mask, mem, width, mode, n = head
        if not mode:
            return None
        q = tail.find(b" ")
        if q < 0:
            return None
        try:
            base = int(tail[:q], 16)
        except ValueError:
            return None
        if check >= 0 and base != check:
            return None
        key = (mode, n, width, tail[q:])
        pat = self._patterns.get(key)
        self._pat_lookups += 1
        if pat is None:
            if not self._pat_admit and self._pat_lookups & 15:
                return NOT_KEPT
            pat = self._pattern(mode, n, width, tail[q:])
            if pat is None:
                return None
            if len(self._patterns) >= _PATTERN_MAX:
                self._patterns.clear()
            self._patterns[key] = pat
        else:
            self._pat_hits += 1
        if self._pat_lookups >= _PATTERN_WINDOW:
            self._pat_admit = self._pat_hits * 4 >= self._pat_lookups
            self._pat_lookups = self._pat_hits = 0
        cls = -1
        space = _STATIC_SPACE[mem]
        store = mem in _STORES
        if space < 0:
            if space == -1:  # generic
                space = self.space(base)
                if mem != oc.MEM_ATOM_GENERIC:
                    if space == 1:
                        cls = oc.ST_SHARED if store else oc.LD_SHARED
                    elif space == 2:
                        cls = oc.LOCAL
            elif self.space(base) == 1 or base < SPACE_WINDOW_BYTES:  # LDGSTS into shared
                space = 1
                store = True
                cls = oc.ST_SHARED
            else:
                space = 0
        if space == 0:
            self.gmem_requests += c
            if pat.strided:  # strided_span's arithmetic: every unit between is touched
                lo = base + pat.lo
                hi = base + pat.hi
                sectors = (hi >> SECTOR_SHIFT) - (lo >> SECTOR_SHIFT) + 1
                lines: object = range(lo >> LINE_SHIFT, (hi >> LINE_SHIFT) + 1)
            else:
                gkey = (pat.pid << 7) | (base & 127)
                g = self._gcache.get(gkey)
                if g is None:
                    g = _global_units(base & 127, pat)
                    if len(self._gcache) >= CACHE_MAX:
                        self._gcache.clear()
                    self._gcache[gkey] = g
                sectors, rel = g
                if rel is None:
                    lines = units_touched([base + o for o in pat.offs], width, LINE_SHIFT)
                elif len(rel) == 1:
                    lines = ((base >> LINE_SHIFT) + rel[0],)
                else:
                    l0 = base >> LINE_SHIFT
                    lines = {l0 + r for r in rel}
            if mem in _ATOMICS:
                self.gmem_atom += sectors * c
            elif store:
                self.gmem_st += sectors * c
            else:
                self.gmem_ld += sectors * c
            self.sampler.access(lines, c)
        elif space == 1:
            self.smem_acc += c
            bkey = (pat.pid << 2) | (base & 3)
            extra = self._bank_fast.get(bkey)
            if extra is None:
                r = base & 3
                extra = bank_conflict_wavefronts([r + o for o in pat.offs], width)
                if len(self._bank_fast) >= CACHE_MAX:
                    self._bank_fast.clear()
                self._bank_fast[bkey] = extra
            self.smem_conf += extra * c
            hi = base + pat.maxoff + width
            sb = self.shmem_base
            if sb >= 0 and hi > sb:
                hi -= sb
            if hi < SPACE_WINDOW_BYTES and hi > self.smem_extent:
                self.smem_extent = hi
        else:
            self.local_bytes += n * width * c
        return cls

    def space(self, addr: int) -> int:
        """0 global, 1 shared, 2 local for a generic address."""
        sb, lb = self.shmem_base, self.local_base
        if sb >= 0 and sb <= addr < sb + SPACE_WINDOW_BYTES:
            return 1
        if lb >= 0 and lb <= addr < lb + SPACE_WINDOW_BYTES:
            return 2
        return 0

    def memory(
        self, mem: int, mask: int, width: int, mode: int, base: int, addr: object, c: int
    ) -> int:
        """Address features of one distinct memory line seen ``c`` times; returns a class override."""
        n = mask.bit_count()
        cls = -1
        space = 0
        store = mem in (oc.MEM_ST_GLOBAL, oc.MEM_ST_GENERIC, oc.MEM_ST_SHARED, oc.MEM_ST_LOCAL)
        atomic = mem in (oc.MEM_ATOM_GLOBAL, oc.MEM_ATOM_GENERIC, oc.MEM_ATOM_SHARED)
        if mem in (oc.MEM_LD_SHARED, oc.MEM_ST_SHARED, oc.MEM_ATOM_SHARED):
            space = 1
        elif mem in (oc.MEM_LD_LOCAL, oc.MEM_ST_LOCAL):
            space = 2
        elif mem in (oc.MEM_LD_GENERIC, oc.MEM_ST_GENERIC, oc.MEM_ATOM_GENERIC):
            space = self.space(base)
            if space == 1 and not atomic:
                cls = oc.ST_SHARED if store else oc.LD_SHARED
            elif space == 2 and not atomic:
                cls = oc.LOCAL
        elif mem == oc.MEM_LDGSTS and (self.space(base) == 1 or base < SPACE_WINDOW_BYTES):
            space = 1
            store = True
            cls = oc.ST_SHARED
        if space == 0:
            self.gmem_requests += c
            span = strided_span(base, addr, n, width, SECTOR_SHIFT) if mode == 1 else None  # type: ignore[arg-type]
            if span is not None:
                sectors = span[1] - span[0] + 1
                lspan = strided_span(base, addr, n, width, LINE_SHIFT)  # type: ignore[arg-type]
                assert lspan is not None
                lines: object = range(lspan[0], lspan[1] + 1)
            else:
                addrs = lane_addresses(mode, base, addr, n)
                sectors = len(units_touched(addrs, width, SECTOR_SHIFT))
                lines = units_touched(addrs, width, LINE_SHIFT)
            if atomic:
                self.gmem_atom += sectors * c
            elif store:
                self.gmem_st += sectors * c
            else:
                self.gmem_ld += sectors * c
            self.sampler.access(lines, c)
        elif space == 1:
            self.smem_acc += c
            if mode == 1:
                key = (base & 127, addr, n, width)
                extra = self._bank_cache.get(key)  # type: ignore[arg-type]
                if extra is None:
                    extra = bank_conflict_wavefronts(lane_addresses(1, base & 127, addr, n), width)
                    if len(self._bank_cache) < CACHE_MAX:
                        self._bank_cache[key] = extra  # type: ignore[index]
                stride: int = addr  # type: ignore[assignment]
                hi = max(base, base + (n - 1) * stride) + width
            else:
                addrs = lane_addresses(mode, base, addr, n)
                extra = bank_conflict_wavefronts(addrs, width)
                hi = max(addrs) + width
            self.smem_conf += extra * c
            sb = self.shmem_base
            if sb >= 0 and hi > sb:
                hi -= sb
            if hi < SPACE_WINDOW_BYTES and hi > self.smem_extent:
                self.smem_extent = hi
        else:
            self.local_bytes += n * width * c
        return cls


class _Pattern(NamedTuple):
    """A decoded address tail (what follows the base) of a mode 1/2 memory line."""

    pid: int
    """unique id (keys the per-base caches)"""
    offs: Sequence[int]
    """each active lane's offset from the base, in lane order"""
    maxoff: int
    """largest offset"""
    stride: int
    """mode 1 stride (0 for mode 2)"""
    n: int
    """active lanes"""
    width: int
    """bytes per lane"""
    strided: bool
    """mode 1 with |stride| <= one sector: sectors and lines are arithmetic"""
    aligned: bool
    """every offset a multiple of the width, a power of two <= one sector"""
    lo: int
    """mode 1: first byte of the access relative to the base"""
    hi: int
    """mode 1: last byte of the access relative to the base"""


def _global_units(r: int, pat: _Pattern) -> tuple[int, tuple[int, ...] | None]:
    """(sectors, line offsets from ``base >> 7`` in first-insertion order) for a base = r mod 128.

    The insertion order is the one :func:`units_touched` inserts in, so a
    set built from it iterates in the same order as that function's result
    (the sampler's reuse times depend on it). None for the lines when a lane
    spans more than one line (the caller uses :func:`units_touched`).
    """
    addrs = [r + o for o in pat.offs]
    w = pat.width
    if pat.aligned and not r % w:  # each lane's last byte is in its first byte's sector / line
        return len({a >> SECTOR_SHIFT for a in addrs}), tuple(
            dict.fromkeys([a >> LINE_SHIFT for a in addrs]))
    sectors = len(units_touched(addrs, w, SECTOR_SHIFT))
    if w > 1 << LINE_SHIFT:
        return sectors, None
    w1 = w - 1
    rel = dict.fromkeys([a >> LINE_SHIFT for a in addrs])
    rel.update(dict.fromkeys([(a + w1) >> LINE_SHIFT for a in addrs]))
    return sectors, tuple(rel)


_STORES = frozenset({oc.MEM_ST_GLOBAL, oc.MEM_ST_GENERIC, oc.MEM_ST_SHARED, oc.MEM_ST_LOCAL})
_ATOMICS = frozenset({oc.MEM_ATOM_GLOBAL, oc.MEM_ATOM_GENERIC, oc.MEM_ATOM_SHARED})
#: memory kind -> 0 global, 1 shared, 2 local, -1 generic (by address), -2 LDGSTS
_STATIC_SPACE = {
    oc.MEM_LD_GLOBAL: 0, oc.MEM_ST_GLOBAL: 0, oc.MEM_ATOM_GLOBAL: 0,
    oc.MEM_LD_SHARED: 1, oc.MEM_ST_SHARED: 1, oc.MEM_ATOM_SHARED: 1,
    oc.MEM_LD_LOCAL: 2, oc.MEM_ST_LOCAL: 2,
    oc.MEM_LD_GENERIC: -1, oc.MEM_ST_GENERIC: -1, oc.MEM_ATOM_GENERIC: -1,
    oc.MEM_LDGSTS: -2,
}
