"""``POST /api/signin``: exchange a one-time sign-in code (the link ``cascade up`` prints)
for the API token; see :mod:`cascade.platform.signin`."""

from __future__ import annotations

from aiohttp import web

from cascade.errors import UnauthorizedError
from cascade.platform.log import get_logger
from cascade.platform.signin import SignInRequest, SignInResult, redeem_code
from services.api.http import doc, json_response, public, read_json
from services.api.keys import BUS, SETTINGS

routes = web.RouteTableDef()
log = get_logger("cascade.api.signin")


@routes.post("/api/signin")
@doc(request=SignInRequest, response=SignInResult, tags=("operations",),
     responses={200: "the token for this browser session", 400: "not a JSON body with a code",
                413: "body too large",
                401: "the code is unknown, already used or expired"})
@public
async def signin(request: web.Request) -> web.Response:
    """Exchange a sign-in link's one-time code for the API token (a code works once)."""
    body = await read_json(request, SignInRequest, max_bytes=4096)
    token = await redeem_code(request.app[BUS], body.code)
    accepted = request.app[SETTINGS].api_tokens
    if accepted and token not in accepted:
        raise UnauthorizedError("this sign-in link names a token this api no longer accepts: "
                                "paste the current API token, or restart `cascade up`")
    log.info("signed in with a one-time link")
    return json_response(SignInResult(token=token))
