"""The fast trace parser against the pre-fast-path one (tests/reference_parser), feature by feature.

Every per-kernel output (the KernelTable row, header, warnings, unknown and
tensor opcodes, line and byte counts) must be identical, NaN included, on the
real traces, on every generated variant and mix, across chunk sizes and on
randomised memory lines (all address modes and spaces, widths beyond one
line, enough distinct lines to make the footprint sampler halve). Malformed
input must fail the same way: a TraceFormatError naming the same file and line.
"""

from __future__ import annotations

import lzma
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade.errors import TraceFormatError
from cascade.traces.generate import (
    GLOBAL_BASE,
    LOCAL_BASE,
    SHMEM_BASE,
    TraceSpec,
    header_text,
    write_large_trace,
    write_trace_folder,
)
from cascade.traces.memory import LineSampler, units_touched
from cascade.traces.parse import KernelFeatures, KernelTraceParser
from tests.support.paths import SHARED_DATA
from tests.support.reference_parser.memory import LineSampler as ReferenceSampler
from tests.support.reference_parser.memory import units_touched as reference_units_touched
from tests.support.reference_parser.parse import KernelTraceParser as ReferenceParser

DATA = SHARED_DATA
REAL_TRACES = sorted(p for p in (DATA / "traces").glob("*/kernel-*.trace*"))


def _parse(cls: type, data: bytes, chunk_bytes: int, feed: int = 1 << 20) -> Any:
    parser = cls("k.traceg", chunk_bytes=chunk_bytes)
    for i in range(0, len(data), feed):
        parser.feed(data[i : i + feed])
    return parser.finish()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _assert_identical(new: KernelFeatures, ref: Any) -> None:
    assert new.row.keys() == ref.row.keys()
    diff = {k: (v, ref.row[k]) for k, v in new.row.items() if not _same(v, ref.row[k])}
    assert not diff
    for field in ("file", "header", "format", "warnings", "unknown_opcodes", "tensor_ops",
                  "lines", "instruction_lines", "text_bytes"):
        assert getattr(new, field) == getattr(ref, field), field


def _compare(data: bytes, chunk_bytes: int = 4 << 20, feed: int = 1 << 20) -> KernelFeatures:
    new = _parse(KernelTraceParser, data, chunk_bytes, feed)
    _assert_identical(new, _parse(ReferenceParser, data, chunk_bytes, feed))
    return new


def _compare_error(data: bytes, chunk_bytes: int = 4 << 20) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as ref:
        _parse(ReferenceParser, data, chunk_bytes)
    with pytest.raises(TraceFormatError) as new:
        _parse(KernelTraceParser, data, chunk_bytes)
    assert (new.value.file, new.value.line) == (ref.value.file, ref.value.line)
    assert str(new.value) == str(ref.value)
    return new.value


# ---- real traces --------------------------------------------------------------------------
def test_there_are_real_traces() -> None:
    assert REAL_TRACES


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("chunk_bytes", [4 << 20, 4096, 333])
def test_real_trace_identical(path: Path, chunk_bytes: int) -> None:
    data = path.read_bytes()
    f = _compare(data, chunk_bytes, feed=1000)
    assert f.instruction_lines > 0
    _compare(lzma.compress(data), chunk_bytes)


# ---- generated traces ---------------------------------------------------------------------
VARIANTS = [
    {"tracer_version": 2},
    {"tracer_version": 3, "compress": False},
    {"tracer_version": 4, "lineinfo": True},
    {"tracer_version": 5, "clusters": True},
    {"tracer_version": 5, "lineinfo": True, "compress": False},
    {"raw": True, "tracer_version": 3},
    {"raw": True, "tracer_version": 4, "lineinfo": True, "compress": False},
    {"raw": True, "tracer_version": 5, "seed": 3},
]


@pytest.mark.parametrize("mix", ["simple", "real", "unique"])
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_generated_identical(tmp_path: Path, kw: dict, mix: str) -> None:
    spec = TraceSpec(mix=mix, grid=(6, 1, 1), block=(80, 1, 1), iterations=4, **kw)
    [(path, truth)] = write_trace_folder(tmp_path, [spec])
    data = path.read_bytes()
    f = _compare(data)
    assert f.row["warp_insts"] == truth.columns["warp_insts"]
    _compare(data, chunk_bytes=5000, feed=777)


