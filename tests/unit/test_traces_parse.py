"""Trace parser + features: the real v4 trace, generated variants, bad input, fuzz."""

from __future__ import annotations

import contextlib
import io
import lzma
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade.errors import TraceFormatError, TruncatedStreamError
from cascade.traces.folder import parse_trace_folder, read_kernelslist, read_stats_csv
from cascade.traces.generate import TraceSpec, header_text, write_kernel, write_trace_folder
from cascade.traces.lines import InstructionLine, format_instruction_line, parse_instruction_line
from cascade.traces.opcodes import mma_flops
from cascade.traces.parse import KernelTraceParser, parse_kernel_file, parse_kernel_stream
from tests.support.paths import SHARED_DATA

DATA = SHARED_DATA
REAL = DATA / "traces" / "matrixmul-32x32-sm61"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# ---- the real trace (counts pinned with awk over the file) --------------------------------
def test_real_v4_trace_golden() -> None:
    f = parse_kernel_file(REAL / "kernel-1.traceg")
    r = f.row
    assert f.format == "traceg" and f.warnings == [] and f.unknown_opcodes == {}
    assert r["name"] == "_Z8mult_gpuIfEvPT_S1_S1_ii" and r["kernel_id"] == 1
    assert (r["grid_x"], r["grid_y"], r["grid_z"]) == (1, 1, 1)
    assert (r["block_x"], r["block_y"], r["block_z"]) == (32, 32, 1)
    assert (r["regs"], r["smem_bytes"], r["sm_version"], r["stream"]) == (30, 8192, 61, 0)
    assert r["warp_insts"] == 4416 and r["warps"] == 32
    assert r["insts_per_warp_mean"] == 138 and r["insts_per_warp_std"] == 0
    # awk: FFMA 1024, LDS 1280, STS 64, LDG 64, STG 32, BAR 64, MEMBAR 64, BRA 64, EXIT 32,
    # IADD 256 XMAD 480 SHL 192 ISCADD 128 MOV 128 SHR 96 ISETP 64 IADD32I 64, S2R 224, NOP 96
    assert r["insts_fp32"] == 1024
    assert r["insts_ld_shared"] == 1280 and r["insts_st_shared"] == 64
    assert r["insts_ld_global"] == 64 and r["insts_st_global"] == 32
    assert r["insts_barrier"] == 128 and r["insts_branch"] == 96
    assert r["insts_int"] == 1408 and r["insts_other"] == 320
    assert r["insts_pred_off"] == 64 and r["insts_partial"] == 0
    assert r["smem_accesses"] == 1344
    # 32x32 fp32 matrices A, B, C: 4 KiB each = 32 lines; every LDG/STG is 128 B = 4 sectors
    assert r["gmem_requests"] == 96 and r["gmem_sectors"] == 384
    assert r["gmem_ld_sectors"] == 256 and r["gmem_st_sectors"] == 128
    assert r["footprint_lines"] == 96
    assert r["dep_chain"] > 10
    assert f.instruction_lines == 4416


def test_real_folder_and_lists() -> None:
    entries = read_kernelslist(REAL / "kernelslist.g")
    assert [e.kind for e in entries] == ["memcpy", "memcpy", "kernel"]
    assert entries[0].address == 0x00007FB02D700000 and entries[0].nbytes == 4096
    stats = read_stats_csv(REAL / "stats.csv")
    assert stats[0]["total_insts"] == "4416"
    res = parse_trace_folder(REAL)
    assert not res.failures and len(res.memcpys) == 2
    table = res.table()
    assert table["warp_insts"].tolist() == [4416.0]


def test_chunking_does_not_change_results() -> None:
    data = (REAL / "kernel-1.traceg").read_bytes()
    whole = parse_kernel_stream([data]).row
    parser = KernelTraceParser("x", chunk_bytes=777)
    for i in range(0, len(data), 1000):
        parser.feed(data[i : i + 1000])
    small = parser.finish().row
    for k, v in whole.items():
        assert v == small[k] or (isinstance(v, float) and math.isnan(v) and math.isnan(small[k]))


# ---- generated variants: exact ground truth ------------------------------------------------
VARIANTS = [
    {"raw": False, "tracer_version": 2},
    {"raw": False, "tracer_version": 3, "compress": False},
    {"raw": False, "tracer_version": 4, "lineinfo": True},
    {"raw": False, "tracer_version": 5, "clusters": True},
    {"raw": False, "tracer_version": 5, "lineinfo": True, "compress": False},
    {"raw": True, "tracer_version": 3},
    {"raw": True, "tracer_version": 4, "lineinfo": True, "compress": False},
    {"raw": True, "tracer_version": 5, "seed": 3},
]


