"""The web UI: ``GET /`` serves ``index.html``; ``GET /ui/{file}`` serves the static files.

Files come from ``services/api/web`` (this service's ``web`` folder). Only regular files inside that folder are served: a path that leaves
it (``..``, absolute paths, symlinks pointing outside) or names a folder is a
404, never a directory listing.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from cascade.errors import NotFoundError
from services.api.http import doc

routes = web.RouteTableDef()

#: Folder the UI files are served from.
WEB_DIR: Path = Path(__file__).resolve().parents[1] / "web"

#: Content types by suffix (explicit: the platform's mimetypes table varies).
CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain",
    ".map": "application/json",
}
_TEXT = {"text/html", "text/javascript", "text/css", "application/json", "image/svg+xml", "text/plain"}


def resolve_ui_file(name: str, root: Path = WEB_DIR) -> Path:
    """The file ``name`` under ``root``; :class:`NotFoundError` for anything outside it or missing."""
    if not name or "\x00" in name or name.startswith(("/", "\\")) or "\\" in name:
        raise NotFoundError(f"no UI file {name!r}")
    base = root.resolve()
    try:
        path = (base / name).resolve()
        found = path.is_relative_to(base) and path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a bad component
        found = False
    if not found:
        raise NotFoundError(f"no UI file {name[:200]!r}")
    return path


def _file_response(path: Path) -> web.Response:
    content_type = CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")
    charset = "utf-8" if content_type in _TEXT else None
    return web.Response(
        body=path.read_bytes(), content_type=content_type, charset=charset,
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


_TEXT_BODY = {"schema": {"type": "string"}}


@routes.get("/")
@doc(tags=("ui",), content={"text/html": _TEXT_BODY}, responses={404: "the UI files are missing"})
async def index(request: web.Request) -> web.Response:
    """The web UI's page (``index.html``)."""
    return _file_response(resolve_ui_file("index.html"))


@routes.get("/ui/{name:.+}")
@doc(tags=("ui",), content={t: _TEXT_BODY if t in _TEXT else {"schema": {"type": "string",
                                                                      "contentEncoding": "binary"}}
                            for t in sorted(set(CONTENT_TYPES.values()) - {"application/json"})},
     responses={404: "no such UI file"})
async def ui_file(request: web.Request) -> web.Response:
    """A static file of the web UI (scripts, styles), with its content type."""
    return _file_response(resolve_ui_file(request.match_info["name"]))
