"""Streaming parser + feature extractor for one Accel-Sim kernel trace file.

:class:`KernelTraceParser` is fed bytes as they arrive (plain text or an xz
stream, detected by its magic number) and never holds more than one chunk
of text. It handles raw ``.trace`` files (lines prefixed ``cta_x cta_y cta_z
warp``, interleaved) and post-processed ``.traceg`` files (``#BEGIN_TB``
blocks), tracer versions 3-5 and earlier, line numbers, address modes 0/1/2,
trailing immediates and Hopper cluster lines.

Speed comes from counting before parsing: the lines of a chunk are counted
with :class:`collections.Counter` (C speed) and each *distinct* line is
parsed once, its class looked up through a per-line cache. Non-memory lines
repeat across warps, so the per-line Python work is mostly spent on memory
lines, and for those it is cut by three caches (memory stays bounded: each
is capped and cleared when full):

* per *head* (the text before the base address: PC, mask, registers,
  opcode, width, mode) the decoded fields;
* per *address pattern* (the text after the base: stride or delta list and
  immediate, for modes 1 and 2) the lanes' offsets from the base, decoded
  and validated once; only the base is converted per line;
* per (pattern, base alignment) the shared-memory bank conflicts (invariant
  under 4-byte shifts) and a global access's sector count and line offsets
  (invariant under 128-byte shifts), so a distinct line costs a few dict
  lookups plus the footprint sampler's per-line update.

The address features and the last two caches live in :mod:`cascade.traces.addresses`, the
dependency chains in :mod:`cascade.traces.depchains`.

The line offsets keep the insertion order of :func:`units_touched`, so the
sampler sees every request's lines in the same order as the plain
computation; ``tests/unit/test_traces_reference.py`` checks that the features are
identical to the pre-cache parser's. Order-dependent features (dependency
chains) run on a sample of blocks; reuse times use first-occurrence order
within a chunk (identical repeats of a line within a chunk count as
immediate reuses).
"""

from __future__ import annotations

import lzma
import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import msgspec

from cascade.errors import TraceFormatError, TruncatedStreamError
from cascade.kerneltable import KernelTable
from cascade.traces import opcodes as oc
from cascade.traces.addresses import CACHE_MAX, NOT_KEPT, AddressFeatures
from cascade.traces.depchains import DependencyChains
from cascade.traces.header import KernelHeader, parse_header
from cascade.traces.lines import LINE_FORM, FieldError, fourth_space, parse_prefix, parse_tokens

XZ_MAGIC = b"\xfd7zXZ\x00"
#: Text processed per step; memory stays a small multiple of this.
DEFAULT_CHUNK_BYTES = 4 << 20
#: Longest line accepted (a line this long without a newline is an error).
MAX_LINE_BYTES = 1 << 20
#: Blocks whose warps get the (order-dependent) dependency-chain analysis.
DEP_SAMPLE_BLOCKS = 16
_PREFIX = re.compile(rb"^\d+ \d+ \d+ \d+(?= )", re.MULTILINE)
_PREFIX_SP = re.compile(rb"^\d+ \d+ \d+ \d+ ", re.MULTILINE)
_FULL = 0xFFFFFFFF


class KernelFeatures(msgspec.Struct, frozen=True, kw_only=True):
    """Features of one kernel trace: a KernelTable row plus what the parse noticed."""

    file: str
    """the trace file (or stream name) the features came from"""
    row: dict[str, Any]
    """one KernelTable row (column name -> value)"""
    header: KernelHeader
    """the validated kernel header"""
    format: str
    """'traceg' (post-processed) or 'trace' (raw)"""
    warnings: list[str] = []
    """header fallbacks and other non-fatal findings"""
    unknown_opcodes: dict[str, int] = {}
    """most frequent unrecognised opcodes (counted as other) -> warp instructions"""
    tensor_ops: dict[str, int] = {}
    """tensor-core opcodes by kind and shape (e.g. HMMA.16816.F32) -> warp instructions"""
    lines: int = 0
    """text lines read"""
    instruction_lines: int = 0
    """instruction lines read"""
    text_bytes: int = 0
    """uncompressed text bytes read"""

    def table(self) -> KernelTable:
        """This kernel as a one-row :class:`KernelTable`."""
        return KernelTable.from_rows([self.row])