@pytest.mark.parametrize("xz", [False, True])
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_generated_variant_matches_truth(tmp_path: Path, kw: dict, xz: bool) -> None:
    spec = TraceSpec(**kw)
    [(path, truth)] = write_trace_folder(tmp_path, [spec], xz=xz, ctx="0x55d1c0" if xz else None)
    f = parse_kernel_file(path)
    assert f.format == ("trace" if spec.raw else "traceg")
    for col, expected in truth.columns.items():
        assert _close(f.row[col], expected), (col, f.row[col], expected)
    assert f.row["insts_tensor"] == truth.columns["insts_tensor"] > 0
    assert f.tensor_ops == truth.tensor_ops
    assert f.unknown_opcodes == {"FOO.BAR": int(truth.columns["warps"])}
    assert f.text_bytes == truth.text_bytes
    assert f.row["insts_partial"] > 0 and f.row["smem_bank_conflicts"] > 0
    assert f.row["insts_per_warp_std"] > 0


def test_generated_folder_lists_and_stats(tmp_path: Path) -> None:
    specs = [TraceSpec(kernel_id=i, raw=True, grid=(2, 1, 1)) for i in (1, 2, 3)]
    written = write_trace_folder(tmp_path, specs, xz=True, ctx="0x7f")
    entries = read_kernelslist(tmp_path / "kernelslist")
    assert [e.file for e in entries if e.kind == "kernel"] == [p.name for p, _ in written]
    assert sum(e.kind == "memcpy" for e in entries) == 2
    stats = read_stats_csv(tmp_path / "stats.csv")
    assert [int(r["total_insts"]) for r in stats] == [
        int(t.columns["warp_insts"]) for _, t in written
    ]
    (tmp_path / written[1][0].name).unlink()
    res = parse_trace_folder(tmp_path)
    assert [k.row["kernel_id"] for k in res.kernels] == [1, 3]
    assert "missing" in res.failures[written[1][0].name]


def test_sm70_generates_fp32_not_tensor(tmp_path: Path) -> None:
    buf = io.StringIO()
    truth = write_kernel(TraceSpec(sm=70), buf)
    f = parse_kernel_stream([buf.getvalue().encode()])
    assert f.row["insts_tensor"] == 0 and f.row["insts_fp32"] == truth.columns["insts_fp32"]


# ---- bad input ------------------------------------------------------------------------------
def test_nonsense_header_warns_and_falls_back() -> None:
    spec = TraceSpec(header_overrides={"nregs": "21955", "binary version": "0", "shmem": "1"},
                     tracer_version=5)
    buf = io.StringIO()
    write_kernel(spec, buf)
    f = parse_kernel_stream([buf.getvalue().encode()], source_sm=90)
    assert f.row["regs"] == -1
    assert f.row["sm_version"] == 90
    assert f.row["smem_bytes"] > 0  # inferred from the shared addresses the trace touches
    text = " ".join(f.warnings)
    assert "nregs = 21955" in text and "binary version = 0" in text and "shmem = 1" in text
    assert f.row["warp_insts"] > 0


def test_malformed_line_names_file_line_and_field() -> None:
    lines = (REAL / "kernel-1.traceg").read_bytes().split(b"\n")
    lines[30] = b"0050 ffffffff 1 R2 XMAD.MRG 3 R3 R17 0"  # 3 sources announced, 2 given
    with pytest.raises(TraceFormatError) as exc:
        parse_kernel_stream([b"\n".join(lines)], file="k.traceg")
    assert exc.value.file == "k.traceg" and exc.value.line == 31
    assert "source register" in exc.value.expected or "mem_width" in exc.value.expected


def test_insts_count_larger_than_lines() -> None:
    text = (REAL / "kernel-1.traceg").read_bytes().replace(b"insts = 138", b"insts = 139", 1)
    with pytest.raises(TraceFormatError) as exc:
        parse_kernel_stream([text], file="k")
    assert "insts =" in exc.value.expected and exc.value.line is not None


