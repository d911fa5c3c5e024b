"""Bounded streaming decompression (xz and gzip) for untrusted uploads.

:class:`BoundedDecompressor` is fed compressed chunks and returns decompressed bytes,
refusing to produce more than ``max_bytes`` in all, or more than ``max_ratio`` output
bytes per input byte once past ``ratio_floor`` bytes of output (a compression bomb: the
issue's 1.5 MB gzip holding a 1.5 GB string). Its error is a
:class:`cascade.errors.TraceFormatError` naming the file and the limit it crossed.
Concatenated members (``cat a.gz b.gz``, multi-stream xz) are followed.
"""

from __future__ import annotations

import lzma
import zlib
from typing import Literal

from cascade.errors import TraceFormatError

#: Most decompressed bytes one file may produce.
MAX_DECOMPRESSED_BYTES = 8 * 1024**3
#: Most decompressed bytes per compressed byte (checked once past RATIO_FLOOR_BYTES).
MAX_RATIO = 100.0
#: Output below this is never refused for its ratio (small files compress very well).
RATIO_FLOOR_BYTES = 64 * 1024**2

Codec = Literal["xz", "gzip"]


class BoundedDecompressor:
    """Incremental xz/gzip decompression with output size and ratio limits."""

    def __init__(self, name: str, codec: Codec, *, max_bytes: int = MAX_DECOMPRESSED_BYTES,
                 max_ratio: float = MAX_RATIO, ratio_floor: int = RATIO_FLOOR_BYTES) -> None:
        self.name = name
        self.codec = codec
        self.max_bytes = max_bytes
        self.max_ratio = max_ratio
        self.ratio_floor = ratio_floor
        self.bytes_in = 0
        self.bytes_out = 0
        self._dec = self._new()

    def _new(self) -> lzma.LZMADecompressor | zlib._Decompress:
        if self.codec == "xz":
            return lzma.LZMADecompressor()
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> bytes:
        """Decompressed bytes of the next compressed chunk (TraceFormatError past a limit)."""
        self.bytes_in += len(data)
        out: list[bytes] = []
        buf = data
        while True:
            room = self.max_bytes - self.bytes_out + 1
            try:
                chunk = self._dec.decompress(buf, room)
            except (lzma.LZMAError, zlib.error) as exc:
                raise TraceFormatError(self.name, None, f"a valid {self.codec} stream",
                                       str(exc)) from None
            self._count(chunk)
            out.append(chunk)
            if self._dec.eof:
                buf = bytes(self._dec.unused_data)
                if not buf:
                    break
                self._dec = self._new()  # the next member / stream
                continue
            if isinstance(self._dec, lzma.LZMADecompressor):
                if self._dec.needs_input:
                    break
                buf = b""
            else:
                buf = bytes(self._dec.unconsumed_tail)
                if not buf:
                    break
        return b"".join(out)

    def finish(self) -> None:
        """Raise if the stream ended early (a truncated or empty file)."""
        if not self._dec.eof:
            raise TraceFormatError(self.name, None, f"a complete {self.codec} stream",
                                   f"truncated after {self.bytes_in} compressed bytes")

    # -- helpers over the two decompressor types --------------------------------------------
    def _count(self, chunk: bytes) -> None:
        self.bytes_out += len(chunk)
        if self.bytes_out > self.max_bytes:
            raise TraceFormatError(
                self.name, None,
                f"at most {self.max_bytes} bytes once decompressed (the decompressed-size limit)",
                f"more than {self.max_bytes} bytes from {self.bytes_in} compressed bytes")
        if self.bytes_out > self.ratio_floor and self.bytes_out > self.max_ratio * max(1, self.bytes_in):
            raise TraceFormatError(
                self.name, None,
                f"at most {self.max_ratio:g} decompressed bytes per compressed byte "
                "(the compression-ratio limit)",
                f"{self.bytes_out} bytes from {self.bytes_in} compressed bytes")
