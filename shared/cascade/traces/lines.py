"""One Accel-Sim instruction line: parse and format.

``[line_num] PC mask dest_num [R<d>] OPCODE src_num [R<s> ...] mem_width
[mode base ...] [immediate]`` (see docs/trace-formats.md). The hot path uses
:func:`parse_tokens` on an already split line; :func:`parse_instruction_line`
wraps it for callers that want a typed result and a located error.
"""

from __future__ import annotations

import msgspec

from cascade.errors import TraceFormatError

#: Address encodings after ``mem_width``.
MODE_LIST, MODE_STRIDE, MODE_DELTA = 0, 1, 2

#: What a well-formed line looks like (used in error messages).
LINE_FORM = "[line_num] PC mask dest_num [R<d>] OPCODE src_num [R<s>...] mem_width [addresses] [imm]"


class InstructionLine(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of one instruction line."""

    line_num: int | None = None
    """source line number (only with ``enable lineinfo = 1``)"""
    pc: int
    """PC offset within the kernel"""
    mask: int
    """active-and-predicated lane mask (0 = predicated off)"""
    dest: int | None = None
    """destination general register number, None if none"""
    opcode: str
    """full SASS opcode with modifiers"""
    srcs: tuple[int, ...] = ()
    """source general register numbers"""
    width: int = 0
    """bytes per thread for memory instructions, 0 otherwise"""
    mode: int | None = None
    """address mode (0 list, 1 base+stride, 2 base+deltas), None without addresses"""
    base: int = 0
    """first active lane's address (modes 1 and 2)"""
    stride: int = 0
    """lane stride (mode 1)"""
    addresses: tuple[int, ...] = ()
    """all active lanes' addresses (mode 0) or the deltas (mode 2)"""
    immediate: int | None = None
    """trailing immediate (version 5, some late version 4)"""
    prefix: tuple[int, int, int, int] | None = None
    """(cta_x, cta_y, cta_z, warp) for raw / pre-v3 lines"""


class FieldError(ValueError):
    """Raised by :func:`parse_tokens`: names the field that was expected."""

    def __init__(self, expected: str) -> None:
        self.expected = expected
        super().__init__(expected)


def _reg(tok: bytes) -> int:
    if tok[:1] != b"R" or not tok[1:].isdigit():
        raise ValueError(tok)
    return int(tok[1:])


ParsedTokens = tuple[int, int, int, str, tuple[int, ...], int, int, int, object, int | None]


def parse_tokens(t: list[bytes], lineinfo: bool) -> ParsedTokens:
    """Parse a split instruction line (no location prefix).

    Returns ``(pc, mask, dest, opcode, srcs, width, mode, base, addr, imm)``
    where ``dest`` is -1 for none, ``mode`` -1 without addresses, ``addr`` the
    stride (mode 1), the list of deltas (mode 2) or of addresses (mode 0).
    Raises :class:`FieldError` naming the field that is malformed.
    """
    f = "line number"
    try:
        i = 0
        if lineinfo:
            if not t[0].isdigit():
                raise ValueError
            i = 1
        f = "PC (hex)"
        pc = int(t[i], 16)
        if pc < 0:
            raise ValueError
        f = "active mask (8 hex digits)"
        m = t[i + 1]
        if len(m) != 8:
            raise ValueError
        mask = int(m, 16)
        if mask < 0:
            raise ValueError
        f = "dest_num 0 or 1"
        nd = t[i + 2]
        if nd == b"0":
            dest = -1
            i += 3
        elif nd == b"1":
            f = "destination register R<n>"
            dest = _reg(t[i + 3])
            i += 4
        else:
            raise ValueError
        f = "opcode"
        op = t[i]
        if not op[:1].isalpha() or not op[:1].isupper():
            raise ValueError
        opcode = op.decode("ascii")
        f = "src_num"
        ns_tok = t[i + 1]
        if not ns_tok.isdigit():
            raise ValueError
        ns = int(ns_tok)
        if ns > 8:
            raise ValueError
        f = "source register R<n>"
        srcs = tuple([_reg(x) for x in t[i + 2 : i + 2 + ns]])
        if len(srcs) != ns:
            raise ValueError
        i += 2 + ns
        f = "mem_width"
        w_tok = t[i]
        if not w_tok.isdigit():
            raise ValueError
        width = int(w_tok)
        i += 1
        mode = -1
        base = 0
        addr: object = None
        if width > 0:
            f = "address mode 0, 1 or 2"
            mode_tok = t[i]
            i += 1
            n = mask.bit_count()
            if mode_tok == b"1":
                mode = 1
                f = "base address (0x hex)"
                base = _hex(t[i])
                f = "stride (integer)"
                addr = int(t[i + 1])
                i += 2
            elif mode_tok == b"2":
                mode = 2
                f = "base address (0x hex)"
                base = _hex(t[i])
                nd_ = n - 1 if n > 0 else 0
                f = f"{nd_} address deltas (integers)"
                addr = [int(x) for x in t[i + 1 : i + 1 + nd_]]
                if len(addr) != nd_:
                    raise ValueError
                i += 1 + nd_
            elif mode_tok == b"0":
                mode = 0
                f = f"{n} addresses (0x hex)"
                addr = [_hex(x) for x in t[i : i + n]]
                if len(addr) != n:
                    raise ValueError
                base = addr[0] if n else 0
                i += n
            else:
                raise ValueError
        imm: int | None = None
        if i < len(t):
            f = "a trailing immediate (integer) or end of line"
            imm = int(t[i])
            i += 1
            if i < len(t) and t[i] != b"STORE_DATA":
                raise ValueError
    except (ValueError, IndexError, UnicodeDecodeError):
        raise FieldError(f) from None
    return pc, mask, dest, opcode, srcs, width, mode, base, addr, imm


def _hex(tok: bytes) -> int:
    if tok[:2] not in (b"0x", b"0X"):
        raise ValueError(tok)
    return int(tok, 16)


def parse_prefix(tokens: list[bytes]) -> tuple[int, int, int, int]:
    """The ``cta_x cta_y cta_z warp`` location prefix of a raw line (ValueError if bad)."""
    if len(tokens) < 4 or not all(x.isdigit() for x in tokens[:4]):
        raise ValueError("prefix")
    return int(tokens[0]), int(tokens[1]), int(tokens[2]), int(tokens[3])


def fourth_space(line: bytes) -> int:
    """Index of the space that ends a raw line's ``cta_x cta_y cta_z warp`` prefix (-1: none)."""
    p = line.find(b" ")
    if p < 0:
        return -1
    p = line.find(b" ", p + 1)
    if p < 0:
        return -1
    p = line.find(b" ", p + 1)
    if p < 0:
        return -1
    return line.find(b" ", p + 1)


def parse_instruction_line(
    line: str | bytes,
    *,
    lineinfo: bool = False,
    prefixed: bool = False,
    file: str = "<line>",
    lineno: int | None = None,
) -> InstructionLine:
    """Parse one instruction line into an :class:`InstructionLine`.

    ``prefixed`` lines carry the ``cta_x cta_y cta_z warp`` prefix (raw
    ``.trace`` files, pre-version-3 ``.traceg``). Any malformed line raises
    :class:`TraceFormatError` naming ``file``, ``lineno`` and the field.
    """
    data = line.encode("utf-8", "replace") if isinstance(line, str) else line
    toks = data.split()
    prefix = None
    if prefixed:
        try:
            prefix = parse_prefix(toks)
        except ValueError:
            raise TraceFormatError(
                file, lineno, "a 'cta_x cta_y cta_z warp' prefix", _text(data)
            ) from None
        toks = toks[4:]
    try:
        pc, mask, dest, opcode, srcs, width, mode, base, addr, imm = parse_tokens(toks, lineinfo)
    except FieldError as exc:
        raise TraceFormatError(file, lineno, exc.expected, _text(data)) from None
    stride = 0
    addresses: tuple[int, ...] = ()
    if mode == 1:
        stride = addr  # type: ignore[assignment]
    elif mode in (0, 2):
        addresses = tuple(addr)  # type: ignore[arg-type]
    return InstructionLine(
        line_num=int(toks[0]) if lineinfo else None,
        pc=pc,
        mask=mask,
        dest=dest if dest >= 0 else None,
        opcode=opcode,
        srcs=srcs,
        width=width,
        mode=mode if mode >= 0 else None,
        base=base,
        stride=stride,
        addresses=addresses,
        immediate=imm,
        prefix=prefix,
    )


def format_instruction_line(inst: InstructionLine) -> str:
    """Write an instruction line exactly as the Accel-Sim tracer does (trailing space)."""
    parts: list[str] = []
    if inst.prefix is not None:
        parts.extend(str(x) for x in inst.prefix)
    if inst.line_num is not None:
        parts.append(str(inst.line_num))
    parts.append(f"{inst.pc:04x}")
    parts.append(f"{inst.mask:08x}")
    if inst.dest is not None:
        parts.extend(("1", f"R{inst.dest}"))
    else:
        parts.append("0")
    parts.append(inst.opcode)
    parts.append(str(len(inst.srcs)))
    parts.extend(f"R{r}" for r in inst.srcs)
    parts.append(str(inst.width))
    if inst.width > 0:
        mode = inst.mode if inst.mode is not None else 1
        parts.append(str(mode))
        if mode == 1:
            parts.extend((f"0x{inst.base:x}", str(inst.stride)))
        elif mode == 2:
            parts.append(f"0x{inst.base:x}")
            parts.extend(str(d) for d in inst.addresses)
        else:
            parts.extend(f"0x{a:016x}" for a in inst.addresses)
    if inst.immediate is not None:
        parts.append(str(inst.immediate))
    return " ".join(parts) + " "


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")
