"""Synthetic Accel-Sim traces in the exact tracer formats, with known ground truth.

Used by golden tests (known counts), property tests and ``cascade bench
prepare`` (gigabytes streamed to disk). Every variant the parser reads can be
written: raw ``.trace`` (interleaved lines with the ``cta warp`` prefix) and
post-processed ``.traceg``; tracer versions 2 (pre-v3 prefixed ``.traceg``),
3, 4 and 5 (trailing immediate on every line); line numbers on/off; address
compression on (the tracer's base+stride / base+delta choice) or off (mode 0,
every address listed); xz on/off; ``-ctx_0x...`` file names; kernelslist /
kernelslist.g with MemcpyHtoD lines; stats.csv.

The ground truth is computed here from the generated program with its own
simple arithmetic (each instruction declares its class), independently of the
parser's classification tables.

Instruction mixes (``TraceSpec.mix``, ``write_large_trace(mix=...)``):

* ``simple`` (:func:`simple_program`): every feature the parser computes once
  or a few times per loop iteration (tensor, FP16/64, SFU, local, atomics,
  generic shared, an unknown opcode); tracer version 4 in large traces.
* ``real`` (:func:`real_program`): the NVBit tracer's output on a tiled SGEMM
  (version 5: an immediate on every line), proportioned after the real trace
  ``shared/data/traces/matrixmul-32x32-sm61`` (sm61, 4,416 lines) and the
  tracer's address compression. Lines, real trace vs generated:

  ============================  ==========================  ==========================
  share of lines                matrixmul-32x32-sm61        ``real`` mix
  ============================  ==========================  ==========================
  memory (mem_width > 0)        32.6%                       32.6%
  shared loads / stores         29.0% / 1.4%                25.4% / 3.2%
  global loads / stores         1.4% / 0.7%                 3.2% / 0.9%
  FP32 (FFMA) / integer         23.2% / 31.9%               25.4% / 35.6%
  barrier / branch / other      2.9% / 2.2% / 7.2%          3.2% / 1.9% / 1.3%
  address mode 1 / 2 (memory)   100% / 0%                   65% / 35%
  3 source registers            28%                         58%
  mean bytes per line           40                          57
  distinct memory lines         31% (one 32-warp block)     15% per 4 MB chunk
  ============================  ==========================  ==========================

  Mode 2 (base + delta list, the tracer's choice when lanes have no common
  stride) comes from 2-D tile loads (``LDG.E.128``: 16 B per lane, rows of
  128/256 B, then the row pitch), XOR-swizzled ``STS.128`` and broadcast-group
  ``LDS.U.128``; mode 1 from ``LDS.U.32`` (stride 4 / 8), stride-0
  broadcasts and contiguous stores. Shared offsets are block-relative, so
  shared lines repeat across blocks and (double-buffered) iterations as in a
  real trace; global addresses never repeat within a chunk.
* ``unique``: the ``real`` mix with the shared offsets moved by 32 KiB per
  (block, iteration), so memory lines only repeat among the warps of one
  block (47% of memory lines distinct per 4 MB chunk): the worst case for
  the parser's per-distinct-line work (gather- or elementwise-heavy kernels).
"""

from __future__ import annotations

import io
import lzma
import random
from collections.abc import Iterator
from pathlib import Path
from typing import IO, NamedTuple

import msgspec

_FULL = 0xFFFFFFFF
GLOBAL_BASE = 0x7F3A00000000
SHMEM_BASE = 0x00007F3A5C000000
LOCAL_BASE = 0x00007F3A5A000000


class TraceSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One synthetic kernel and how to write it."""

    name: str = "_Z10gemm_tiledPfS_S_iii"
    """kernel (mangled) name"""
    kernel_id: int = 1
    """kernel id (file kernel-N)"""
    grid: tuple[int, int, int] = (4, 2, 1)
    """grid dimensions"""
    block: tuple[int, int, int] = (80, 1, 1)
    """block dimensions; a size not divisible by 32 gives a partial last warp"""
    regs: int = 40
    """registers per thread (header)"""
    smem: int = 8192
    """shared memory per block (header)"""
    sm: int = 80
    """binary version (header); >= 80 uses HMMA.16816, else FFMA for the MMA part"""
    stream: int = 0
    """stream id (header)"""
    iterations: int = 3
    """main-loop iterations of warp 0 (warp w runs iterations + w % 3)"""
    tracer_version: int = 4
    """2 (pre-v3 prefixed .traceg), 3, 4 or 5"""
    lineinfo: bool = False
    """write source line numbers (version 4+)"""
    compress: bool = True
    """address compression (modes 1/2) or not (mode 0)"""
    raw: bool = False
    """raw .trace (interleaved, prefixed) instead of .traceg"""
    clusters: bool = False
    """write Hopper 'cluster id/cta/rank' lines after 'thread block' (.traceg)"""
    seed: int = 0
    """seed of the raw-trace interleaving and the gather permutation"""
    header_overrides: dict[str, str] = {}
    """header keys to replace verbatim (e.g. {'nregs': '21955'}) for bad-input tests"""
    mix: str = "simple"
    """instruction mix: 'simple' (:func:`simple_program`, every feature once per iteration),
    'real' (:func:`real_program`, the proportions of tracer output on a tiled GEMM) or
    'unique' (the real mix with shared offsets moved per block and iteration, so no memory
    line repeats beyond the warps of one block: the worst case for the parser's line cache)"""


class GroundTruth(msgspec.Struct, kw_only=True):
    """What a correct parser must report for a generated kernel."""

    columns: dict[str, float] = {}
    """KernelTable feature columns with exact expected values"""
    tensor_ops: dict[str, int] = {}
    """tensor opcode -> warp instructions"""
    lines: int = 0
    """instruction lines written"""
    text_bytes: int = 0
    """uncompressed bytes written"""

    def add(self, other: GroundTruth, times: int = 1) -> None:
        """Accumulate another truth ``times`` times (max-type columns are maxed)."""
        for k, v in other.columns.items():
            if k == "insts_per_warp_max":
                self.columns[k] = max(self.columns.get(k, 0.0), v)
            else:
                self.columns[k] = self.columns.get(k, 0.0) + v * times
        for k2, v2 in other.tensor_ops.items():
            self.tensor_ops[k2] = self.tensor_ops.get(k2, 0) + v2 * times
        self.lines += other.lines * times
        self.text_bytes += other.text_bytes * times


class Inst(NamedTuple):
    """One generated dynamic warp instruction."""

    pc: int
    mask: int
    dest: int  # -1 none
    opcode: str
    srcs: tuple[int, ...]
    width: int
    addrs: tuple[int, ...] | None  # active lanes' addresses (memory ops)
    imm: int
    column: str  # expected class column
    space: str  # '', 'global_ld', 'global_st', 'shared', 'local'
    flops: float


def _lanes_mask(lanes: int) -> int:
    return _FULL if lanes >= 32 else (1 << lanes) - 1


def warp_program(spec: TraceSpec, block_lin: int, warp: int, lanes: int) -> list[Inst]:
    """The dynamic instruction stream of one warp (deterministic in its arguments)."""
    if spec.mix in ("real", "unique"):
        return real_program(spec, block_lin, warp, lanes)
    if spec.mix != "simple":
        raise ValueError(f"unknown instruction mix {spec.mix!r} (simple, real or unique)")
    return simple_program(spec, block_lin, warp, lanes)


def simple_program(spec: TraceSpec, block_lin: int, warp: int, lanes: int) -> list[Inst]:
    """Every feature the parser computes, once or a few times per main-loop iteration."""
    m = _lanes_mask(lanes)
    act = [i for i in range(32) if m >> i & 1]
    n_warps_block = -(-(spec.block[0] * spec.block[1] * spec.block[2]) // 32)
    gw = block_lin * n_warps_block + warp
    out: list[Inst] = []
    pc = 0

    def emit(mask: int, dest: int, op: str, srcs: tuple[int, ...], column: str, width: int = 0,
             addrs: tuple[int, ...] | None = None, space: str = "", flops: float = 0.0,
             imm: int = 0) -> None:
        nonlocal pc
        out.append(Inst(pc, mask, dest, op, srcs, width, addrs, imm, column, space, flops))
        pc += 16

    emit(m, 0, "S2R", (), "insts_other")
    emit(m, 1, "S2R", (), "insts_other")
    emit(m, 2, "IMAD", (0, 1, 255), "insts_int")
    emit(m, 3, "IADD3", (2, 255, 255), "insts_int")
    emit(m, 4, "ISETP.GE.AND", (3,), "insts_int")
    iters = spec.iterations + warp % 3
    rng = random.Random(spec.seed * 1_000_003 + gw)
    for it in range(iters):
        ga = GLOBAL_BASE + ((gw * 64 + it) * 512)
        gb = GLOBAL_BASE + (1 << 32) + ((it * 7 + gw) % 256) * 512
        emit(m, 8, "LDG.E.128", (2,), "insts_ld_global", 16,
             tuple(ga + 16 * i for i in act), "global_ld")
        emit(m, 12, "LDG.E.128.CONSTANT", (3,), "insts_ld_global", 16,
             tuple(gb + 16 * i for i in act), "global_ld")
        perm = list(range(32))
        rng.shuffle(perm)
        gc = GLOBAL_BASE + (2 << 32) + (gw % 16) * 4096
        emit(m, 16, "LDG.E", (3,), "insts_ld_global", 4,
             tuple(gc + 4 * perm[i] * 8 for i in act), "global_ld")
        emit(m, -1, "STS.128", (3, 8), "insts_st_shared", 16,
             tuple(16 * i for i in act), "shared")
        emit(m, -1, "BAR.SYNC.DEFER_BLOCKING", (), "insts_barrier", imm=0)
        for j in range(2):
            emit(m, 20 + j * 4, "LDS.U.128", (4,), "insts_ld_shared", 16,
                 tuple(512 * j + 16 * i for i in act), "shared")
        emit(m, 28, "LDS.U.32", (4,), "insts_ld_shared", 4,
             tuple(128 * i for i in act), "shared")
        emit(m, 29, "LDS.U.32", (4,), "insts_ld_shared", 4, tuple(0 for _ in act), "shared")
        if spec.sm >= 80:
            for _ in range(4):
                emit(m, 32, "HMMA.16816.F32", (20, 24, 32), "insts_tensor", flops=4096.0)
        else:
            for _ in range(4):
                emit(m, 32, "FFMA", (20, 24, 32), "insts_fp32")
        emit(m, 36, "FFMA", (8, 12, 36), "insts_fp32")
        emit(m, 37, "FADD", (36, 37), "insts_fp32")
        emit(m, 38, "MUFU.EX2", (37,), "insts_sfu")
        emit(m, 39, "HFMA2.MMA", (38, 38, 39), "insts_fp16")
        emit(m, 40, "DADD", (40, 42), "insts_fp64")
        emit(m, 44, "STL", (1, 44), "insts_local", 4, tuple(LOCAL_BASE + 4 * i for i in act),
             "local")
        emit(m, 45, "LD.E", (1,), "insts_ld_shared", 4,
             tuple(SHMEM_BASE + 256 + 4 * i for i in act), "shared")
        emit(m, 46, "SHFL.BFLY", (45,), "insts_other")
        emit(m & 0x0000FFFF, 47, "IADD3", (47, 255, 255), "insts_int")
        emit(m, 3, "IADD3", (3, 255, 255), "insts_int")
        emit(m, -1, "DEPBAR.LE", (), "insts_barrier", imm=1)
        emit(m if it < iters - 1 else 0, -1, "BRA", (), "insts_branch", imm=-(pc + 16))
    emit(m, -1, "STG.E.128", (2, 36), "insts_st_global", 16,
         tuple(GLOBAL_BASE + (3 << 32) + gw * 512 + 16 * i for i in act), "global_st")
    emit(m, -1, "RED.E.ADD.F32.FTZ.RN", (2, 37), "insts_atomic", 4,
         tuple(GLOBAL_BASE + (4 << 32) + 4 * i for i in act), "global_atom")
    emit(m, 50, "FOO.BAR", (), "insts_other")
    emit(0, -1, "BRA", (), "insts_branch")
    emit(m, -1, "EXIT", (), "insts_branch")
    return out


#: The real mix's shared-memory layout (offsets in the shared window, as the tracer writes them).
_SMEM_A, _SMEM_B, _SMEM_BUF = 0x0, 0x1000, 0x2000
#: Row pitches (bytes) of the real mix's A and B matrices in global memory.
_PITCH_A, _PITCH_B = 4096, 8192


def real_program(spec: TraceSpec, block_lin: int, warp: int, lanes: int) -> list[Inst]:
    """A tiled SGEMM warp as the NVBit tracer writes it (the 'real' mix; see the module docs).

    Per main-loop iteration: two ``LDG.E.128`` of 2-D tile rows (base + delta
    lists), two ``STS.128`` (one XOR-swizzled: deltas; one contiguous:
    base + stride), a barrier, then 8 k-steps of one broadcast ``LDS.U.128``
    (deltas, every other step one address: stride 0), one ``LDS.U.32``
    (stride 4, every fourth step stride 8: a 2-way bank conflict), two
    3-source ``FFMA``, an ``IADD3`` and an ``IMAD`` with immediates; then integer
    bookkeeping with immediates, a barrier and the back branch. Shared
    offsets repeat across blocks and iterations (double-buffered), global
    addresses do not, as in real traces.
    """
    m = _lanes_mask(lanes)
    act = [i for i in range(32) if m >> i & 1]
    n_warps_block = -(-(spec.block[0] * spec.block[1] * spec.block[2]) // 32)
    out: list[Inst] = []
    pc = 0

    def emit(mask: int, dest: int, op: str, srcs: tuple[int, ...], column: str, width: int = 0,
             addrs: tuple[int, ...] | None = None, space: str = "", imm: int = 0) -> None:
        nonlocal pc
        out.append(Inst(pc, mask, dest, op, srcs, width, addrs, imm, column, space, 0.0))
        pc += 16

    ga = GLOBAL_BASE + block_lin * 128 * _PITCH_A
    gb = GLOBAL_BASE + (1 << 32) + (block_lin % 64) * 512
    gc = GLOBAL_BASE + (3 << 32) + (block_lin * n_warps_block + warp) * 4 * 512
    emit(m, 0, "S2R", (), "insts_other")
    emit(m, 1, "S2R", (), "insts_other")
    emit(m, -1, "ULDC.64", (), "insts_const")
    emit(m, 2, "IMAD.WIDE.U32", (0, 1, 255), "insts_int", imm=4)
    emit(m, 3, "LEA", (0, 2, 255), "insts_int", imm=2)
    emit(m, 4, "LOP3.LUT", (0, 3, 255), "insts_int", imm=255)
    emit(m, -1, "ISETP.GE.AND", (0, 255), "insts_int", imm=512)
    emit(0, -1, "BRA", (), "insts_branch", imm=4096)
    for j in range(4):
        emit(m, 56 + 2 * j, "CS2R", (), "insts_other")
    iters = spec.iterations + warp % 3
    for it in range(iters):
        buf = (it % 2) * _SMEM_BUF
        if spec.mix == "unique":  # a 32 KiB step per (block, iteration): no line repeats nearby
            buf = ((block_lin * 64 + it) % 1024) * 0x8000
        ra = [(warp * 4 + i // 8, i % 8) for i in act]
        emit(m, 40, "LDG.E.128", (2,), "insts_ld_global", 16,
             tuple(ga + r * _PITCH_A + it * 128 + c * 16 for r, c in ra), "global_ld")
        rb = [(warp * 2 + i // 16, i % 16) for i in act]
        emit(m, 44, "LDG.E.128", (4,), "insts_ld_global", 16,
             tuple(gb + (it * 16 + r) * _PITCH_B + c * 16 for r, c in rb), "global_ld")
        emit(m, 2, "IADD3", (2, 255, 255), "insts_int", imm=128)
        emit(m, 4, "IADD3", (4, 255, 255), "insts_int", imm=16 * _PITCH_B)
        emit(m, -1, "STS.128", (5, 40), "insts_st_shared", 16,
             tuple(buf + _SMEM_A + r * 128 + ((c ^ (r & 7)) * 16) for r, c in ra), "shared")
        emit(m, -1, "STS.128", (6, 44), "insts_st_shared", 16,
             tuple(buf + _SMEM_B + r * 256 + c * 16 for r, c in rb), "shared", imm=_SMEM_B)
        emit(m, -1, "BAR.SYNC.DEFER_BLOCKING", (), "insts_barrier")
        for k in range(8):
            if k % 2:
                a_off = [k * 128] * len(act)  # one address for the warp: stride 0
            else:
                a_off = [k * 128 + ((warp // 2 + i // 8) % 8) * 16 for i in act]  # 4 groups
            emit(m, 48, "LDS.U.128", (7,), "insts_ld_shared", 16,
                 tuple(buf + _SMEM_A + a for a in a_off), "shared", imm=k * 128)
            step = 8 if k % 4 == 3 else 4  # stride 8: a 2-way bank conflict
            emit(m, 52, "LDS.U.32", (8,), "insts_ld_shared", 4,
                 tuple(buf + _SMEM_B + k * 256 + (warp % 2) * 128 + step * i for i in act),
                 "shared", imm=_SMEM_B + k * 256)
            emit(m, 56, "FFMA", (48 + k % 4, 52, 56), "insts_fp32")
            emit(m, 57, "FFMA", (48 + k % 4, 52, 57), "insts_fp32")
            emit(m, 7, "IADD3", (7, 255, 255), "insts_int", imm=128)
            emit(m, 8, "IMAD", (8, 12, 255), "insts_int", imm=256)
        emit(m, 5, "LOP3.LUT", (5, 9, 255), "insts_int", imm=_SMEM_BUF)
        emit(m, 9, "SHF.R.U32.HI", (255, 9), "insts_int", imm=2)
        emit(m, 10, "IADD3", (10, 255, 255), "insts_int", imm=1)
        emit(m, -1, "ISETP.GE.AND", (10, 11), "insts_int")
        emit(m, -1, "BAR.SYNC.DEFER_BLOCKING", (), "insts_barrier")
        emit(m if it < iters - 1 else 0, -1, "BRA", (), "insts_branch", imm=-(pc + 16))
    for r in range(4):
        emit(m, -1, "STG.E.128", (2, 56 + 2 * r), "insts_st_global", 16,
             tuple(gc + r * 512 + 16 * i for i in act), "global_st", imm=r * 512)
    emit(m & 0x0000FFFF, -1, "STG.E", (2, 60), "insts_st_global", 4,
         tuple(gc + 2048 + 4 * (i ^ 1) for i in act if i < 16), "global_st")
    emit(m, -1, "EXIT", (), "insts_branch")
    return out


def _encode_addrs(addrs: tuple[int, ...], compress: bool) -> str:
    if not compress:
        return "0 " + " ".join(f"0x{a:016x}" for a in addrs)
    if len(addrs) >= 2:
        stride = addrs[1] - addrs[0]
        if all(addrs[i + 1] - addrs[i] == stride for i in range(len(addrs) - 1)):
            return f"1 0x{addrs[0]:x} {stride}"
    deltas = " ".join(str(addrs[i + 1] - addrs[i]) for i in range(len(addrs) - 1))
    return f"2 0x{addrs[0]:x}" + (f" {deltas}" if deltas else "")


def format_inst(inst: Inst, spec: TraceSpec, prefix: str = "") -> str:
    """One instruction line in the spec's format (with the tracer's trailing space)."""
    parts = [prefix] if prefix else []
    if spec.lineinfo and spec.tracer_version >= 4:
        parts.append(str(100 + inst.pc // 16))
    parts.append(f"{inst.pc:04x}")
    parts.append(f"{inst.mask:08x}")
    parts.append(f"1 R{inst.dest}" if inst.dest >= 0 else "0")
    parts.append(inst.opcode)
    parts.append(str(len(inst.srcs)))
    parts.extend(f"R{r}" for r in inst.srcs)
    if inst.width:
        parts.append(str(inst.width))
        if inst.mask == 0:
            parts.append("1 0x0 0")
        else:
            assert inst.addrs is not None
            parts.append(_encode_addrs(inst.addrs, spec.compress))
    else:
        parts.append("0")
    if spec.tracer_version >= 5:
        parts.append(str(inst.imm))
    return " ".join(parts) + " "


def truth_of(insts: list[Inst]) -> GroundTruth:
    """Exact expected counts of one warp's instructions (the parser's independent check)."""
    c: dict[str, float] = {}
    tensor: dict[str, int] = {}

    def add(k: str, v: float = 1.0) -> None:
        c[k] = c.get(k, 0.0) + v

    for ins in insts:
        add("warp_insts")
        add(ins.column)
        if ins.mask == 0:
            add("insts_pred_off")
        elif ins.mask != _FULL:
            add("insts_partial")
        if ins.flops:
            add("tensor_flops", ins.flops)
            add("insts_tensor_hmma")
            tensor[ins.opcode] = tensor.get(ins.opcode, 0) + 1
        if ins.mask == 0 or not ins.addrs:
            continue
        if ins.space.startswith("global"):
            sectors = {b // 32 for a in ins.addrs for b in range(a, a + ins.width)}
            add("gmem_requests")
            add("gmem_sectors", len(sectors))
            if ins.space == "global_ld":
                add("gmem_ld_sectors", len(sectors))
            elif ins.space == "global_st":
                add("gmem_st_sectors", len(sectors))
        elif ins.space == "shared":
            add("smem_accesses")
            words = {b // 4 for a in ins.addrs for b in range(a, a + ins.width)}
            per_bank: dict[int, int] = {}
            for w in words:
                per_bank[w % 32] = per_bank.get(w % 32, 0) + 1
            extra = max(per_bank.values()) - -(-len(words) // 32)
            add("smem_bank_conflicts", max(0, extra))
        elif ins.space == "local":
            add("local_bytes", len(ins.addrs) * ins.width)
    return GroundTruth(columns=c, tensor_ops=tensor, lines=len(insts))


def global_lines(insts: list[Inst]) -> set[int]:
    """Distinct 128-byte global lines the instructions touch."""
    out: set[int] = set()
    for ins in insts:
        if ins.mask and ins.addrs and ins.space.startswith("global"):
            out.update(b // 128 for a in ins.addrs for b in (a, a + ins.width - 1))
    return out


# ---- files ----------------------------------------------------------------------------------
def header_text(spec: TraceSpec) -> str:
    """The kernel header in the tracer's exact layout for the spec's version."""
    v = spec.tracer_version
    items = [
        ("kernel name", spec.name), ("kernel id", str(spec.kernel_id)),
        ("grid dim", "({},{},{})".format(*spec.grid)), ("block dim", "({},{},{})".format(*spec.block)),
        ("shmem", str(spec.smem)), ("nregs", str(spec.regs)), ("binary version", str(spec.sm)),
        ("cuda stream id", str(spec.stream)), ("shmem base_addr", f"0x{SHMEM_BASE:016x}"),
        ("local mem base_addr", f"0x{LOCAL_BASE:016x}"), ("nvbit version", "1.5.5"),
    ]
    if v >= 3:
        items.append(("accelsim tracer version", str(v)))
    if v >= 4:
        items.append(("enable lineinfo", "1" if spec.lineinfo else "0"))
    lines = [f"-{k} = {spec.header_overrides.get(k, val)}" for k, val in items]
    fmt = ("#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] "
           "mem_width [adrrescompress?] [mem_addresses]")
    if v >= 5:
        fmt += " immediate"
    return "\n".join(lines) + "\n\n" + fmt + "\n\n"


def _blocks(spec: TraceSpec) -> Iterator[tuple[int, tuple[int, int, int]]]:
    gx, gy, gz = spec.grid
    for lin in range(gx * gy * gz):
        yield lin, (lin % gx, (lin // gx) % gy, lin // (gx * gy))


def _warps(spec: TraceSpec) -> list[int]:
    threads = spec.block[0] * spec.block[1] * spec.block[2]
    return [min(32, threads - 32 * w) for w in range(-(-threads // 32))]


def write_kernel(spec: TraceSpec, out: IO[str]) -> GroundTruth:
    """Write one kernel file's text to ``out``; return its ground truth."""
    truth = GroundTruth()
    gl: set[int] = set()
    text_len = 0

    def w(s: str) -> None:
        nonlocal text_len
        out.write(s)
        text_len += len(s)

    w(header_text(spec))
    lanes_per_warp = _warps(spec)
    counts: list[int] = []
    rng = random.Random(spec.seed)
    prefixed_traceg = spec.tracer_version < 3
    for lin, (bx, by, bz) in _blocks(spec):
        progs = [warp_program(spec, lin, wi, lanes) for wi, lanes in enumerate(lanes_per_warp)]
        for p in progs:
            truth.add(truth_of(p))
            counts.append(len(p))
            gl |= global_lines(p)
        if spec.raw:
            pos = [0] * len(progs)
            live = list(range(len(progs)))
            while live:
                wi = rng.choice(live)
                take = rng.randint(1, 4)
                for ins in progs[wi][pos[wi] : pos[wi] + take]:
                    w(format_inst(ins, spec, f"{bx} {by} {bz} {wi}") + "\n")
                pos[wi] += take
                if pos[wi] >= len(progs[wi]):
                    live.remove(wi)
            continue
        w(f"#BEGIN_TB\n\nthread block = {bx},{by},{bz}\n")
        if spec.clusters:
            w(f"cluster id = {bx // 2},0,0\ncluster cta = {bx % 2},0,0\ncluster rank = {bx % 2}\n")
        w("\n")
        for wi, p in enumerate(progs):
            w(f"warp = {wi}\ninsts = {len(p)}\n")
            pre = f"{bx} {by} {bz} {wi}" if prefixed_traceg else ""
            w("".join(format_inst(ins, spec, pre) + "\n" for ins in p))
            w("\n")
        w("#END_TB\n\n")
    n = len(counts)
    mean = sum(counts) / n
    truth.columns["warps"] = float(n)
    truth.columns["insts_per_warp_mean"] = mean
    truth.columns["insts_per_warp_max"] = float(max(counts))
    truth.columns["insts_per_warp_std"] = (sum((x - mean) ** 2 for x in counts) / n) ** 0.5
    truth.columns["footprint_lines"] = float(len(gl))
    truth.text_bytes = text_len
    return truth


def kernel_file_name(spec: TraceSpec, *, ctx: str | None = None, xz: bool = False) -> str:
    """``kernel-N[-ctx_0x...].trace[g][.xz]`` for the spec."""
    name = f"kernel-{spec.kernel_id}"
    if ctx:
        name += f"-ctx_{ctx}"
    name += ".trace" if spec.raw else ".traceg"
    return name + (".xz" if xz else "")


def write_kernel_file(spec: TraceSpec, path: Path, *, xz: bool = False) -> GroundTruth:
    """Write one kernel file (xz-compressed if asked)."""
    if xz:
        with lzma.open(path, "wt", preset=1) as fh:
            return write_kernel(spec, fh)
    with path.open("w") as fh:
        return write_kernel(spec, fh)


def write_trace_folder(
    folder: str | Path,
    specs: list[TraceSpec],
    *,
    xz: bool = False,
    ctx: str | None = None,
    memcpys: int = 2,
) -> list[tuple[Path, GroundTruth]]:
    """A complete trace folder: kernel files, kernelslist[.g] with MemcpyHtoD lines, stats.csv."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: list[tuple[Path, GroundTruth]] = []
    listing: list[str] = [
        f"MemcpyHtoD,0x{GLOBAL_BASE + i * 0x1000:016x},{4096}" for i in range(memcpys)
    ]
    stats = [
        ("kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
        "block_dimY, block_dimZ, #threads, total_insts, total_reported_insts")
    ]
    raw = any(s.raw for s in specs)
    for spec in specs:
        name = kernel_file_name(spec, ctx=ctx, xz=xz)
        truth = write_kernel_file(spec, folder / name, xz=xz)
        out.append((folder / name, truth))
        listing.append(name)
        gx, gy, gz = spec.grid
        bx, by, bz = spec.block
        total = int(truth.columns["warp_insts"])
        stats.append(f"{name}, {spec.name}, {gx}, {gy}, {gz}, {gx * gy * gz}, {bx}, {by}, {bz}, "
                     f"{bx * by * bz}, {total},{total}")
    (folder / ("kernelslist" if raw else "kernelslist.g")).write_text("\n".join(listing) + "\n")
    (folder / "stats.csv").write_text("\n".join(stats) + "\n")
    return out


#: write_large_trace settings of each mix: (tracer version, main-loop iterations of warp 0).
LARGE_MIXES: dict[str, tuple[int, int]] = {"simple": (4, 24), "real": (5, 8), "unique": (5, 8)}


def write_large_trace(
    path: str | Path, size_mb: float, *, xz: bool = False, raw: bool = False,
    variants: int = 96, block: tuple[int, int, int] = (256, 1, 1), mix: str = "simple",
) -> GroundTruth:
    """Stream a .traceg (or raw .trace) kernel of at least ``size_mb`` MB of text to ``path``.

    ``variants`` distinct blocks are generated (distinct addresses) and then
    repeated under new block coordinates, so the file is produced at disk
    speed; memory lines only repeat every ``variants`` blocks (far apart
    compared with a parse chunk). ``mix`` is 'simple' (tracer version 4),
    'real' or 'unique' (version 5, see the module docs). Ground truth counts scale
    exactly; the footprint is not tracked.
    """
    if mix not in LARGE_MIXES:
        raise ValueError(f"unknown instruction mix {mix!r} (simple, real or unique)")
    version, iterations = LARGE_MIXES[mix]
    target = int(size_mb * 1e6)
    probe = TraceSpec(grid=(variants, 1, 1), block=block, iterations=iterations, raw=raw,
                      compress=True, tracer_version=version, mix=mix)
    bodies: list[tuple[str, GroundTruth]] = []
    lanes_per_warp = _warps(probe)
    rng = random.Random(1)
    for lin in range(variants):
        progs = [warp_program(probe, lin, wi, ln) for wi, ln in enumerate(lanes_per_warp)]
        t = GroundTruth()
        for p in progs:
            t.add(truth_of(p))
        if raw:
            body = _raw_body(progs, probe, rng)
        else:
            buf = io.StringIO()
            for wi, p in enumerate(progs):
                buf.write(f"warp = {wi}\ninsts = {len(p)}\n")
                buf.write("".join(format_inst(ins, probe) + "\n" for ins in p))
                buf.write("\n")
            body = buf.getvalue()
        bodies.append((body, t))
    per_block = sum(len(b) for b, _ in bodies) / variants
    nblocks = max(1, int(target / per_block) + 1)
    spec = TraceSpec(grid=(nblocks, 1, 1), block=block, iterations=iterations, raw=raw,
                     tracer_version=version, mix=mix)
    truth = GroundTruth()
    warps_per_block = len(lanes_per_warp)
    fh: IO[bytes]
    with lzma.open(path, "wb", preset=0) if xz else open(path, "wb") as fh:
        head = header_text(spec).encode()
        fh.write(head)
        size = len(head)
        for b in range(nblocks):
            body, t = bodies[b % variants]
            if raw:
                text = body.replace("\x00", f"{b} 0 0 ")
            else:
                text = f"#BEGIN_TB\n\nthread block = {b},0,0\n\n{body}#END_TB\n\n"
            data = text.encode()
            fh.write(data)
            size += len(data)
            truth.add(t)
    truth.columns["warps"] = float(nblocks * warps_per_block)
    truth.text_bytes = size
    return truth


def _raw_body(progs: list[list[Inst]], spec: TraceSpec, rng: random.Random) -> str:
    parts: list[str] = []
    pos = [0] * len(progs)
    live = list(range(len(progs)))
    while live:
        wi = rng.choice(live)
        take = rng.randint(1, 8)
        for ins in progs[wi][pos[wi] : pos[wi] + take]:
            parts.append("\x00" + format_inst(ins, spec, str(wi)) + "\n")
        pos[wi] += take
        if pos[wi] >= len(progs[wi]):
            live.remove(wi)
    return "".join(parts)
