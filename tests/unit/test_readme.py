"""The README stays the user's manual: both commands and every setting are in it."""

from __future__ import annotations

from cascade.platform.settings import settings_doc
from tests.support.paths import REPO

README = (REPO / "README.md").read_text()


def test_readme_shows_the_two_commands() -> None:
    assert "make run" in README and "make test" in README


def test_readme_documents_every_setting() -> None:
    missing = [var for var, _default, _desc in settings_doc() if f"`{var}`" not in README]
    assert not missing, f"README.md does not document: {', '.join(missing)}"
