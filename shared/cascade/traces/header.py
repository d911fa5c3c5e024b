"""The per-kernel header of an Accel-Sim trace file (``-key = value`` lines).

Header values in real files can be nonsense (``-nregs = 21955``,
``-binary version = 0``); :func:`parse_header` validates every value, keeps
a warning for each implausible one and falls back (to a caller-given source
GPU sm version, or to "unknown") instead of failing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

from cascade.errors import TraceFormatError

#: sm versions NVIDIA has shipped (binary version field).
KNOWN_SM_VERSIONS: frozenset[int] = frozenset(
    {10, 11, 12, 13, 20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87,
     89, 90, 100, 101, 103, 110, 120, 121}
)
#: Largest shared memory per block any GPU offers (sm_90/100: 227 KiB) plus slack.
MAX_SMEM_BYTES = 256 * 1024
#: The window above ``-shmem base_addr`` / ``-local mem base_addr`` that generic
#: LD/ST addresses are attributed to shared / local memory.
SPACE_WINDOW_BYTES = 1 << 25

_DIM = re.compile(rb"^\(\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*\)$")
_INT_RE = re.compile(rb"^-?\d+$")


class KernelHeader(msgspec.Struct, frozen=True, kw_only=True):
    """Validated kernel header; unknown integers are -1, unknown strings ''."""

    name: str = ""
    """kernel (mangled) name"""
    kernel_id: int = -1
    """1-based kernel id"""
    grid: tuple[int, int, int] = (-1, -1, -1)
    """grid dimensions (x, y, z)"""
    block: tuple[int, int, int] = (-1, -1, -1)
    """block dimensions (x, y, z)"""
    smem_bytes: int = -1
    """shared memory per block (static + dynamic), bytes"""
    regs: int = -1
    """registers per thread"""
    sm_version: int = -1
    """binary sm version (validated; fallback applied)"""
    stream: int = -1
    """CUDA stream handle"""
    shmem_base: int = -1
    """generic address where shared memory starts"""
    local_base: int = -1
    """generic address where local memory starts"""
    nvbit_version: str = ""
    """NVBit version string"""
    tracer_version: int = -1
    """Accel-Sim tracer version (3, 4, 5; older files have none)"""
    lineinfo: bool = False
    """instruction lines start with a source line number"""
    extra: dict[str, str] = {}
    """header keys Cascade does not interpret"""

    @property
    def threads_per_block(self) -> int:
        """Threads per block, or -1 if the block dimension is unknown."""
        if min(self.block) <= 0:
            return -1
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        """Blocks in the grid, or -1 if unknown."""
        if min(self.grid) <= 0:
            return -1
        return self.grid[0] * self.grid[1] * self.grid[2]


def parse_header(
    lines: list[tuple[int, bytes]],
    *,
    file: str = "<stream>",
    source_sm: int | None = None,
    warnings: list[str],
) -> KernelHeader:
    """Parse ``(line number, text)`` header lines into a :class:`KernelHeader`.

    Malformed lines (no ``=``) raise :class:`TraceFormatError`; implausible
    values append a warning to ``warnings`` and fall back.
    """
    raw: dict[str, tuple[int, bytes]] = {}
    for lineno, line in lines:
        text = line.strip()
        if not text:
            continue
        if not text.startswith(b"-") or b"=" not in text:
            raise TraceFormatError(file, lineno, "a header line '-key = value'", _s(text))
        key, _, value = text[1:].partition(b"=")
        raw[key.strip().decode("utf-8", "replace").lower()] = (lineno, value.strip())

    def warn(key: str, msg: str) -> None:
        lineno = raw[key][0] if key in raw else None
        where = f"{file}:{lineno}" if lineno is not None else file
        warnings.append(f"{where}: {msg}")

    def integer(key: str, lo: int, hi: int, what: str) -> int:
        if key not in raw:
            warn(key, f"header has no '-{key}' line; {what} unknown")
            return -1
        value = raw[key][1]
        if not _INT_RE.match(value):
            warn(key, f"'-{key} = {_s(value)}' is not an integer; {what} unknown")
            return -1
        n = int(value)
        if not lo <= n <= hi:
            warn(key, f"implausible '-{key} = {n}' (expected {lo}..{hi}); {what} unknown")
            return -1
        return n

    def dims(key: str) -> tuple[int, int, int]:
        if key not in raw:
            warn(key, f"header has no '-{key}' line")
            return (-1, -1, -1)
        m = _DIM.match(raw[key][1])
        if not m:
            warn(key, f"'-{key} = {_s(raw[key][1])}' is not '(x,y,z)'")
            return (-1, -1, -1)
        x, y, z = (int(g) for g in m.groups())
        if min(x, y, z) <= 0 or max(x, y, z) > 2**31 - 1:
            warn(key, f"implausible '-{key} = ({x},{y},{z})'")
            return (-1, -1, -1)
        return (x, y, z)

    def address(key: str) -> int:
        if key not in raw:
            return -1
        try:
            return int(raw[key][1], 16)
        except ValueError:
            warn(key, f"'-{key} = {_s(raw[key][1])}' is not a hex address")
            return -1

    grid = dims("grid dim")
    block = dims("block dim")
    if min(block) > 0 and block[0] * block[1] * block[2] > 1024:
        warn("block dim", f"block of {block[0] * block[1] * block[2]} threads exceeds 1024")
    smem = integer("shmem", 0, MAX_SMEM_BYTES, "shared memory size")
    if 0 < smem < 16:
        warn("shmem", f"implausible '-shmem = {smem}' (under 16 bytes); shared memory size "
             "taken from the shared addresses the trace touches")
        smem = -1
    regs = integer("nregs", 1, 255, "register count")
    sm = _sm_version(raw, source_sm, warn)
    stream = integer("cuda stream id", 0, 2**63 - 1, "stream")
    tracer = -1
    if "accelsim tracer version" in raw:
        tracer = integer("accelsim tracer version", 1, 99, "tracer version")
        if tracer > 5:
            warn("accelsim tracer version", f"tracer version {tracer} is newer than 5; "
                 "reading it as version 5")
    lineinfo = False
    if "enable lineinfo" in raw:
        li = raw["enable lineinfo"][1]
        if li not in (b"0", b"1"):
            warn("enable lineinfo", f"'-enable lineinfo = {_s(li)}' is not 0 or 1; reading 0")
        lineinfo = li == b"1"
    kernel_id = integer("kernel id", 0, 2**62, "kernel id") if "kernel id" in raw else -1
    known = {
        "kernel name", "kernel id", "grid dim", "block dim", "shmem", "nregs", "binary version",
        "cuda stream id", "shmem base_addr", "local mem base_addr", "nvbit version",
        "accelsim tracer version", "enable lineinfo",
    }
    return KernelHeader(
        name=raw["kernel name"][1].decode("utf-8", "replace") if "kernel name" in raw else "",
        kernel_id=kernel_id,
        grid=grid,
        block=block,
        smem_bytes=smem,
        regs=regs,
        sm_version=sm,
        stream=stream,
        shmem_base=address("shmem base_addr"),
        local_base=address("local mem base_addr"),
        nvbit_version=raw["nvbit version"][1].decode("utf-8", "replace")
        if "nvbit version" in raw else "",
        tracer_version=tracer,
        lineinfo=lineinfo,
        extra={k: v[1].decode("utf-8", "replace") for k, v in raw.items() if k not in known},
    )


def _sm_version(
    raw: dict[str, tuple[int, bytes]], source_sm: int | None, warn: Callable[[str, str], None]
) -> int:
    fallback = source_sm if source_sm is not None else -1
    how = f"using the source GPU's sm_{source_sm}" if source_sm is not None else "sm unknown"
    key = "binary version"
    if key not in raw:
        warn(key, f"header has no '-binary version' line; {how}")
        return fallback
    value = raw[key][1]
    if not _INT_RE.match(value) or int(value) not in KNOWN_SM_VERSIONS:
        warn(key, f"implausible '-binary version = {_s(value)}'; {how}")
        return fallback
    sm = int(value)
    if source_sm is not None and sm > source_sm:
        warn(key, f"binary version sm_{sm} is newer than the source GPU's "
             f"sm_{source_sm}; keeping sm_{sm}")
    return sm


def _s(b: bytes) -> str:
    return b.decode("utf-8", "replace")
