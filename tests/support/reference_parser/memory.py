"""Address arithmetic for trace features: sectors, lines, banks, footprint sampling.

All functions take the compressed address forms of a trace line (base +
stride, or an explicit list) and avoid expanding 32 addresses when the
stride makes the answer arithmetic.
"""

from __future__ import annotations

from itertools import accumulate

SECTOR_SHIFT = 5  # 32-byte sectors
LINE_SHIFT = 7  # 128-byte lines
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15

#: Reuse-time thresholds (in line accesses) for the L1 and L2 fractions.
L1_REUSE_LINES = 1024
L2_REUSE_LINES = 32 * 1024


def lane_addresses(mode: int, base: int, addr: object, n: int) -> list[int]:
    """Addresses of the ``n`` active lanes for any mode (expands mode 1 and 2)."""
    if mode == 1:
        stride: int = addr  # type: ignore[assignment]
        return [base + i * stride for i in range(n)]
    if mode == 2:
        return list(accumulate(addr, initial=base))  # type: ignore[call-overload]
    return list(addr)  # type: ignore[call-overload]


def strided_span(base: int, stride: int, n: int, width: int, shift: int) -> tuple[int, int] | None:
    """First and last unit (sector/line) of a strided access if every unit between is touched.

    True when the gap between lanes is smaller than a unit, which holds for
    ``|stride| <= unit``; None otherwise (the caller expands the lanes).
    """
    if abs(stride) > (1 << shift) or n <= 0:
        return None
    last = base + (n - 1) * stride
    lo = min(last, base)
    hi = (max(base, last)) + width - 1
    return lo >> shift, hi >> shift


def units_touched(addrs: list[int], width: int, shift: int) -> set[int]:
    """Distinct units (1 << shift bytes) touched by lanes reading ``width`` bytes each."""
    w1 = width - 1
    if width <= (1 << shift):
        out = {a >> shift for a in addrs}
        out.update((a + w1) >> shift for a in addrs)
        return out
    out = set()
    for a in addrs:
        out.update(range(a >> shift, ((a + w1) >> shift) + 1))
    return out


def bank_conflict_wavefronts(addrs: list[int], width: int) -> int:
    """Extra shared-memory wavefronts caused by bank conflicts (32 banks x 4 bytes).

    Each lane touches ``max(1, width // 4)`` consecutive 4-byte words; lanes
    reading the same word are a broadcast. The access needs as many
    wavefronts as the busiest bank has distinct words; the conflict-free
    minimum is ``ceil(distinct words / 32)``.
    """
    words_per_lane = max(1, width // 4)
    banks: dict[int, set[int]] = {}
    total: set[int] = set()
    for a in addrs:
        w0 = a >> 2
        for j in range(words_per_lane):
            w = w0 + j
            total.add(w)
            s = banks.get(w & 31)
            if s is None:
                banks[w & 31] = {w}
            else:
                s.add(w)
    if not banks:
        return 0
    busiest = max(len(s) for s in banks.values())
    ideal = -(-len(total) // 32)
    return busiest - ideal if busiest > ideal else 0


class LineSampler:
    """Footprint and sampled reuse-time histogram over 128-byte lines, in bounded memory.

    Lines are sampled by a hash: with ``k`` sampling bits, a line is kept when
    the top ``k`` bits of its hash are zero (rate ``2**-k``). Starting exact
    (``k = 0``), the rate halves whenever more than ``cap`` lines are kept,
    so memory stays bounded and the footprint estimate is
    ``len(kept) * 2**k`` (adaptive distinct sampling). For each kept line the
    index of its last access is stored; a re-access adds one reuse whose time
    is the number of line accesses (all lines, sampled or not) since then, an
    upper bound on the LRU stack distance.
    """

    __slots__ = ("cap", "k", "last", "le_l1", "le_l2", "reuses", "t")

    def __init__(self, cap: int = 1 << 16) -> None:
        self.cap = cap
        self.k = 0
        self.last: dict[int, int] = {}
        self.t = 0
        self.reuses = 0
        self.le_l1 = 0
        self.le_l2 = 0

    def access(self, lines: object, repeats: int = 1) -> None:
        """Record one access to each line in ``lines``; ``repeats`` > 1 adds immediate re-accesses."""
        last = self.last
        k = self.k
        t = self.t
        for line in lines:  # type: ignore[attr-defined]
            t += 1
            if k and ((line * _GOLDEN) & _M64) >> (64 - k):
                continue
            prev = last.get(line)
            if prev is not None:
                d = t - prev
                self.reuses += 1
                if d <= L1_REUSE_LINES:
                    self.le_l1 += 1
                    self.le_l2 += 1
                elif d <= L2_REUSE_LINES:
                    self.le_l2 += 1
            last[line] = t
            if repeats > 1:
                self.reuses += repeats - 1
                self.le_l1 += repeats - 1
                self.le_l2 += repeats - 1
        self.t = t
        if len(last) > self.cap:
            self._halve()

    def _halve(self) -> None:
        while len(self.last) > self.cap and self.k < 40:
            self.k += 1
            k = self.k
            self.last = {
                line: t for line, t in self.last.items() if not ((line * _GOLDEN) & _M64) >> (64 - k)
            }

    @property
    def footprint(self) -> float:
        """Estimated distinct lines touched (exact while no sampling happened)."""
        return float(len(self.last) << self.k)

    def fractions(self) -> tuple[float, float]:
        """(fraction of sampled reuses within L1 distance, within L2 distance); NaN if none."""
        if self.reuses == 0:
            return float("nan"), float("nan")
        return self.le_l1 / self.reuses, self.le_l2 / self.reuses

    def state(self) -> dict[str, object]:
        """Picklable state (for resumable builders)."""
        return {"k": self.k, "last": self.last, "t": self.t, "reuses": self.reuses,
                "le_l1": self.le_l1, "le_l2": self.le_l2}