def test_truncated_xz_stream() -> None:
    data = lzma.compress((REAL / "kernel-1.traceg").read_bytes())
    with pytest.raises(TruncatedStreamError) as exc:
        parse_kernel_stream([data[: len(data) // 2]], file="k.traceg.xz")
    assert exc.value.file == "k.traceg.xz"
    # a complete stream parses
    assert parse_kernel_stream([data]).row["warp_insts"] == 4416


def test_corrupt_xz_is_a_format_error() -> None:
    data = bytearray(lzma.compress((REAL / "kernel-1.traceg").read_bytes()))
    data[100:140] = b"\x00" * 40
    with pytest.raises(TraceFormatError):
        parse_kernel_stream([bytes(data)])


def test_raw_line_without_prefix() -> None:
    buf = io.StringIO()
    write_kernel(TraceSpec(raw=True, grid=(1, 1, 1)), buf)
    lines = buf.getvalue().encode().split(b"\n")
    idx = next(i for i, ln in enumerate(lines) if b"LDG" in ln)
    lines[idx] = lines[idx].split(b" ", 4)[4]
    with pytest.raises(TraceFormatError) as exc:
        parse_kernel_stream([b"\n".join(lines)], file="k.trace")
    assert exc.value.line == idx + 1


def test_empty_file() -> None:
    with pytest.raises(TraceFormatError):
        parse_kernel_stream([b""])


def test_dependency_chain_of_a_hand_made_warp() -> None:
    h = header_text(TraceSpec(grid=(1, 1, 1), block=(32, 1, 1)))
    body = "#BEGIN_TB\nthread block = 0,0,0\nwarp = 0\ninsts = 5\n0000 ffffffff 1 R1 MOV 0 0 \n0010 ffffffff 1 R2 IADD 1 R1 0 \n0020 ffffffff 1 R3 MOV 0 0 \n0030 ffffffff 1 R4 FFMA 3 R2 R3 R255 0 \n0040 ffffffff 0 EXIT 0 0 \n#END_TB\n"
    f = parse_kernel_stream([(h + body).encode()])
    assert f.row["dep_chain"] == 3 and f.row["warp_insts"] == 5 and f.row["insts_fp32"] == 1


def test_mma_flops_from_shape() -> None:
    assert mma_flops("HMMA.16816.F32.BF16") == 4096
    assert mma_flops("HMMA.1688.F32.TF32") == 2048
    assert mma_flops("IMMA.16832.S8.S8") == 8192
    assert mma_flops("HGMMA.64x128x16.F32") == 2 * 64 * 128 * 16 / 4
    assert mma_flops("HMMA.884.F32.F32.STEP0") == 512


# ---- property tests of the line parser -----------------------------------------------------
_opcodes = st.sampled_from(["LDG.E", "STG.E.128", "LDS.U.32", "FFMA", "HMMA.16816.F32", "IADD3",
                            "BRA", "EXIT", "ATOM.E.ADD", "LD.E.64"])


@st.composite
def instruction_lines(draw: st.DrawFn) -> tuple[InstructionLine, bool, bool]:
    lineinfo = draw(st.booleans())
    prefixed = draw(st.booleans())
    mask = draw(st.integers(0, 0xFFFFFFFF))
    n = mask.bit_count()
    width = draw(st.sampled_from([0, 1, 2, 4, 8, 16]))
    mode = None
    base = stride = 0
    addresses: tuple[int, ...] = ()
    if width:
        mode = draw(st.sampled_from([0, 1, 2]))
        base = draw(st.integers(0, 2**48))
        if mode == 1:
            stride = draw(st.integers(-4096, 4096))
        elif mode == 2:
            addresses = tuple(draw(st.lists(st.integers(-(2**20), 2**20), min_size=max(n - 1, 0),
                                            max_size=max(n - 1, 0))))
        else:
            addresses = tuple(draw(st.lists(st.integers(0, 2**60), min_size=n, max_size=n)))
            base = addresses[0] if n else 0
    inst = InstructionLine(
        line_num=draw(st.integers(0, 10**6)) if lineinfo else None,
        pc=draw(st.integers(0, 2**24)),
        mask=mask,
        dest=draw(st.none() | st.integers(0, 255)),
        opcode=draw(_opcodes),
        srcs=tuple(draw(st.lists(st.integers(0, 255), max_size=5))),
        width=width, mode=mode, base=base, stride=stride, addresses=addresses,
        immediate=draw(st.none() | st.integers(-(2**31), 2**31)),
        prefix=tuple(draw(st.lists(st.integers(0, 65535), min_size=4, max_size=4)))  # type: ignore[arg-type]
        if prefixed else None,
    )
    return inst, lineinfo, prefixed


@settings(max_examples=300, deadline=None)
@given(instruction_lines())
def test_line_round_trip(case: tuple[InstructionLine, bool, bool]) -> None:
    inst, lineinfo, prefixed = case
    text = format_instruction_line(inst)
    assert parse_instruction_line(text, lineinfo=lineinfo, prefixed=prefixed) == inst


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120) | st.text(max_size=120))
def test_garbage_line_raises_only_trace_format_error(garbage: bytes | str) -> None:
    for lineinfo in (False, True):
        try:
            parse_instruction_line(garbage, lineinfo=lineinfo, file="fuzz", lineno=7)
        except TraceFormatError as exc:
            assert exc.file == "fuzz" and exc.line == 7


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=6), st.integers(0, 40))
def test_garbage_body_raises_only_trace_format_error(garbage: list[bytes], at: int) -> None:
    lines = (REAL / "kernel-1.traceg").read_bytes().split(b"\n")[:80]
    lines[at + 20 : at + 20] = garbage
    with contextlib.suppress(TraceFormatError):
        parse_kernel_stream([b"\n".join(lines)])
