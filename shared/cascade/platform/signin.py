"""One-time sign-in links: ``cascade up`` prints ``http://127.0.0.1:8080/?signin=CODE``.

The code is random and kept only as its SHA-256 in the ``cascade-meta`` KV bucket
(``signin.{sha256}``), with the API token it stands for and an expiry. The web UI sends
it once to ``POST /api/signin``; the api marks the record redeemed with a compare-and-set
on its revision (two browsers, or two api replicas, racing on one code: one wins), puts
the token into the browser's session storage and removes the code from the address bar.
A used, unknown or expired code is a 401 naming what to do instead (paste the token).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Annotated, Any

import msgspec

from cascade.errors import ConflictError, UnauthorizedError
from cascade.platform import subjects

#: Query parameter of the sign-in link.
SIGNIN_PARAM = "signin"
#: How long a printed link stays usable, in seconds.
SIGNIN_TTL_S = 12 * 3600.0


class SignInCode(msgspec.Struct, frozen=True, kw_only=True):
    """A sign-in code's record (KV ``cascade-meta``, key ``signin.{sha256 of the code}``)."""

    token: str
    """The API token the code is exchanged for."""
    created_at: float
    """Unix time the code was issued."""
    expires_at: float
    """Unix time after which the code is refused."""
    redeemed_at: float | None = None
    """Unix time the code was exchanged (a redeemed code is refused)."""


class SignInResult(msgspec.Struct, frozen=True, kw_only=True):
    """Answer of ``POST /api/signin``: the token for the browser session."""

    token: str
    """Bearer token for writes (the web UI keeps it in session storage)."""


class SignInRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Body of ``POST /api/signin``."""

    code: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    """The ``signin`` parameter of the link ``cascade up`` printed."""


def signin_key(code: str) -> str:
    """KV key of a code: ``signin.{sha256 hex}`` (the code itself is never stored)."""
    return subjects.kv_key("signin", hashlib.sha256(code.encode()).hexdigest())


def signin_url(base_url: str, code: str) -> str:
    """The link to print: ``{base}/?signin={code}``."""
    return f"{base_url.rstrip('/')}/?{SIGNIN_PARAM}={code}"


async def issue_code(bus: Any, token: str, *, ttl_s: float = SIGNIN_TTL_S,
                     now: float | None = None) -> str:
    """Store a fresh one-time code for ``token``; returns the code."""
    t = time.time() if now is None else now
    code = secrets.token_urlsafe(24)
    meta = await bus.kv(subjects.KV_META)
    await meta.create(signin_key(code), SignInCode(token=token, created_at=t, expires_at=t + ttl_s))
    return code


_REFUSED = ("this sign-in link {why}: paste the API token (printed by `cascade up`, kept in "
            "its credentials.json) into the API token box, or restart `cascade up` for a new link")


async def redeem_code(bus: Any, code: str, *, now: float | None = None) -> str:
    """Exchange ``code`` once for its token; :class:`UnauthorizedError` if unknown, used or
    expired."""
    t = time.time() if now is None else now
    if not code or len(code) > 200:
        raise UnauthorizedError(_REFUSED.format(why="is not valid"))
    meta = await bus.kv(subjects.KV_META)
    key = signin_key(code)
    entry = await meta.get(key, SignInCode)
    if entry is None:
        raise UnauthorizedError(_REFUSED.format(why="is not valid"))
    record: SignInCode = entry.value
    if record.redeemed_at is not None:
        raise UnauthorizedError(_REFUSED.format(why="was already used"))
    if record.expires_at < t:
        raise UnauthorizedError(_REFUSED.format(why="has expired"))
    try:
        await meta.update(key, msgspec.structs.replace(record, redeemed_at=t), revision=entry.revision)
    except ConflictError:
        raise UnauthorizedError(_REFUSED.format(why="was already used")) from None
    return record.token
