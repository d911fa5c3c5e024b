"""Bounded decompression of untrusted uploads: size and ratio limits, truncation, members."""

from __future__ import annotations

import gzip
import lzma

import pytest

from cascade.errors import TraceFormatError
from cascade.traces.xzstream import BoundedDecompressor


def _feed_all(dec: BoundedDecompressor, blob: bytes, chunk: int = 4096) -> bytes:
    out = b"".join(dec.feed(blob[i:i + chunk]) for i in range(0, len(blob), chunk))
    dec.finish()
    return out


@pytest.mark.parametrize("codec", ["gzip", "xz"])
def test_round_trip_in_small_chunks_and_concatenated_members(codec: str) -> None:
    pack = gzip.compress if codec == "gzip" else lzma.compress
    a, b = b"first member\n" * 1000, b"second member\n" * 777
    got = _feed_all(BoundedDecompressor("t.json.gz", codec), pack(a) + pack(b), chunk=97)  # type: ignore[arg-type]
    assert got == a + b


@pytest.mark.parametrize("codec", ["gzip", "xz"])
def test_compression_bomb_fails_naming_the_file_and_the_ratio_limit(codec: str) -> None:
    pack = gzip.compress if codec == "gzip" else lzma.compress
    bomb = pack(b'{"traceEvents": [{"name": "' + b"A" * (64 * 1024 * 1024) + b'"}]}')
    assert len(bomb) < 1024 * 1024
    dec = BoundedDecompressor("bomb.json.gz", codec, ratio_floor=1024 * 1024)  # type: ignore[arg-type]
    with pytest.raises(TraceFormatError) as err:
        _feed_all(dec, bomb, chunk=64 * 1024)
    assert err.value.file == "bomb.json.gz" and "compression-ratio limit" in str(err.value)
    assert dec.bytes_out < 200 * 1024 * 1024  # stopped early, not after inflating it all


def test_decompressed_size_limit() -> None:
    blob = gzip.compress(b"x" * 100_000)
    with pytest.raises(TraceFormatError) as err:
        _feed_all(BoundedDecompressor("big.json.gz", "gzip", max_bytes=50_000), blob)
    assert "50000 bytes once decompressed" in str(err.value) and "big.json.gz" in str(err.value)


@pytest.mark.parametrize("codec", ["gzip", "xz"])
def test_truncated_and_garbage_streams(codec: str) -> None:
    pack = gzip.compress if codec == "gzip" else lzma.compress
    blob = pack(b"some text " * 5000)
    with pytest.raises(TraceFormatError, match="truncated"):
        _feed_all(BoundedDecompressor("cut", codec), blob[: len(blob) // 2])  # type: ignore[arg-type]
    with pytest.raises(TraceFormatError, match=f"a valid {codec} stream"):
        _feed_all(BoundedDecompressor("junk", codec), b"not compressed at all" * 10)  # type: ignore[arg-type]
