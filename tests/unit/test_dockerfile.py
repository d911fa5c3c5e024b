"""The Dockerfile, read as a file: it builds from files the repository has, runs as a user, and
its build context leaves out local state (with docker-compose.yml through `docker compose
config`: tests/integration/test_compose.py)."""

from __future__ import annotations

from tests.support.dockerfile import dockerfile
from tests.support.paths import REPO


def test_dockerfile_builds_from_repo_files() -> None:
    instructions = dockerfile()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    for op, rest in instructions:
        if op == "COPY":
            *sources, _dest = rest.split()
            for src in sources:
                assert (REPO / src).exists(), f"Dockerfile copies missing {src}"
    assert ("USER", "cascade") in instructions
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".cascade" in ignored and ".git" in ignored
