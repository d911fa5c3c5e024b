"""The web UI is served at / and /ui/{file} with the right content types and no traversal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from cascade.errors import NotFoundError
from services.api.routes import ui


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    from services.api.http import error_middleware

    app = web.Application(middlewares=[error_middleware])
    app.add_routes(ui.routes)
    c = TestClient(TestServer(app))
    await c.start_server()
    try:
        yield c
    finally:
        await c.close()


async def test_index_is_html(client: TestClient) -> None:
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    text = await resp.text()
    assert "<title>Cascade</title>" in text and "/ui/app.js" in text


@pytest.mark.parametrize(("name", "ctype"), [("app.js", "text/javascript"), ("style.css", "text/css"),
                                              ("index.html", "text/html")])
async def test_static_files_have_content_types(client: TestClient, name: str, ctype: str) -> None:
    resp = await client.get(f"/ui/{name}")
    assert resp.status == 200
    assert resp.content_type == ctype
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert await resp.read() == (ui.WEB_DIR / name).read_bytes()


@pytest.mark.parametrize("path", [
    "/ui/%2e%2e/samples.py", "/ui/..%2f..%2fpyproject.toml", "/ui/%2e%2e%2f%2e%2e%2fpyproject.toml",
    "/ui/nope.js", "/ui/%2fetc%2fpasswd",
])
async def test_no_traversal_or_missing_files(client: TestClient, path: str) -> None:
    resp = await client.get(URL(path, encoded=True))
    assert resp.status == 404
    body = await resp.json()
    assert body["error"] == "not_found"


def test_resolve_ui_file_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "a.js").write_text("x")
    (tmp_path / "secret.txt").write_text("s")
    (tmp_path / "web" / "link.txt").symlink_to(tmp_path / "secret.txt")
    assert ui.resolve_ui_file("a.js", tmp_path / "web").name == "a.js"
    for bad in ("../secret.txt", "/etc/passwd", "link.txt", "", ".", "sub/../../secret.txt", "a.js\x00", "x" * 5000, "d/" * 3000 + "a.js"):
        with pytest.raises(NotFoundError):
            ui.resolve_ui_file(bad, tmp_path / "web")
