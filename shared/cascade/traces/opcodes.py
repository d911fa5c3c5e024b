"""SASS opcode classes for trace features.

An opcode string such as ``HMMA.16816.F32.BF16`` is classified by its base
mnemonic (the part before the first dot) into one instruction class, a
memory kind (which address space it touches and how), and for tensor-core
ops a kind and the FLOPs one warp instruction performs.

Classification is cached per opcode string (:func:`classify`), so the hot
loop pays one dict lookup per distinct opcode.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

# ---- instruction classes (index into the per-kernel count vector) -------------------------
INT, FP32, FP64, FP16, SFU, TENSOR = 0, 1, 2, 3, 4, 5
LD_GLOBAL, ST_GLOBAL, LD_SHARED, ST_SHARED, LOCAL, ATOMIC = 6, 7, 8, 9, 10, 11
BARRIER, BRANCH, CONST, TEX, OTHER = 12, 13, 14, 15, 16
N_CLASSES = 17

#: KernelTable column of each class index.
CLASS_COLUMNS: tuple[str, ...] = (
    "insts_int", "insts_fp32", "insts_fp64", "insts_fp16", "insts_sfu", "insts_tensor",
    "insts_ld_global", "insts_st_global", "insts_ld_shared", "insts_st_shared", "insts_local",
    "insts_atomic", "insts_barrier", "insts_branch", "insts_const", "insts_tex", "insts_other",
)

# ---- memory kinds ---------------------------------------------------------------------------
MEM_NONE = 0
MEM_LD_GLOBAL = 1
MEM_ST_GLOBAL = 2
MEM_LD_SHARED = 3
MEM_ST_SHARED = 4
MEM_LD_LOCAL = 5
MEM_ST_LOCAL = 6
MEM_LD_GENERIC = 7
MEM_ST_GENERIC = 8
MEM_ATOM_GLOBAL = 9
MEM_ATOM_SHARED = 10
MEM_ATOM_GENERIC = 11
MEM_LDGSTS = 12  # global->shared async copy: one line per address operand
MEM_OTHER = 13  # texture, surface, constant, bulk copies: counted, addresses ignored

_INT = {
    "IADD", "IADD3", "IADD32I", "IMAD", "IMAD32I", "IMADSP", "IMUL", "IMUL32I", "ISCADD",
    "ISCADD32I", "ISETP", "ISET", "ICMP", "IMNMX", "IABS", "LOP", "LOP3", "LOP32I", "SHF", "SHL",
    "SHR", "XMAD", "LEA", "POPC", "FLO", "BFE", "BFI", "BREV", "BMSK", "PRMT", "SEL", "MOV",
    "MOV32I", "I2I", "I2IP", "SGXT", "VABSDIFF", "VABSDIFF4", "VADD", "VMAD", "VMNMX", "VSET",
    "VSETP", "VSHL", "VSHR", "IDP", "IDP4A", "P2R", "R2P", "PLOP3", "PSETP", "PSET", "CSET",
    "CSETP", "UIADD3", "UIMAD", "ULOP3", "ULOP", "USHF", "USEL", "UMOV", "UPRMT", "ULEA",
    "UISETP", "UPOPC", "UFLO", "UBREV", "UBMSK", "USGXT", "UPLOP3", "UPSETP", "UP2UR", "UR2UP",
    "UCLEA", "UIABS", "UIMNMX", "VIADD", "VIADDMNMX", "VIMNMX", "VIMNMX3", "IMNMX3", "IADD2",
    "R2UR", "S2UR", "LEPC",
}
_FP32 = {
    "FADD", "FADD32I", "FMUL", "FMUL32I", "FFMA", "FFMA32I", "FSETP", "FSET", "FMNMX", "FSEL",
    "FCMP", "FCHK", "FSWZADD", "FSWZ", "FMNMX3", "FADD2", "FFMA2", "FMUL2", "FHADD", "FHFMA",
}
_FP64 = {"DADD", "DMUL", "DFMA", "DSETP", "DSET", "DMNMX"}
_FP16 = {
    "HADD2", "HADD2_32I", "HMUL2", "HMUL2_32I", "HFMA2", "HFMA2_32I", "HSETP2", "HSET2",
    "HMNMX2", "F2FP", "HADD", "HMUL", "HFMA",
}
_SFU = {"MUFU", "RRO", "F2F", "F2I", "I2F", "FRND", "I2FP", "F2IP", "DRND"}
_TENSOR = {
    "HMMA": "hmma", "IMMA": "imma", "BMMA": "imma", "DMMA": "dmma", "HGMMA": "gmma",
    "IGMMA": "gmma", "QGMMA": "gmma", "BGMMA": "gmma", "OMMA": "hmma", "QMMA": "hmma",
    "UTCHMMA": "gmma", "UTCQMMA": "gmma", "UTCIMMA": "gmma", "UTCOMMA": "gmma",
}
_BARRIER = {
    "BAR", "DEPBAR", "MEMBAR", "ERRBAR", "SYNCS", "ARRIVES", "LDGDEPBAR", "WARPGROUP",
    "FENCE", "CCTL", "CCTLL", "UCGABAR_ARV", "UCGABAR_WAIT", "B2R", "R2B", "ACQBULK",
}
_BRANCH = {
    "BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "RET", "EXIT", "BREAK", "BSSY", "BSYNC",
    "SSY", "SYNC", "PBK", "BRK", "PCNT", "CONT", "KILL", "WARPSYNC", "BPT", "JCAL", "PRET",
    "PEXIT", "CAL", "RTT", "YIELD", "NANOSLEEP", "ACCMMA",
}
_CONST = {"LDC", "ULDC"}
_TEX = {
    "TEX", "TEXS", "TLD", "TLDS", "TLD4", "TLD4S", "TXQ", "TXD", "TMML", "TXA", "SULD", "SUST",
    "SUATOM", "SURED", "SUQ", "TEXDEPBAR",
}
#: Known opcodes that do not fall in any class above (moves of special registers, shuffles...).
_KNOWN_OTHER = {
    "NOP", "S2R", "CS2R", "SHFL", "VOTE", "VOTEU", "MATCH", "REDUX", "CREDUX", "PMTRIG",
    "SETCTAID", "SETLMEMBASE", "GETLMEMBASE", "ELECT", "ENDCOLLECTIVE", "UTMAPF", "UTMACCTL",
    "UTMACMDFLUSH", "USETMAXREG", "UVIRTCOUNT", "PREEXIT", "BMOV", "MOVM", "QSPC", "R2UR",
    "ISBERD", "AL2P", "ALD", "AST", "IPA", "OUT", "PIXLD", "ISBEWR", "STP", "UBLKPF",
}

#: opcode base -> (class, memory kind)
_MEMORY: dict[str, tuple[int, int]] = {
    "LDG": (LD_GLOBAL, MEM_LD_GLOBAL), "STG": (ST_GLOBAL, MEM_ST_GLOBAL),
    "LDS": (LD_SHARED, MEM_LD_SHARED), "LDSM": (LD_SHARED, MEM_LD_SHARED),
    "STS": (ST_SHARED, MEM_ST_SHARED), "STSM": (ST_SHARED, MEM_ST_SHARED),
    "LDL": (LOCAL, MEM_LD_LOCAL), "STL": (LOCAL, MEM_ST_LOCAL),
    "LD": (LD_GLOBAL, MEM_LD_GENERIC), "ST": (ST_GLOBAL, MEM_ST_GENERIC),
    "ATOMG": (ATOMIC, MEM_ATOM_GLOBAL), "RED": (ATOMIC, MEM_ATOM_GLOBAL),
    "REDG": (ATOMIC, MEM_ATOM_GLOBAL), "ATOM": (ATOMIC, MEM_ATOM_GENERIC),
    "ATOMS": (ATOMIC, MEM_ATOM_SHARED), "REDAS": (ATOMIC, MEM_ATOM_SHARED),
    "LDGSTS": (LD_GLOBAL, MEM_LDGSTS),
    "UTMALDG": (LD_GLOBAL, MEM_OTHER), "UBLKCP": (LD_GLOBAL, MEM_OTHER),
    "UTMASTG": (ST_GLOBAL, MEM_OTHER), "UTMAREDG": (ATOMIC, MEM_OTHER),
    "UBLKRED": (ATOMIC, MEM_OTHER), "LDTRAM": (LD_GLOBAL, MEM_OTHER),
}

_SHAPE_MNK = re.compile(r"^(\d+)x(\d+)x(\d+)$")


class OpcodeInfo(NamedTuple):
    """How one opcode string is counted."""

    cls: int
    """instruction class index (see CLASS_COLUMNS)"""
    mem: int
    """memory kind (MEM_*)"""
    tensor_kind: str
    """'hmma', 'imma', 'dmma', 'gmma' or '' for non-tensor ops"""
    tensor_flops: float
    """FLOPs of one warp instruction implied by the MMA shape (0 if unknown)"""
    known: bool
    """False for opcodes Cascade does not recognise (counted as other)"""


def mma_flops(opcode: str) -> float:
    """FLOPs one warp instruction of a tensor-core opcode performs, from its shape.

    ``HMMA.16816.F32`` is m16n8k16: 2*16*8*16 = 4096 FLOPs per warp instruction.
    Volta/Turing ``HMMA.884`` is one of the 4 (FP32 accumulate) or 2 (FP16)
    steps of four quad-pair m8n8k4 products. Hopper warpgroup MMAs
    (``HGMMA.64x128x16.F32``) are issued by the 4 warps of a warpgroup, so a
    warp instruction carries a quarter of 2*m*n*k.
    """
    parts = opcode.split(".")
    base = parts[0]
    for p in parts[1:]:
        m3 = _SHAPE_MNK.match(p)
        if m3:
            m, n, k = (int(g) for g in m3.groups())
            return 2.0 * m * n * k / 4.0
        if p.isdigit() and len(p) >= 3:
            mnk = _split_shape(p)
            if mnk is None:
                continue
            m, n, k = mnk
            flops = 2.0 * m * n * k
            if (m, n, k) == (8, 8, 4) and base == "HMMA":
                return flops * 4 / (4 if ".F32" in opcode else 2)
            return flops
    return 0.0


def _split_shape(digits: str) -> tuple[int, int, int] | None:
    m_str = "16" if digits.startswith("16") else digits[0]
    rest = digits[len(m_str):]
    if not rest.startswith("8") or len(rest) < 2:
        return None
    m, n, k = int(m_str), 8, int(rest[1:])
    if m not in (8, 16, 32, 64) or k <= 0:
        return None
    return m, n, k


@lru_cache(maxsize=8192)
def classify(opcode: str) -> OpcodeInfo:
    """Class, memory kind and tensor shape of one opcode string (cached)."""
    base = opcode.split(".", 1)[0]
    if base in _MEMORY:
        cls, mem = _MEMORY[base]
        return OpcodeInfo(cls, mem, "", 0.0, True)
    if base in _TENSOR:
        return OpcodeInfo(TENSOR, MEM_NONE, _TENSOR[base], mma_flops(opcode), True)
    for group, cls in (
        (_INT, INT), (_FP32, FP32), (_FP64, FP64), (_FP16, FP16), (_SFU, SFU),
        (_BARRIER, BARRIER), (_BRANCH, BRANCH), (_CONST, CONST), (_TEX, TEX),
    ):
        if base in group:
            return OpcodeInfo(cls, MEM_OTHER if cls in (TEX, CONST) else MEM_NONE, "", 0.0, True)
    if base in _KNOWN_OTHER:
        return OpcodeInfo(OTHER, MEM_NONE, "", 0.0, True)
    return OpcodeInfo(OTHER, MEM_NONE, "", 0.0, False)