@pytest.mark.parametrize("mix", ["simple", "real", "unique"])
def test_large_generated_identical(tmp_path: Path, mix: str) -> None:
    path = tmp_path / "k.traceg.xz"
    truth = write_large_trace(path, 3, xz=True, mix=mix, variants=4)
    f = _compare(path.read_bytes(), chunk_bytes=1 << 20)
    assert f.row["warp_insts"] == truth.columns["warp_insts"]


# ---- randomised memory lines --------------------------------------------------------------
_OPS = [
    ("LDG.E.128", 16), ("LDG.E", 4), ("STG.E.64", 8), ("RED.E.ADD", 4), ("ATOMG.E.ADD", 8),
    ("LDS.U.32", 4), ("LDS.U.128", 16), ("STS.64", 8), ("ATOMS.ADD", 4), ("LDL", 4), ("STL.128", 16),
    ("LD.E", 4), ("ST.E.128", 16), ("ATOM.E.ADD", 4), ("LDGSTS.E.BYPASS.128", 16),
    ("LDG.E.U8", 1), ("LDG.E.256", 200), ("IADD3", 0),
]
_BASES = [GLOBAL_BASE, SHMEM_BASE, LOCAL_BASE, 0x0, 0x1000, SHMEM_BASE + (40 << 20)]