class KernelTraceParser:
    """Incremental parser for one kernel file: :meth:`feed` bytes, then :meth:`finish`.

    ``source_sm`` is the sm version of the GPU the trace was captured on,
    used when the header's binary version is implausible. ``kernel_id`` is a
    fallback when the header has none (e.g. from the file name).
    """

    def __init__(
        self,
        file: str = "<stream>",
        *,
        source_sm: int | None = None,
        kernel_id: int | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> None:
        self.file = file
        self.source_sm = source_sm
        self.kernel_id_hint = kernel_id
        self.chunk_bytes = chunk_bytes
        self.warnings: list[str] = []
        self._decomp: lzma.LZMADecompressor | None = None
        self._sniffed = False
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._carry = b""
        self._lineno = 0
        self._text_bytes = 0
        self._header_lines: list[tuple[int, bytes]] = []
        self._header: KernelHeader | None = None
        self._format = ""  # '', 'traceg', 'trace'
        self._prefixed = False
        self._prefix_checked = False
        self._lineinfo = False
        self._finished = False
        # traceg structure
        self._remaining = 0
        self._in_tb = False
        self._block: tuple[int, int, int] | None = None
        self._warp: int | None = None
        self._dep_on = False
        self._sampled_blocks = 0
        self._block_stride = 1
        # per-line records
        self._cache: dict[bytes, tuple[str, int, int]] = {}
        self._agg: dict[tuple[str, int, int], int] = {}
        self._heads: dict[bytes, tuple[str, int, int, int, int, int]] = {}
        self._inst_lines = 0
        # warps
        self._w_n = 0
        self._w_sum = 0.0
        self._w_sq = 0.0
        self._w_max = 0
        self._raw_warps: dict[bytes, list[int]] = {}
        self._raw_exits: list[tuple[bytes, int]] = []
        self._raw_prefixes: tuple[bytes, ...] = ()
        self._deps = DependencyChains()
        self._mem = AddressFeatures()

    # ---- input -----------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Feed the next bytes of the file (any split; xz detected automatically)."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        if not data:
            return
        if not self._sniffed:
            self._sniffed = True
            if data[:6] == XZ_MAGIC[: len(data[:6])] and len(data) >= 6:
                self._decomp = lzma.LZMADecompressor()
        if self._decomp is None:
            self._add_text(data)
            return
        self._decompress(data)

    def _decompress(self, data: bytes) -> None:
        d = self._decomp
        assert d is not None
        try:
            while True:
                if d.eof:
                    rest = d.unused_data
                    if not rest.strip(b"\x00"):
                        return
                    d = self._decomp = lzma.LZMADecompressor()
                    data = rest
                out = d.decompress(data, max_length=self.chunk_bytes)
                data = b""
                if out:
                    self._add_text(out)
                if d.needs_input and not d.eof:
                    return
                if d.eof and not d.unused_data:
                    return
        except lzma.LZMAError as exc:
            raise TraceFormatError(self.file, None, "a valid xz stream", str(exc)) from None

    def _add_text(self, text: bytes) -> None:
        self._text_bytes += len(text)
        step = self.chunk_bytes
        for off in range(0, len(text), step):
            piece = text[off : off + step] if len(text) > step else text
            self._pending.append(piece)
            self._pending_len += len(piece)
            if self._pending_len >= step:
                self._flush(final=False)

    def _flush(self, final: bool) -> None:
        buf = self._carry + b"".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        lines = buf.split(b"\n")
        if final:
            self._carry = b""
            if lines and lines[-1] == b"":
                lines.pop()
        else:
            self._carry = lines.pop()
            if len(self._carry) > MAX_LINE_BYTES:
                raise TraceFormatError(
                    self.file, self._lineno + len(lines) + 1,
                    f"a line shorter than {MAX_LINE_BYTES} bytes", self._carry[:80].decode("latin-1")
                )
        base = self._lineno
        self._lineno += len(lines)
        if lines:
            self._process(lines, base)

    def finish(self) -> KernelFeatures:
        """Process what is left and return the kernel's features.

        Raises :class:`TruncatedStreamError` if an xz stream ended early and
        :class:`TraceFormatError` if the text ended inside a block or warp.
        """
        if self._finished:
            raise RuntimeError("finish() called twice")
        if self._decomp is not None and not self._decomp.eof:
            raise TruncatedStreamError(
                self.file, None, "the xz end-of-stream marker (the compressed file is truncated)",
                f"end of input after {self._text_bytes} decompressed bytes",
            )
        self._flush(final=True)
        self._finished = True
        if self._header is None:
            if not self._header_lines and self._lineno == 0:
                raise TraceFormatError(self.file, None, "a kernel header", "an empty file")
            self._end_header(self._lineno)
        if self._remaining:
            raise TraceFormatError(
                self.file, self._lineno,
                f"{self._remaining} more instruction lines of warp {self._warp}", "end of file"
            )
        if self._in_tb:
            raise TraceFormatError(self.file, self._lineno, "#END_TB", "end of file")
        return self._features()

    # ---- structure -------------------------------------------------------------------------
    def _process(self, lines: list[bytes], base: int) -> None:
        start = 0
        if self._header is None:
            for idx, line in enumerate(lines):
                s = line.strip()
                if s.startswith(b"#"):
                    self._end_header(base + idx + 1)
                    start = idx + 1
                    break
                if s:
                    if not s.startswith(b"-"):
                        self._end_header(base + idx + 1)
                        start = idx
                        break
                    self._header_lines.append((base + idx + 1, s))
            else:
                return
        if start:
            lines = lines[start:]
            base += start
        if not self._format:
            for line in lines:
                s = line.strip()
                if not s or s.startswith(b"#"):
                    if s == b"#BEGIN_TB":
                        self._format = "traceg"
                        break
                    continue
                self._format = "trace"
                self._setup_raw()
                break
            else:
                return
        if self._format == "traceg":
            self._body_traceg(lines, base)
        else:
            self._body_raw(lines, base)

    def _end_header(self, lineno: int) -> None:
        self._header = parse_header(
            self._header_lines, file=self.file, source_sm=self.source_sm, warnings=self.warnings
        )
        self._lineinfo = self._header.lineinfo
        self._mem.shmem_base = self._header.shmem_base
        self._mem.local_base = self._header.local_base
        blocks = self._header.blocks
        if blocks > 0:
            self._block_stride = max(1, blocks // DEP_SAMPLE_BLOCKS)

    def _setup_raw(self) -> None:
        h = self._header
        assert h is not None
        gx, gy, _gz = h.grid
        prefixes: list[bytes] = []
        if min(h.grid) > 0:
            for lin in range(0, h.blocks, self._block_stride):
                x = lin % gx
                y = (lin // gx) % gy
                z = lin // (gx * gy)
                prefixes.append(f"{x} {y} {z} ".encode())
                if len(prefixes) >= DEP_SAMPLE_BLOCKS:
                    break
        else:
            prefixes.append(b"0 0 0 ")
        self._raw_prefixes = tuple(prefixes)

    def _body_traceg(self, lines: list[bytes], base: int) -> None:
        counter: Counter[bytes] = Counter()
        i = 0
        n = len(lines)
        while i < n:
            if self._remaining:
                take = min(n - i, self._remaining)
                seg = lines[i : i + take]
                if not self._prefix_checked:
                    self._check_prefix(seg[0])
                counter.update(seg)
                if self._dep_on:
                    self._deps.warp_lines(seg, self._prefixed, self._lineinfo)
                i += take
                self._remaining -= take
                if not self._remaining:
                    self._end_warp()
                continue
            line = lines[i]
            i += 1
            s = line.strip()
            if not s:
                continue
            if s.startswith(b"warp"):
                self._warp = self._control_int(s, b"warp", base + i)
                if not self._in_tb:
                    raise TraceFormatError(self.file, base + i, "#BEGIN_TB before 'warp ='", _t(s))
            elif s.startswith(b"insts"):
                if self._warp is None:
                    raise TraceFormatError(self.file, base + i, "'warp = N' before 'insts ='", _t(s))
                count = self._control_int(s, b"insts", base + i)
                self._remaining = count
                self._begin_warp(count)
                if not count:
                    self._end_warp()
            elif s.startswith(b"thread block"):
                xyz = s.partition(b"=")[2].split(b",")
                try:
                    bx, by, bz = (int(v) for v in xyz)
                except ValueError:
                    raise TraceFormatError(
                        self.file, base + i, "'thread block = x,y,z'", _t(s)
                    ) from None
                self._block = (bx, by, bz)
                self._warp = None
                self._dep_on = self._sample_block(bx, by, bz)
            elif s.startswith(b"cluster"):
                continue
            elif s == b"#BEGIN_TB":
                if self._in_tb:
                    raise TraceFormatError(self.file, base + i, "#END_TB before #BEGIN_TB", _t(s))
                self._in_tb = True
            elif s == b"#END_TB":
                self._in_tb = False
                self._block = None
                self._warp = None
            elif s.startswith(b"#"):
                continue
            else:
                raise TraceFormatError(
                    self.file, base + i,
                    "a block structure line (#BEGIN_TB, thread block =, warp =, insts =, #END_TB)",
                    _t(s),
                )
        self._count_lines(counter, lines, base)

    def _check_prefix(self, line: bytes) -> None:
        """Pre-version-3 .traceg lines carry the 'tb warp' prefix: detect it from content."""
        self._prefix_checked = True
        toks = line.split()
        try:
            parse_tokens(toks, self._lineinfo)
            return
        except FieldError:
            pass
        try:
            parse_prefix(toks)
            parse_tokens(toks[4:], self._lineinfo)
        except (FieldError, ValueError):
            return
        self._prefixed = True

    def _control_int(self, s: bytes, key: bytes, lineno: int) -> int:
        key_part, eq, value = s.partition(b"=")
        v = value.strip()
        if not eq or key_part.strip() != key or not v.isdigit():
            raise TraceFormatError(self.file, lineno, f"'{key.decode()} = <integer>'", _t(s))
        return int(v)

    def _sample_block(self, bx: int, by: int, bz: int) -> bool:
        h = self._header
        assert h is not None
        if self._sampled_blocks >= DEP_SAMPLE_BLOCKS:
            return False
        if min(h.grid) > 0:
            lin = bx + h.grid[0] * (by + h.grid[1] * bz)
            take = lin % self._block_stride == 0
        else:
            take = True
        if take:
            self._sampled_blocks += 1
        return take

    def _begin_warp(self, count: int) -> None:
        self._w_n += 1
        self._w_sum += count
        self._w_sq += float(count) * count
        self._w_max = max(self._w_max, count)
        self._deps.begin_warp()

    def _end_warp(self) -> None:
        if self._dep_on:
            self._deps.end_warp()

    # ---- raw traces ------------------------------------------------------------------------
    def _body_raw(self, lines: list[bytes], base: int) -> None:
        """Raw lines: strip the location prefixes in C (regex over the chunk), count the
        per-warp instructions from the prefixes, then count distinct instruction texts."""
        buf = b"\n".join(lines)
        prefixes = Counter(_PREFIX.findall(buf))
        if sum(prefixes.values()) != len(lines) - lines.count(b""):
            for idx, line in enumerate(lines):
                if line and not _PREFIX.match(line):
                    raise TraceFormatError(
                        self.file, base + idx + 1,
                        "a raw trace line starting 'cta_x cta_y cta_z warp '", _t(line)
                    )
        warps = self._raw_warps
        for key, c in prefixes.items():
            st = warps.get(key)
            if st is None:
                warps[key] = [c, 0]
            else:
                st[0] += c
        rests = _PREFIX_SP.sub(b"", buf).split(b"\n")
        self._count_lines(Counter(rests), rests, base, allow_blank=True)
        pos = buf.find(b" EXIT")
        while pos >= 0:
            start = buf.rfind(b"\n", 0, pos) + 1
            end = buf.find(b"\n", pos)
            line = buf[start : end if end >= 0 else len(buf)]
            toks = line.split()
            try:
                op_at = toks.index(b"EXIT") if b"EXIT" in toks else -1
                if op_at >= 6:
                    key = b" ".join(toks[:4])
                    mask = int(toks[5 + (1 if self._lineinfo else 0)], 16)
                    self._raw_exits.append((key, mask))
            except ValueError:
                pass
            pos = buf.find(b" EXIT", pos + 5)
        sel = [ln for ln in lines if ln.startswith(self._raw_prefixes)]
        if sel:
            self._deps.raw_lines(sel, self._lineinfo)
        self._retire_raw_warps()

    def _retire_raw_warps(self) -> None:
        if not self._raw_exits:
            return
        h = self._header
        assert h is not None
        tpb = h.threads_per_block
        warps = self._raw_warps
        for key, mask in self._raw_exits:
            st = warps.get(key)
            if st is None:
                continue
            st[1] |= mask
            expected = _FULL
            if tpb > 0:
                w = int(key.rsplit(b" ", 1)[1])
                lanes = min(32, tpb - 32 * w)
                expected = (1 << lanes) - 1 if lanes > 0 else _FULL
            if st[1] & expected == expected:
                self._retire(key, st[0])
        self._raw_exits.clear()

    def _retire(self, key: bytes, count: int) -> None:
        del self._raw_warps[key]
        self._begin_warp(count)
        self._deps.retire_raw(key)

    # ---- per distinct line -----------------------------------------------------------------
    def _count_lines(
        self, counter: Counter[bytes], lines: list[bytes], base: int, allow_blank: bool = False
    ) -> None:
        cache = self._cache
        agg = self._agg
        prefixed = self._prefixed
        heads = self._heads
        total = 0
        line = b""
        try:
            for line, c in counter.items():
                total += c
                rest = line
                if prefixed:
                    p = fourth_space(line)
                    if p < 0:
                        raise _BadLine("a 'tb_x tb_y tb_z warp' prefix", line)
                    rest = line[p + 1 :]
                elif not line and allow_blank:
                    total -= c
                    continue
                rec = cache.get(rest)
                if rec is None:
                    p = rest.find(b" 0x")
                    head = heads.get(rest[:p]) if p > 0 else None
                    if head is None:
                        rec = self._new_line(rest, c, line)
                    else:
                        rec = self._known_head(head, rest[p + 1 :], c, line)
                else:
                    agg[rec] = agg.get(rec, 0) + c
        except _BadLine as bad:
            idx = _index(lines, bad.line)
            raise TraceFormatError(
                self.file, base + idx + 1 if idx >= 0 else None, bad.expected, _t(bad.line)
            ) from None
        if len(cache) > CACHE_MAX:
            cache.clear()
        self._inst_lines += total

    def _new_line(self, rest: bytes, c: int, full: bytes) -> tuple[str, int, int]:
        toks = rest.split()
        try:
            parsed = parse_tokens(toks, self._lineinfo)
        except FieldError as exc:
            expected = exc.expected
            if b"=" in full or full.startswith(b"#") or not full.strip():
                expected = (f"an instruction line ({expected}); the 'insts =' count of the "
                            "warp may exceed the lines that follow")
            raise _BadLine(expected + f" in '{LINE_FORM}'", full) from None
        _pc, mask, _dest, opcode, _srcs, width, mode, base, addr, _imm = parsed
        info = oc.classify(opcode)
        if width == 0 or mask == 0 or info.mem in (oc.MEM_NONE, oc.MEM_OTHER):
            rec = (opcode, mask, -1)
            self._cache[rest] = rec
        else:
            p = rest.find(b" 0x")
            head = (opcode, mask, info.mem, width, mode, mask.bit_count())
            if p > 0 and len(self._heads) < CACHE_MAX:
                self._heads[rest[:p]] = head
            cls = self._mem.fast_memory(head, rest[p + 1 :], c, base) if p > 0 else None
            if cls is None or cls == NOT_KEPT:
                cls = self._mem.memory(info.mem, mask, width, mode, base, addr, c)
            rec = (opcode, mask, cls)
        self._agg[rec] = self._agg.get(rec, 0) + c
        return rec

    def _known_head(
        self, head: tuple[str, int, int, int, int, int], tail: bytes, c: int, full: bytes
    ) -> tuple[str, int, int]:
        """A memory line whose fields up to the address mode were seen before: parse the tail."""
        opcode, mask, mem, width, mode, _n = head
        if mode:
            cls = self._mem.fast_memory(head, tail, c)
            if cls is None:
                return self._reparse(full, c)
            if cls != NOT_KEPT:
                rec = (opcode, mask, cls)
                self._agg[rec] = self._agg.get(rec, 0) + c
                return rec
        t = tail.split()
        n = mask.bit_count()
        try:
            base = int(t[0], 16)
            if mode == 1:
                addr: object = int(t[1])
                used = 2
            elif mode == 2:
                used = n if n > 0 else 1
                addr = [int(x) for x in t[1:used]]
                if len(addr) != used - 1:
                    raise ValueError
            else:
                addr = [int(x, 16) for x in t[:n]]
                used = n
                if len(addr) != n or any(x[:2] != b"0x" for x in t[:n]):
                    raise ValueError
            if len(t) > used:
                int(t[used])
                if len(t) > used + 1 and t[used + 1] != b"STORE_DATA":
                    raise ValueError
        except (ValueError, IndexError):
            return self._reparse(full, c)
        cls = self._mem.memory(mem, mask, width, mode, base, addr, c)
        rec = (opcode, mask, cls)
        self._agg[rec] = self._agg.get(rec, 0) + c
        return rec

    def _reparse(self, full: bytes, c: int) -> tuple[str, int, int]:
        rest = full
        if self._prefixed:
            p = fourth_space(full)
            rest = full[p + 1 :]
        return self._new_line(rest, c, full)

    # ---- result ----------------------------------------------------------------------------
    def _features(self) -> KernelFeatures:
        h = self._header
        assert h is not None
        if self._format == "trace":
            for key in list(self._raw_warps):
                self._retire(key, self._raw_warps[key][0])
            self._deps.finish_raw()
        counts = [0] * oc.N_CLASSES
        pred_off = partial = 0
        tensor_ops: Counter[str] = Counter()
        tensor_kind: Counter[str] = Counter()
        tensor_flops = 0.0
        unknown: Counter[str] = Counter()
        for (opcode, mask, cls), c in self._agg.items():
            info = oc.classify(opcode)
            counts[cls if cls >= 0 else info.cls] += c
            if mask == 0:
                pred_off += c
            elif mask != _FULL:
                partial += c
            if info.tensor_kind:
                tensor_ops[opcode] += c
                tensor_kind[info.tensor_kind] += c
                tensor_flops += info.tensor_flops * c
            if not info.known:
                unknown[opcode] += c
        total = sum(counts)
        if unknown:
            top = ", ".join(f"{k} x{v}" for k, v in unknown.most_common(5))
            self.warnings.append(f"{self.file}: {sum(unknown.values())} warp instructions with "
                                 f"unknown opcodes counted as other ({top})")
        kernel_id = h.kernel_id if h.kernel_id >= 0 else (self.kernel_id_hint or -1)
        mem = self._mem
        smem = h.smem_bytes
        if smem < 0 and mem.smem_extent > 0:
            smem = mem.smem_extent
        wn = self._w_n
        mean = self._w_sum / wn if wn else math.nan
        std = math.sqrt(max(0.0, self._w_sq / wn - mean * mean)) if wn else math.nan
        l1, l2 = mem.sampler.fractions()
        row: dict[str, Any] = {
            "name": h.name, "kernel_id": kernel_id,
            "grid_x": h.grid[0], "grid_y": h.grid[1], "grid_z": h.grid[2],
            "block_x": h.block[0], "block_y": h.block[1], "block_z": h.block[2],
            "regs": h.regs, "smem_bytes": smem, "sm_version": h.sm_version, "stream": h.stream,
            "warp_insts": float(total),
        }
        for col, v in zip(oc.CLASS_COLUMNS, counts, strict=True):
            row[col] = float(v)
        for kind in ("hmma", "imma", "dmma", "gmma"):
            row[f"insts_tensor_{kind}"] = float(tensor_kind.get(kind, 0))
        row.update({
            "tensor_flops": tensor_flops,
            "insts_pred_off": float(pred_off),
            "insts_partial": float(partial),
            "warps": float(wn),
            "insts_per_warp_mean": mean,
            "insts_per_warp_max": float(self._w_max) if wn else math.nan,
            "insts_per_warp_std": std,
            "gmem_requests": float(mem.gmem_requests),
            "gmem_sectors": float(mem.gmem_ld + mem.gmem_st + mem.gmem_atom),
            "gmem_ld_sectors": float(mem.gmem_ld),
            "gmem_st_sectors": float(mem.gmem_st),
            "footprint_lines": mem.sampler.footprint,
            "reuse_le_l1": l1,
            "reuse_le_l2": l2,
            "smem_accesses": float(mem.smem_acc),
            "smem_bank_conflicts": float(mem.smem_conf),
            "local_bytes": float(mem.local_bytes),
            "dep_chain": self._deps.mean(),
        })
        return KernelFeatures(
            file=self.file,
            row=row,
            header=h,
            format=self._format or "traceg",
            warnings=list(self.warnings),
            unknown_opcodes=dict(unknown.most_common(20)),
            tensor_ops=dict(tensor_ops),
            lines=self._lineno,
            instruction_lines=self._inst_lines,
            text_bytes=self._text_bytes,
        )


class _BadLine(Exception):
    def __init__(self, expected: str, line: bytes) -> None:
        self.expected = expected
        self.line = line
        super().__init__(expected)


def _index(lines: list[bytes], line: bytes) -> int:
    try:
        return lines.index(line)
    except ValueError:
        return -1


def _t(b: bytes) -> str:
    return b.decode("utf-8", "replace")


# ---- convenience entry points -------------------------------------------------------------
def parse_kernel_stream(
    stream: IO[bytes] | Iterable[bytes],
    *,
    file: str = "<stream>",
    source_sm: int | None = None,
    kernel_id: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> KernelFeatures:
    """Parse one kernel from a binary file object or an iterable of byte chunks."""
    parser = KernelTraceParser(file, source_sm=source_sm, kernel_id=kernel_id,
                               chunk_bytes=chunk_bytes)
    read = getattr(stream, "read", None)
    if read is not None:
        while True:
            data = read(1 << 20)
            if not data:
                break
            if isinstance(data, str):
                data = data.encode()
            parser.feed(data)
    else:
        for data in stream:
            parser.feed(data.encode() if isinstance(data, str) else data)
    return parser.finish()


def kernel_id_from_name(name: str) -> int | None:
    """The N of ``kernel-N[-ctx_0x...].trace[g][.xz]`` (None if the name has another form)."""
    stem = Path(name).name
    if not stem.startswith("kernel-"):
        return None
    digits = stem[7:].split("-", 1)[0].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def parse_kernel_file(
    path: str | Path, *, source_sm: int | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> KernelFeatures:
    """Parse one kernel trace file (``.trace``, ``.traceg``, optionally ``.xz``)."""
    path = Path(path)
    with path.open("rb") as fh:
        return parse_kernel_stream(
            fh, file=str(path), source_sm=source_sm, kernel_id=kernel_id_from_name(path.name),
            chunk_bytes=chunk_bytes,
        )
