"""Base class and codecs shared by every message family."""

from __future__ import annotations

import functools
import time
from typing import Any, Generic, TypeVar

import msgspec

from cascade.errors import ValidationError

T = TypeVar("T")


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every bus message; ``type`` carries the versioned tag."""

    at: float = msgspec.field(default_factory=time.time)
    """Unix time (seconds) at which the producer created the message."""


_ENCODER = msgspec.json.Encoder()


def encode(message: msgspec.Struct) -> bytes:
    """JSON bytes of one message (its ``type`` tag included)."""
    return _ENCODER.encode(message)


class Codec(Generic[T]):
    """Encoder/decoder for one message type or tagged union, built once per service."""

    def __init__(self, type_: Any) -> None:
        self.type = type_
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)

    def encode(self, message: T) -> bytes:
        """JSON bytes of ``message``."""
        return _ENCODER.encode(message)

    def decode(self, data: bytes | str, *, what: str = "message") -> T:
        """Typed message from JSON; :class:`ValidationError` (naming ``what``) if malformed."""
        try:
            return self._decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ValidationError(f"malformed {what}: {exc}", field=what) from None


@functools.cache
def _cached_codec(type_: Any) -> Codec[Any]:
    return Codec(type_)


def codec(type_: Any) -> Codec[Any]:
    """The shared :class:`Codec` for a message type or union (cached)."""
    return _cached_codec(type_)