def _addr_tail(rng: random.Random, n: int, mode: int, base: int, width: int) -> str:
    if mode == 1:
        stride = rng.choice([0, 4, 8, 16, 32, 33, 64, 128, -4, -16, 4096, width])
        return f"1 0x{base:x} {stride}"
    pattern = rng.choice(["tile", "random", "swizzle", "same"])
    if pattern == "tile":
        row = rng.choice([2, 4, 8, 16])
        addrs = [base + (i // row) * 4096 + (i % row) * width for i in range(n)]
    elif pattern == "swizzle":
        addrs = [base + (i // 8) * 128 + ((i % 8) ^ (i // 8 & 7)) * 16 for i in range(n)]
    elif pattern == "same":
        addrs = [base + rng.choice([0, 4]) for _ in range(n)]
    else:
        addrs = [base + rng.randrange(-1 << 12, 1 << 20) for _ in range(n)]
    addrs = [max(0, a) for a in addrs]
    if mode == 0:
        return "0 " + " ".join(f"0x{a:016x}" for a in addrs)
    return f"2 0x{addrs[0]:x}" + "".join(f" {addrs[i + 1] - addrs[i]}" for i in range(n - 1))


def _random_lines(rng: random.Random, count: int, v5: bool) -> list[str]:
    lines: list[str] = []
    for _ in range(count):
        if lines and rng.random() < 0.3:
            lines.append(rng.choice(lines))  # repeats: counted, not re-parsed
            continue
        op, width = rng.choice(_OPS)
        mask = rng.choice([0xFFFFFFFF, 0xFFFFFFFF, 0x0000FFFF, 0x80000001, 0x1, 0])
        n = mask.bit_count()
        pc = rng.randrange(0, 64) * 16
        text = f"{pc:04x} {mask:08x} 1 R{rng.randrange(0, 30)} {op} 2 R2 R3 {width}"
        if width:
            mode = rng.choice([0, 1, 2, 2]) if n else 1
            base = rng.choice(_BASES) + rng.randrange(0, 1 << 14) * rng.choice([1, 4, 16, 128])
            text += " " + (_addr_tail(rng, n, mode, base, width) if n else "1 0x0 0")
        if v5:
            text += f" {rng.choice([0, 4, -16, 4096])}"
        lines.append(text + " ")
    return lines


def _kernel_text(lines: list[str], version: int, warps: int = 3, bad_shmem: bool = False) -> bytes:
    spec = TraceSpec(grid=(2, 1, 1), block=(96, 1, 1), tracer_version=version,
                     header_overrides={"shmem": "1"} if bad_shmem else {})
    out = [header_text(spec)]
    per = -(-len(lines) // (2 * warps))
    k = 0
    for b in range(2):
        out.append(f"#BEGIN_TB\n\nthread block = {b},0,0\n\n")
        for w in range(warps):
            part = lines[k : k + per]
            k += per
            out.append(f"warp = {w}\ninsts = {len(part)}\n" + "".join(x + "\n" for x in part) + "\n")
        out.append("#END_TB\n\n")
    return "".join(out).encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 300), v5=st.booleans(),
       chunk=st.sampled_from([4 << 20, 2048, 700]), bad_shmem=st.booleans())
def test_random_memory_lines_identical(
    seed: int, count: int, v5: bool, chunk: int, bad_shmem: bool
) -> None:
    rng = random.Random(seed)
    text = _kernel_text(_random_lines(rng, count, v5), 5 if v5 else 4, bad_shmem=bad_shmem)
    _compare(text, chunk_bytes=chunk)


def test_smem_extent_fallback_identical() -> None:
    """An implausible '-shmem' header: shared memory is the extent of the shared addresses."""
    lines = ["0100 0000000f 1 R4 LDS.U.128 1 R2 16 2 0x100 16 -16 48 0 ",
             "0110 ffffffff 0 STS 2 R2 R4 4 1 0x400 8 0 "]
    f = _compare(_kernel_text(lines, 5, warps=1, bad_shmem=True))
    assert f.row["smem_bytes"] == 0x400 + 31 * 8 + 4


def test_line_order_within_a_request_decides_reuse_time() -> None:
    """Reuse times count line accesses, so the order of one request's lines matters.

    The first request touches lines L and L+1 with L = 7 mod 8: iterated as a
    Python set, L+1 comes first, so L is the request's second access; after
    1,023 other lines, L is touched again at exactly the L1 distance (1,024).
    A parser that visited the lines in sorted order would see 1,025.
    """
    line = (GLOBAL_BASE >> 7) + 7
    lines = [f"0100 00000003 1 R4 LDG.E 1 R2 4 1 0x{line << 7:x} 128 0 "]
    lines += [f"0110 00000001 1 R5 LDG.E 1 R2 4 1 0x{(line + 100 + i) << 7:x} 0 0 "
              for i in range(1023)]
    lines.append(f"0120 00000001 1 R6 LDG.E 1 R2 4 1 0x{line << 7:x} 0 0 ")
    f = _compare(_kernel_text(lines, 5, warps=1))
    assert f.row["reuse_le_l1"] == 1.0


def test_sampler_halving_and_unique_patterns_identical() -> None:
    """Unique address lists (gathers), then repeating ones, then unique again.

    More than 65,536 distinct global lines make the footprint sampler halve
    mid-file; the unique phases drive the pattern cache into its low-hit mode
    (patterns not kept, the plain path) and the repeating phase back out.
    """
    rng = random.Random(7)
    shared_lists = [" ".join(str(rng.randrange(-64, 64) * 4) for _ in range(31)) for _ in range(8)]
    lines = []
    for i in range(30000):
        base = GLOBAL_BASE + rng.randrange(0, 1 << 30) * 4
        if 10000 <= i < 20000:
            deltas = rng.choice(shared_lists)
            op = rng.choice(["LDG.E 1 R2 4", "STS 2 R2 R3 4", "ST.E 2 R2 R3 4"])
            if op.startswith("STS") or rng.random() < 0.5:
                base = SHMEM_BASE + rng.randrange(0, 1 << 12) * 4 if op.startswith("ST.") else \
                    rng.randrange(0, 1 << 12) * 4 + rng.choice([0, 1, 2])
        else:
            deltas = " ".join(str(rng.randrange(128, 1 << 16)) for _ in range(31))
            op = "LDG.E.128 1 R2 16"
        lines.append(f"{(i % 50) * 16:04x} ffffffff 1 R4 {op} 2 0x{base:x} {deltas} 0 ")
        if i % 3 == 0:
            lines.append(f"{(i % 50) * 16:04x} ffffffff 1 R4 LDG.E 1 R2 4 1 0x{base:x} 4 0 ")
    f = _compare(_kernel_text(lines, 5), chunk_bytes=256 << 10)
    assert f.row["footprint_lines"] > 65536 and f.row["smem_bank_conflicts"] > 0


# ---- malformed input ----------------------------------------------------------------------
_GOOD = "0100 ffffffff 1 R4 LDG.E.128 1 R2 16 2 0x7f0000000000 16 16 16 16 16 16 16 3984 " \
        "16 16 16 16 16 16 16 3984 16 16 16 16 16 16 16 3984 16 16 16 16 16 16 16 0 "
_BAD_TAILS = [
    "16 2 0x7f0000000000 16 16 0 ",                         # too few deltas + imm -> bad imm
    "16 2 0x7f0000000000 " + "16 " * 31 + "0 junk ",        # junk after the immediate
    "16 2 0x7f0000000000 " + "16 " * 30 + "1x ",            # a bad delta
    "16 1 0x7f000000zz00 16 0 ",                            # a bad base
    "16 1 0x7f0000000000 ",                                 # no stride
    "16 1 0x7f0000000000 4 0 STORE_DATA ",                  # fine: store data marker
    "16 3 0x7f0000000000 4 0 ",                             # a bad mode
]


@pytest.mark.parametrize("tail", _BAD_TAILS)
@pytest.mark.parametrize("seen", [False, True], ids=["first", "after-a-good-line"])
def test_malformed_memory_lines_same_error(tail: str, seen: bool) -> None:
    bad = "0100 ffffffff 1 R4 LDG.E.128 1 R2 " + tail
    lines = ([_GOOD] * 3 if seen else []) + [bad] + [_GOOD]
    data = _kernel_text(lines, 5, warps=1)
    if "STORE_DATA" in tail:
        _compare(data)
        return
    err = _compare_error(data)
    assert err.file == "k.traceg" and err.line is not None and err.line > 0


def test_huge_deltas_identical() -> None:
    """Deltas beyond 64 bits are nonsense but parse; both parsers count them the same."""
    huge = 1 << 70
    lines = [f"0100 00000003 1 R4 LDG.E 1 R2 4 2 0x7f0000000000 {huge} 0 ",
             f"0110 00000003 1 R4 LDS 1 R2 4 2 0x100 {-huge} 0 ",
             f"0120 00000003 1 R4 LDG.E 1 R2 4 1 0x7f0000000000 {huge} 0 "]
    f = _compare(_kernel_text(lines * 2, 5, warps=1))
    assert f.row["gmem_requests"] == 4


@settings(max_examples=60, deadline=None)
@given(data=st.data(), cap=st.sampled_from([4, 16, 64, 1 << 16]),
       span=st.sampled_from([8, 200, 1 << 20, 1 << 62, 1 << 70]))
def test_line_sampler_identical(data: st.DataObject, cap: int, span: int) -> None:
    """LineSampler against the reference one: halving, duplicates, repeats, lines beyond 64 bits."""
    new, ref = LineSampler(cap), ReferenceSampler(cap)
    requests = data.draw(st.lists(st.tuples(
        st.lists(st.integers(-span, span), max_size=40), st.integers(1, 3),
    ), max_size=120))
    for lines, reps in requests:
        new.access(lines, reps)
        ref.access(lines, reps)
    for s in (new, ref):
        assert s.footprint == s.footprint
    assert new.state() == ref.state()
    assert _same(new.fractions()[0], ref.fractions()[0])
    assert _same(new.fractions()[1], ref.fractions()[1])


@settings(max_examples=300, deadline=None)
@given(addrs=st.lists(st.integers(-(1 << 40), 1 << 40), max_size=32),
       align=st.sampled_from([1, 4, 16, 128]), width=st.sampled_from([1, 2, 4, 8, 12, 16, 32, 200]),
       shift=st.sampled_from([5, 7]))
def test_units_touched_identical(addrs: list[int], align: int, width: int, shift: int) -> None:
    """Same units in the same iteration order (the sampler's reuse times depend on it)."""
    addrs = [a * align for a in addrs]
    assert list(units_touched(addrs, width, shift)) == list(
        reference_units_touched(addrs, width, shift))
