"""The fast trace parser against recorded outputs of the pre-fast-path parser, feature by feature.

The oracle is ``tests/data/parser-golden/kernel-features.json.gz``: for every
input below, the output of the line-by-line parser as it was before the fast
path (commit 3f5e7bc), recorded once on 2026-12-07 by
``tests/support/record_parser_golden.py`` while that parser was still kept in
``tests/support/reference_parser/`` (deleted since; it was partly a copy of the
code under test). Each input's sha256 is recorded too, so a changed generator
or input builder fails here instead of being compared against a stale answer.

Every per-kernel output (the KernelTable row, header, warnings, unknown and
tensor opcodes, line and byte counts) must be identical, NaN and value types
included, on the real traces, on every generated variant and mix, across chunk
sizes and feeds, and on fixed random memory lines (all address modes and
spaces, widths beyond one line, enough distinct lines to make the footprint
sampler halve). Malformed input must fail the same way: a TraceFormatError
naming the same file and line, with the same message.

The small pieces are checked against independent readings written here:
:func:`units_touched` against a byte-by-byte expansion (plus the recorded
iteration order, which the sampler's reuse times depend on), and
:class:`LineSampler` against a plain simulation of the algorithm its docstring
describes.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
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
from cascade.traces.header import KernelHeader
from cascade.traces.memory import LineSampler, units_touched
from cascade.traces.parse import KernelFeatures, KernelTraceParser
from tests.support.paths import SHARED_DATA, TEST_DATA

GOLDEN = TEST_DATA / "parser-golden" / "kernel-features.json.gz"
DATA = SHARED_DATA
REAL_TRACES = sorted(p for p in (DATA / "traces").glob("*/kernel-*.trace*"))
REAL_CHUNKS = [4 << 20, 4096, 333]
_NOT_RECORDABLE = ("the goldens were recorded from the pre-fast-path parser, which is gone: review "
                   "the change; never re-record them with the parser under test "
                   "(see tests/support/record_parser_golden.py)")


# ---- cases: an input, the (chunk, feed) runs the test parses it with ------------------------
@dataclass(frozen=True)
class Run:
    """One parse of a case: chunk size, feed size, and whether the xz form is fed."""

    chunk_bytes: int = 4 << 20
    feed: int = 1 << 20
    xz: bool = False

    @property
    def key(self) -> str:
        return f"chunk={self.chunk_bytes} feed={self.feed}" + (" xz" if self.xz else "")


@dataclass(frozen=True)
class Case:
    """A parser input; ``text`` (the uncompressed input) is what the recorded sha256 covers."""

    name: str
    text: bytes
    runs: tuple[Run, ...]
    xz_data: bytes | None = None
    """fed on xz runs (default: ``lzma.compress(text)``)"""
    truth: Any = None

    def data(self, run: Run) -> bytes:
        if not run.xz:
            return self.text
        return self.xz_data if self.xz_data is not None else lzma.compress(self.text)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def real_case(rel: str) -> Case | None:
    """A real trace under ../shared/data (``rel`` relative to it); None when it is not there."""
    path = DATA / rel
    if not path.is_file():
        return None
    runs = tuple(Run(c, feed=1000) for c in REAL_CHUNKS)
    runs += tuple(Run(c, xz=True) for c in REAL_CHUNKS)
    return Case(f"real:{rel}", path.read_bytes(), runs)


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
MIXES = ["simple", "real", "unique"]


def _variant_id(kw: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in kw.items())


def generated_case(tmp: Path, kw: dict, mix: str) -> Case:
    spec = TraceSpec(mix=mix, grid=(6, 1, 1), block=(80, 1, 1), iterations=4, **kw)
    [(path, truth)] = write_trace_folder(tmp / f"{_variant_id(kw)}-{mix}", [spec])
    return Case(f"generated:{_variant_id(kw)}-{mix}", path.read_bytes(),
                (Run(), Run(5000, feed=777)), truth=truth)


def large_case(tmp: Path, mix: str) -> Case:
    """3 MB from write_large_trace, fed as the xz file it writes; the sha256 covers the text."""
    path = tmp / f"large-{mix}.traceg.xz"
    truth = write_large_trace(path, 3, xz=True, mix=mix, variants=4)
    raw = path.read_bytes()
    return Case(f"large:{mix}", lzma.decompress(raw), (Run(1 << 20, xz=True),), xz_data=raw,
                truth=truth)


# ---- fixed random memory lines --------------------------------------------------------------
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


def _random_kernels() -> list[tuple[int, int, bool, int, bool]]:
    """40 fixed (seed, line count, v5, chunk bytes, bad shmem header): every v5 x bad-shmem x
    chunk combination at least three times, line counts from 1 to 300."""
    rng = random.Random(44)
    out = []
    for i in range(40):
        count = 1 if i == 0 else 300 if i == 1 else rng.randint(1, 300)
        chunk = (4 << 20, 2048, 700)[i % 3]
        out.append((rng.getrandbits(32), count, bool(i & 1), chunk, bool(i & 2)))
    return out


RANDOM_KERNELS = _random_kernels()


def random_case(seed: int, count: int, v5: bool, chunk: int, bad_shmem: bool) -> Case:
    rng = random.Random(seed)
    text = _kernel_text(_random_lines(rng, count, v5), 5 if v5 else 4, bad_shmem=bad_shmem)
    return Case(f"random:{seed}-{count}-v5{v5}-chunk{chunk}-bad{bad_shmem}", text, (Run(chunk),))


# ---- hand-made kernels ----------------------------------------------------------------------
def smem_fallback_case() -> Case:
    lines = ["0100 0000000f 1 R4 LDS.U.128 1 R2 16 2 0x100 16 -16 48 0 ",
             "0110 ffffffff 0 STS 2 R2 R4 4 1 0x400 8 0 "]
    return Case("smem-fallback", _kernel_text(lines, 5, warps=1, bad_shmem=True), (Run(),))


def line_order_case() -> Case:
    line = (GLOBAL_BASE >> 7) + 7
    lines = [f"0100 00000003 1 R4 LDG.E 1 R2 4 1 0x{line << 7:x} 128 0 "]
    lines += [f"0110 00000001 1 R5 LDG.E 1 R2 4 1 0x{(line + 100 + i) << 7:x} 0 0 "
              for i in range(1023)]
    lines.append(f"0120 00000001 1 R6 LDG.E 1 R2 4 1 0x{line << 7:x} 0 0 ")
    return Case("line-order", _kernel_text(lines, 5, warps=1), (Run(),))


def sampler_halving_case() -> Case:
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
    return Case("sampler-halving", _kernel_text(lines, 5), (Run(256 << 10),))


def huge_deltas_case() -> Case:
    huge = 1 << 70
    lines = [f"0100 00000003 1 R4 LDG.E 1 R2 4 2 0x7f0000000000 {huge} 0 ",
             f"0110 00000003 1 R4 LDS 1 R2 4 2 0x100 {-huge} 0 ",
             f"0120 00000003 1 R4 LDG.E 1 R2 4 1 0x7f0000000000 {huge} 0 "]
    return Case("huge-deltas", _kernel_text(lines * 2, 5, warps=1), (Run(),))


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


def malformed_case(tail: int, seen: bool) -> Case:
    bad = "0100 ffffffff 1 R4 LDG.E.128 1 R2 " + _BAD_TAILS[tail]
    lines = ([_GOOD] * 3 if seen else []) + [bad] + [_GOOD]
    return Case(f"malformed:{tail}-{'after-a-good-line' if seen else 'first'}",
                _kernel_text(lines, 5, warps=1), (Run(),))


def all_cases(tmp: Path) -> Iterator[Case]:
    """Every parser case the tests use (the recorder's list); real traces only where present."""
    for path in REAL_TRACES:
        case = real_case(path.relative_to(DATA).as_posix())
        if case is not None:
            yield case
    for kw in VARIANTS:
        for mix in MIXES:
            yield generated_case(tmp, kw, mix)
    for mix in MIXES:
        yield large_case(tmp, mix)
    for params in RANDOM_KERNELS:
        yield random_case(*params)
    yield smem_fallback_case()
    yield line_order_case()
    yield sampler_halving_case()
    yield huge_deltas_case()
    for tail in range(len(_BAD_TAILS)):
        for seen in (False, True):
            yield malformed_case(tail, seen)


# ---- outcomes: encoding, recorded values, comparison ----------------------------------------
def _encode_value(v: Any) -> list[Any]:
    """A row value with its exact type; floats as repr (exact, NaN/inf safe)."""
    if type(v) is float:
        return ["float", repr(v)]
    if v is None or type(v) in (int, str, bool):
        return [type(v).__name__, v]
    raise TypeError(f"row value of type {type(v).__name__}: {v!r}")


def _decode_value(tag: str, v: Any) -> Any:
    if tag == "NoneType":
        return None
    return {"float": float, "int": int, "str": str, "bool": bool}[tag](v)


def encode_outcome(outcome: KernelFeatures | TraceFormatError) -> dict[str, Any]:
    """What a parse gave, as JSON: every compared field, or the error's file, line and message."""
    if isinstance(outcome, TraceFormatError):
        return {"error": {"file": outcome.file, "line": outcome.line, "message": str(outcome)}}
    f = outcome
    return {"file": f.file, "row": [[k, *_encode_value(v)] for k, v in f.row.items()],
            "header": msgspec.to_builtins(f.header), "format": f.format,
            "warnings": list(f.warnings),
            "unknown_opcodes": dict(f.unknown_opcodes), "tensor_ops": dict(f.tensor_ops),
            "lines": f.lines, "instruction_lines": f.instruction_lines, "text_bytes": f.text_bytes}


@cache
def golden() -> dict[str, Any]:
    if not GOLDEN.exists():
        return {"cases": {}, "units_touched_order": []}
    with gzip.open(GOLDEN, "rt") as fh:
        return json.load(fh)


def _recorded(case: Case, run: Run) -> dict[str, Any]:
    assert GOLDEN.exists(), f"{GOLDEN} is missing"
    rec = golden()["cases"].get(case.name)
    assert rec is not None, f"no recorded output for case {case.name!r} (new?); {_NOT_RECORDABLE}"
    sha = _sha(case.text)
    assert sha == rec["sha256"], (
        f"the input of case {case.name!r} changed (sha256 {sha} != recorded {rec['sha256']}): the "
        f"generator or the test's input builder changed; {_NOT_RECORDABLE}")
    assert run.key in rec["runs"], f"case {case.name!r} has no recorded run {run.key!r}"
    return rec["outputs"][rec["runs"][run.key]]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _parse(data: bytes, run: Run) -> KernelFeatures:
    parser = KernelTraceParser("k.traceg", chunk_bytes=run.chunk_bytes)
    for i in range(0, len(data), run.feed):
        parser.feed(data[i : i + run.feed])
    return parser.finish()


def _check(case: Case, run: Run) -> KernelFeatures:
    """Parse ``case`` as ``run`` says; the features must equal the recorded ones exactly."""
    exp = _recorded(case, run)
    assert "error" not in exp, f"recorded: {exp['error']}"
    new = _parse(case.data(run), run)
    row = {k: _decode_value(tag, v) for k, tag, v in exp["row"]}
    assert new.row.keys() == row.keys()
    diff = {k: (v, row[k]) for k, v in new.row.items() if not _same(v, row[k])}
    assert not diff
    assert new.header == msgspec.convert(exp["header"], KernelHeader), "header"
    for field in ("file", "format", "warnings", "unknown_opcodes", "tensor_ops",
                  "lines", "instruction_lines", "text_bytes"):
        assert getattr(new, field) == exp[field], field
    return new


def _check_error(case: Case, run: Run) -> TraceFormatError:
    exp = _recorded(case, run)
    assert "error" in exp, "recorded: a successful parse"
    with pytest.raises(TraceFormatError) as new:
        _parse(case.data(run), run)
    assert (new.value.file, new.value.line) == (exp["error"]["file"], exp["error"]["line"])
    assert str(new.value) == exp["error"]["message"]
    return new.value


def test_golden_is_recorded_and_small() -> None:
    assert GOLDEN.exists()
    assert GOLDEN.stat().st_size < 1 << 20
    assert golden()["cases"]


# ---- real traces ----------------------------------------------------------------------------
def _real_names() -> list[str]:
    recorded = [n.removeprefix("real:") for n in golden()["cases"] if n.startswith("real:")]
    present = [p.relative_to(DATA).as_posix() for p in REAL_TRACES]
    return sorted(set(recorded) | set(present))


def test_there_are_real_traces() -> None:
    assert any(n.startswith("real:") for n in golden()["cases"])


@pytest.mark.parametrize("rel", _real_names())
@pytest.mark.parametrize("chunk_bytes", REAL_CHUNKS)
def test_real_trace_identical(rel: str, chunk_bytes: int) -> None:
    case = real_case(rel)
    if case is None:
        pytest.skip(f"real trace {DATA / rel} is not here (../shared/data is not in git)")
    if case.name not in golden()["cases"]:
        pytest.skip(f"no recorded output for {rel}: it was added after the goldens were recorded "
                    "and the reference parser is gone, so nothing here can check it")
    for run in case.runs:
        if run.chunk_bytes == chunk_bytes:
            f = _check(case, run)
            assert f.instruction_lines > 0


# ---- generated traces -----------------------------------------------------------------------
@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("kw", VARIANTS, ids=_variant_id)
def test_generated_identical(tmp_path: Path, kw: dict, mix: str) -> None:
    case = generated_case(tmp_path, kw, mix)
    for run in case.runs:
        f = _check(case, run)
        assert f.row["warp_insts"] == case.truth.columns["warp_insts"]


@pytest.mark.parametrize("mix", MIXES)
def test_large_generated_identical(tmp_path: Path, mix: str) -> None:
    case = large_case(tmp_path, mix)
    [run] = case.runs
    f = _check(case, run)
    assert f.row["warp_insts"] == case.truth.columns["warp_insts"]


# ---- fixed random memory lines --------------------------------------------------------------
@pytest.mark.parametrize(("seed", "count", "v5", "chunk", "bad_shmem"), RANDOM_KERNELS,
                         ids=lambda v: str(v))
def test_random_memory_lines_identical(
    seed: int, count: int, v5: bool, chunk: int, bad_shmem: bool
) -> None:
    case = random_case(seed, count, v5, chunk, bad_shmem)
    _check(case, case.runs[0])


def test_smem_extent_fallback_identical() -> None:
    """An implausible '-shmem' header: shared memory is the extent of the shared addresses."""
    case = smem_fallback_case()
    f = _check(case, case.runs[0])
    assert f.row["smem_bytes"] == 0x400 + 31 * 8 + 4


def test_line_order_within_a_request_decides_reuse_time() -> None:
    """Reuse times count line accesses, so the order of one request's lines matters.

    The first request touches lines L and L+1 with L = 7 mod 8: iterated as a
    Python set, L+1 comes first, so L is the request's second access; after
    1,023 other lines, L is touched again at exactly the L1 distance (1,024).
    A parser that visited the lines in sorted order would see 1,025.
    """
    case = line_order_case()
    f = _check(case, case.runs[0])
    assert f.row["reuse_le_l1"] == 1.0


def test_sampler_halving_and_unique_patterns_identical() -> None:
    """Unique address lists (gathers), then repeating ones, then unique again.

    More than 65,536 distinct global lines make the footprint sampler halve
    mid-file; the unique phases drive the pattern cache into its low-hit mode
    (patterns not kept, the plain path) and the repeating phase back out.
    """
    case = sampler_halving_case()
    f = _check(case, case.runs[0])
    assert f.row["footprint_lines"] > 65536 and f.row["smem_bank_conflicts"] > 0


# ---- malformed input ------------------------------------------------------------------------
@pytest.mark.parametrize("tail", range(len(_BAD_TAILS)), ids=lambda i: _BAD_TAILS[i][:40])
@pytest.mark.parametrize("seen", [False, True], ids=["first", "after-a-good-line"])
def test_malformed_memory_lines_same_error(tail: int, seen: bool) -> None:
    case = malformed_case(tail, seen)
    if "STORE_DATA" in _BAD_TAILS[tail]:
        _check(case, case.runs[0])
        return
    err = _check_error(case, case.runs[0])
    assert err.file == "k.traceg" and err.line is not None and err.line > 0


def test_huge_deltas_identical() -> None:
    """Deltas beyond 64 bits are nonsense but parse; counted as the reference parser did."""
    case = huge_deltas_case()
    f = _check(case, case.runs[0])
    assert f.row["gmem_requests"] == 4


# ---- LineSampler against a plain simulation -------------------------------------------------
class _SimSampler:
    """The sampling :class:`LineSampler`'s docstring describes, written out the slow way.

    Every access time of every line is kept. A line is kept at sampling level
    ``k`` when the top ``k`` bits of ``line * 0x9E3779B97F4A7C15 mod 2**64``
    are zero; the levels only rise, so a line kept now was kept at each of its
    earlier accesses and its previous access is simply the last one in its
    history. After each request the level rises while more than ``cap``
    distinct lines are kept (up to 40 bits). A reuse of a kept line has reuse
    time = line accesses since its previous access; ``repeats`` adds
    ``repeats - 1`` reuses at time 0 per kept line access.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.k = 0
        self.t = 0
        self.history: dict[int, list[int]] = {}
        self.reuse_times: list[int] = []

    @staticmethod
    def kept(line: int, k: int) -> bool:
        return ((line * 0x9E3779B97F4A7C15) & (2**64 - 1)) >> (64 - k) == 0

    def kept_lines(self) -> list[int]:
        return [line for line in self.history if self.kept(line, self.k)]

    def access(self, lines: list[int], repeats: int) -> None:
        for line in lines:
            self.t += 1
            times = self.history.setdefault(line, [])
            if self.kept(line, self.k):
                if times:
                    self.reuse_times.append(self.t - times[-1])
                self.reuse_times += [0] * (repeats - 1)
            times.append(self.t)
        while len(self.kept_lines()) > self.cap and self.k < 40:
            self.k += 1

    def footprint(self) -> float:
        return float(len(self.kept_lines()) * 2**self.k)

    def fractions(self) -> tuple[float, float]:
        n = len(self.reuse_times)
        if not n:
            return math.nan, math.nan
        return (sum(d <= 1024 for d in self.reuse_times) / n,
                sum(d <= 32 * 1024 for d in self.reuse_times) / n)

    def state(self) -> dict[str, object]:
        return {"k": self.k, "last": {line: self.history[line][-1] for line in self.kept_lines()},
                "t": self.t, "reuses": len(self.reuse_times),
                "le_l1": sum(d <= 1024 for d in self.reuse_times),
                "le_l2": sum(d <= 32 * 1024 for d in self.reuse_times)}


def _assert_sampler_matches(new: LineSampler, sim: _SimSampler) -> None:
    assert new.state() == sim.state()
    assert new.footprint == sim.footprint()
    assert _same(new.fractions()[0], sim.fractions()[0])
    assert _same(new.fractions()[1], sim.fractions()[1])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), cap=st.sampled_from([4, 16, 64, 1 << 16]),
       span=st.sampled_from([8, 200, 1 << 20, 1 << 62, 1 << 70]))
def test_line_sampler_identical(data: st.DataObject, cap: int, span: int) -> None:
    """LineSampler against the simulation: halving, duplicates, repeats, lines beyond 64 bits."""
    new, sim = LineSampler(cap), _SimSampler(cap)
    requests = data.draw(st.lists(st.tuples(
        st.lists(st.integers(-span, span), max_size=40), st.integers(1, 3),
    ), max_size=120))
    for lines, reps in requests:
        new.access(lines, reps)
        sim.access(lines, reps)
    _assert_sampler_matches(new, sim)


@pytest.mark.parametrize("cap", [4, 1 << 17])
def test_line_sampler_reuse_thresholds(cap: int) -> None:
    """Reuse times at and just past the L1 (1,024) and L2 (32,768) distances."""
    new, sim = LineSampler(cap), _SimSampler(cap)
    filler = iter(range(1000, 1 << 30))
    for gap in (1023, 1024, 32767, 32768):  # line 7 again after `gap` other lines
        for s in (new, sim):
            s.access([7], 1)
        others = [next(filler) for _ in range(gap)]
        for s in (new, sim):
            s.access(others, 1)
    for s in (new, sim):
        s.access([7], 2)
    _assert_sampler_matches(new, sim)
    if cap > 1 << 16:  # exact (67,583 distinct lines): reuses at 1024, 1025, 32768, 32769 and 0
        assert new.fractions() == (2 / 5, 4 / 5)


# ---- units_touched against a byte-by-byte expansion -----------------------------------------
def _units_by_bytes(addrs: list[int], width: int, shift: int) -> set[int]:
    return {b >> shift for a in addrs for b in range(a, a + width)}


@settings(max_examples=300, deadline=None)
@given(addrs=st.lists(st.integers(-(1 << 40), 1 << 40), max_size=32),
       align=st.sampled_from([1, 4, 16, 128]), width=st.sampled_from([1, 2, 4, 8, 12, 16, 32, 200]),
       shift=st.sampled_from([5, 7]))
def test_units_touched_identical(addrs: list[int], align: int, width: int, shift: int) -> None:
    """The units every byte of every lane falls in."""
    addrs = [a * align for a in addrs]
    got = units_touched(addrs, width, shift)
    assert set(got) == _units_by_bytes(addrs, width, shift)


def units_order_inputs() -> list[tuple[list[int], int, int]]:
    """Fixed (addresses, width, shift) inputs whose units_touched iteration order is recorded."""
    rng = random.Random(4444)
    out = []
    for i in range(200):
        n = rng.randint(0, 32)
        align = rng.choice([1, 4, 16, 128])
        if i % 2:  # clustered: lanes share and straddle units, where insertion order shows
            base = rng.randrange(-(1 << 20), 1 << 40)
            addrs = [base + rng.randrange(0, 64) * align for _ in range(n)]
        else:
            addrs = [rng.randrange(-(1 << 40), 1 << 40) * align for _ in range(n)]
        out.append((addrs, rng.choice([1, 2, 4, 8, 12, 16, 32, 200]), rng.choice([5, 7])))
    return out


def units_order(units: Any) -> list[int]:
    """The iteration order of ``units`` as indices into its sorted values (compact to record)."""
    rank = {u: i for i, u in enumerate(sorted(units))}
    return [rank[u] for u in units]


def test_units_touched_iteration_order_as_recorded() -> None:
    """Same iteration order as the pre-fast-path parser's (the sampler's reuse times use it)."""
    inputs = units_order_inputs()
    recorded = golden()["units_touched_order"]
    assert len(recorded) == len(inputs)
    for (addrs, width, shift), rec in zip(inputs, recorded, strict=True):
        assert _sha(json.dumps([addrs, width, shift]).encode()) == rec["sha256"], (
            f"units_touched_order inputs changed; {_NOT_RECORDABLE}")
        got = units_touched(addrs, width, shift)
        assert set(got) == _units_by_bytes(addrs, width, shift)
        assert units_order(got) == rec["order"], (addrs, width, shift)
