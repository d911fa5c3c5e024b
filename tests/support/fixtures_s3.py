"""Session fixture: a real SeaweedFS S3 server (``weed mini``) on random ports.

Loaded by ``tests/conftest.py`` (``pytest_plugins``). Signature checks are
on (credentials come from a generated S3 identities file), data lives in a
temporary directory, and the process is stopped at the end of the session.

Fixtures:

- ``s3_server`` (session): an :class:`S3Server` with ``endpoint``,
  ``access_key``, ``secret_key``, ``region``, ``data_dir``, ``log_path``, ``pid``.
- ``storage`` (function): an open :class:`cascade.platform.storage.Storage` on a fresh,
  empty bucket of its own.

Helper: :func:`s3_settings` builds a real :class:`cascade.platform.settings.Settings`
pointing at the server.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.session import get_session

from cascade.platform.settings import Settings, load_settings
from cascade.platform.storage import Storage
from programs.embedded.binaries import weed_binary
from programs.embedded.ports import can_connect
from programs.embedded.procs import spawn, stop_popen, tail, wait_until
from programs.embedded.seaweed import (
    generate_credentials,
    pick_ports,
    port_was_taken,
    weed_mini_argv,
    write_s3_config,
)

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    """A running SeaweedFS S3 endpoint with signature checks on."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str
    data_dir: Path
    log_path: Path
    pid: int
    startup_s: float = field(default=0.0, compare=False)

    def settings(self, **overrides: Any) -> Settings:
        """Settings pointing at this server (see :func:`s3_settings`)."""
        return s3_settings(self, **overrides)


def s3_settings(server: S3Server, **overrides: Any) -> Settings:
    """Real Settings with the S3 fields pointing at ``server`` (environment ignored)."""
    values: dict[str, Any] = {
        "s3_endpoint": server.endpoint,
        "s3_access_key": server.access_key,
        "s3_secret_key": server.secret_key,
        "s3_region": server.region,
    }
    values.update(overrides)
    return load_settings({}, **values)


def _signed_request_works(endpoint: str, access: str, secret: str) -> bool:
    client = get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1},
                      s3={"addressing_style": "path"}),
    )
    try:
        client.list_buckets()
        return True
    except (BotoCoreError, ClientError):
        return False
    finally:
        client.close()


#: Starts on newly picked ports when one picked was taken before ``weed mini`` bound it.
PORT_ATTEMPTS = 3


class _PortTaken(RuntimeError):
    pass


def start_s3_server(base: Path, timeout: float = START_TIMEOUT_S) -> tuple[S3Server, subprocess.Popen[bytes]]:
    """Start ``weed mini`` with data under ``base``; return once signed S3 requests succeed.

    The ports are picked free and bound by ``weed mini`` a moment later; in between another
    process (the other test workers start servers too, and make connections from ephemeral
    ports) may take one: then weed exits saying so, and it starts again on other ports."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return _start_s3_server(base, timeout, attempt)
        except _PortTaken:
            continue
    raise AssertionError("unreachable")


def _start_s3_server(base: Path, timeout: float, attempt: int) -> tuple[S3Server, subprocess.Popen[bytes]]:
    t0 = time.monotonic()
    base.mkdir(parents=True, exist_ok=True)
    access, secret = generate_credentials()
    config = write_s3_config(base / "s3-identities.json", access, secret)
    suffix = "" if attempt == 1 else f"-{attempt}"  # a data folder and log of each attempt's own
    data = base / f"data{suffix}"
    data.mkdir(exist_ok=True)
    log_path = base / f"weed{suffix}.log"
    ports = pick_ports()
    proc = spawn(weed_mini_argv(weed_binary(), data, ports, config), log_path)
    endpoint = f"http://127.0.0.1:{ports.s3}"

    def ready() -> bool:
        if proc.poll() is not None:
            if attempt < PORT_ATTEMPTS and port_was_taken(tail(log_path, 40)):
                raise _PortTaken(tail(log_path, 40))
            raise RuntimeError(
                f"weed mini exited with code {proc.returncode}; log {log_path}:\n{tail(log_path)}"
            )
        return can_connect("127.0.0.1", ports.s3, 0.2) and _signed_request_works(endpoint, access, secret)

    try:
        if not wait_until(ready, timeout):
            raise RuntimeError(
                f"SeaweedFS S3 did not answer on {endpoint} within {timeout} s; log {log_path}:\n"
                f"{tail(log_path)}"
            )
    except BaseException:
        stop_popen(proc, 5)
        raise
    server = S3Server(
        endpoint=endpoint, access_key=access, secret_key=secret, region="us-east-1",
        data_dir=data, log_path=log_path, pid=proc.pid, startup_s=time.monotonic() - t0,
    )
    return server, proc


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS S3 server shared by the whole session."""
    server, proc = start_s3_server(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        stop_popen(proc, 10)


#: Buckets made ahead, per S3 endpoint: SeaweedFS takes about 0.2 s to store the first
#: object of a new bucket (a new collection gets its volumes) and does many at once in
#: about the time of one, so they are made in batches and handed out one per test.
_BUCKETS: dict[str, list[str]] = {}
BUCKET_BATCH = 16


async def fresh_bucket(server: S3Server) -> str:
    """A new, empty bucket (but for the readiness probe) that no other test has used."""
    import asyncio

    from cascade.platform import keys

    pool = _BUCKETS.setdefault(server.endpoint, [])
    if not pool:
        names = [f"test-{secrets.token_hex(6)}" for _ in range(BUCKET_BATCH)]
        async with Storage.from_settings(server.settings(bucket=names[0])) as st:
            async def make(name: str) -> None:
                await st.client.create_bucket(Bucket=name)
                await st.client.put_object(Bucket=name, Key=keys.READY_PROBE_KEY,
                                           Body=keys.READY_PROBE_BODY)

            await asyncio.gather(*(make(n) for n in names))
        pool.extend(names)
    return pool.pop()


@pytest.fixture
async def storage(s3_server: S3Server) -> AsyncIterator[Storage]:
    """An open Storage on a new bucket that no other test uses."""
    bucket = await fresh_bucket(s3_server)
    async with Storage.from_settings(s3_server.settings(bucket=bucket)) as st:
        await st.ensure_bucket()
        yield st
