"""``POST /api/signin``: exchange a one-time sign-in code (the link ``cascade up`` prints)
for the API token; see :mod:`cascade.platform.signin`.

Wrong codes are rate-limited per client address: once a client has sent :data:`MAX_FAILURES`
codes that were unknown, used or expired within :data:`WINDOW_S` seconds, its next attempts
are answered 429 (``too_many_attempts``, with ``Retry-After``: the seconds until its oldest
counted failure leaves the window) without looking the code up. A code is 24 random bytes;
the limit bounds how fast one client can guess, and a mistyped link costs a person nothing.
Each api instance counts its own clients (a replica behind a proxy sees the proxy's address).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from aiohttp import web

from cascade.errors import RateLimitedError, UnauthorizedError
from cascade.platform.log import get_logger
from cascade.platform.signin import SignInRequest, SignInResult, redeem_code
from services.api.appkeys import BUS, SETTINGS
from services.api.http import doc, json_response, public, read_json

routes = web.RouteTableDef()
log = get_logger("cascade.api.signin")

#: Wrong codes (unknown, used or expired) one client may send within :data:`WINDOW_S`.
MAX_FAILURES = 5
#: The sliding window of :data:`MAX_FAILURES`, in seconds.
WINDOW_S = 60.0
#: Clients whose failures are remembered at once (the least recent forgotten first).
MAX_CLIENTS = 10_000


class FailureWindow:
    """Failed attempts per client in a sliding window of ``window_s`` seconds: a client with
    ``max_failures`` of them in the window waits until the oldest leaves it. Bounded: at most
    ``max_failures`` times per client and ``max_clients`` clients."""

    def __init__(self, max_failures: int = MAX_FAILURES, window_s: float = WINDOW_S, *,
                 max_clients: int = MAX_CLIENTS, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_clients = max_clients
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: it may now)."""
        now = self.clock()
        times = self._recent(client, now)
        if times is None or len(times) < self.max_failures:
            return 0.0
        return max(0.0, times[0] + self.window_s - now)

    def failed(self, client: str) -> None:
        """Count a failed attempt of ``client``."""
        now = self.clock()
        times = self._recent(client, now)
        if times is None:
            times = self._failures[client] = deque(maxlen=self.max_failures)
        times.append(now)
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)


SIGNIN_FAILURES = web.AppKey("signin_failures", FailureWindow)
"""This api instance's :class:`FailureWindow` of wrong sign-in codes."""


def setup(app: web.Application) -> None:
    """The per-instance count of wrong sign-in codes."""
    app[SIGNIN_FAILURES] = FailureWindow()


@routes.post("/api/signin")
@doc(request=SignInRequest, response=SignInResult, tags=("operations",),
     responses={200: "the token for this browser session", 400: "not a JSON body with a code",
                413: "body too large",
                401: "the code is unknown, already used or expired",
                429: (f"this client sent {MAX_FAILURES} unknown, used or expired codes within "
                      f"{WINDOW_S:g} s: wait the Retry-After seconds")},
     headers={429: {"Retry-After": ("seconds to wait before the next attempt",
                                    {"type": "integer", "minimum": 1})}})
@public
async def signin(request: web.Request) -> web.Response:
    """Exchange a sign-in link's one-time code for the API token (a code works once; wrong
    codes are limited per client)."""
    body = await read_json(request, SignInRequest, max_bytes=4096)
    failures = request.app[SIGNIN_FAILURES]
    client = request.remote or "unknown"
    wait = failures.retry_after(client)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        log.warning("sign-in attempts limited", client=client, retry_after_s=seconds)
        raise RateLimitedError(
            f"too many wrong sign-in codes from this client ({failures.max_failures} within "
            f"{failures.window_s:g} s): try again in {seconds} s, or paste the API token "
            "(printed by `cascade up`) into the API token box", limit=failures.max_failures,
            retry_after_s=seconds)
    try:
        token = await redeem_code(request.app[BUS], body.code)
    except UnauthorizedError:
        failures.failed(client)
        raise
    accepted = request.app[SETTINGS].api_tokens
    if accepted and token not in accepted:
        raise UnauthorizedError("this sign-in link names a token this api no longer accepts: "
                                "paste the current API token, or restart `cascade up`")
    log.info("signed in with a one-time link")
    return json_response(SignInResult(token=token))
