"""What an id may be: one token, usable inside NATS subjects and KV keys as it is."""

from __future__ import annotations

import re

from cascade.errors import ValidationError

_TOKEN = re.compile(r"^[A-Za-z0-9_\-=]+$")


def check_token(value: str, what: str = "id") -> str:
    """Return ``value`` if it is usable as one subject token (and KV key part), else raise.

    Ids appear inside subjects and KV keys, so they may not contain ``.``, ``*``,
    ``>``, whitespace or other separators.
    """
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise ValidationError(
            f"{value!r} is not a valid {what}: expected letters, digits, '_', '-' or '='",
            field=what,
        )
    return value


__all__ = ["check_token"]
