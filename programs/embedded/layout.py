"""Where an embedded stack lives: its data directory and what ``cascade up`` keeps there.

Shared by the production supervisor (:mod:`.stack`), ``cascade status`` and the testbed
(:mod:`.testbed`): the layout of ``data_dir``, the credentials generated once, the state
file, and :func:`isolated_environment`, the environment of a stack of its own (a data
directory and free ports: the one way tests and benchmarks pick them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import msgspec

from cascade.errors import ConfigError
from programs.embedded.ports import GRPC_OFFSET, free_port_pairs
from programs.embedded.seaweed import generate_credentials

LOOPBACK = "127.0.0.1"


class Credentials(msgspec.Struct, frozen=True, kw_only=True):
    """Secrets generated on the first ``cascade up`` and reused afterwards."""

    #: Access key of the embedded S3 server.
    s3_access_key: str
    #: Secret key of the embedded S3 server.
    s3_secret_key: str
    #: Bearer token accepted by the api for writes.
    api_token: str
    #: When the credentials were generated (ISO 8601, UTC).
    created_at: str


class ComponentState(msgspec.Struct, kw_only=True):
    """One process of the stack as recorded in ``state.json``."""

    #: Component name: nats, s3 or a service name.
    name: str
    #: "server" (nats, s3) or "service".
    kind: str
    #: Pid while running.
    pid: int | None = None
    #: starting, running, backoff, stopping, stopped.
    state: str = "stopped"
    #: How many times the supervisor restarted it.
    restarts: int = 0
    #: Main TCP port, when it has one.
    port: int | None = None
    #: Its log file.
    log: str = ""


class StackState(msgspec.Struct, kw_only=True):
    """Contents of ``state.json``."""

    version: int = 1
    #: Pid of the ``cascade up`` process.
    supervisor_pid: int
    #: starting, up, stopping, stopped, failed.
    status: str
    #: Absolute data directory.
    data_dir: str
    #: Web UI / api base URL.
    http_url: str
    #: NATS URL the services use.
    nats_url: str
    #: S3 endpoint the services use.
    s3_endpoint: str
    #: S3 bucket.
    bucket: str
    #: Unix time of the start.
    started_at: float
    #: Unix time of the last change.
    updated_at: float
    #: Every component, in start order.
    components: list[ComponentState] = msgspec.field(default_factory=list)


class StackLayout:
    """Paths inside the embedded stack's data directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.credentials = self.root / "credentials.json"
        self.state = self.root / "state.json"
        self.nats_conf = self.root / "nats.conf"
        self.nats_store = self.root / "nats"
        self.s3_data = self.root / "s3"
        self.s3_config = self.root / "s3-identities.json"
        self.s3_ports = self.root / "s3-ports.json"
        self.logs = self.root / "logs"

    def log(self, component: str) -> Path:
        """Log file of ``component``."""
        return self.logs / f"{component}.log"

    def create(self) -> None:
        """Create the directories (idempotent); the root is private to the user."""
        self.root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            self.root.chmod(0o700)
        for sub in (self.nats_store, self.s3_data, self.logs):
            sub.mkdir(exist_ok=True)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` at once (readers see the old or the new contents)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_credentials(layout: StackLayout) -> Credentials | None:
    """The stored credentials, or None before the first start."""
    try:
        raw = layout.credentials.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(raw, type=Credentials)
    except msgspec.DecodeError as exc:
        raise ConfigError(
            str(layout.credentials), "<file>", f"a credentials file written by `cascade up` ({exc})"
        ) from None


def ensure_credentials(layout: StackLayout) -> tuple[Credentials, bool]:
    """Stored credentials, generating and saving (0600) them on first use; True if new."""
    existing = read_credentials(layout)
    if existing is not None:
        return existing, False
    access, secret = generate_credentials()
    creds = Credentials(
        s3_access_key=access,
        s3_secret_key=secret,
        api_token="cas_" + secrets.token_urlsafe(24),
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    _write_private(layout.credentials, msgspec.json.format(msgspec.json.encode(creds)))
    return creds, True


def load_state(layout: StackLayout) -> StackState | None:
    """The last state written by ``cascade up`` (None when it never ran here)."""
    try:
        raw = layout.state.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(raw, type=StackState)
    except msgspec.DecodeError:
        return None


class StackPorts(NamedTuple):
    """The main ports of a stack of its own: NATS, S3 and the api."""

    nats: int
    s3: int
    http: int


def stack_ports() -> StackPorts:
    """Free ports for NATS, S3 and the api, each with its port + 10000 free too (SeaweedFS
    puts its gRPC ports there), below the kernel's ephemeral range where there is room."""
    nats, s3, http = free_port_pairs(3, offset=GRPC_OFFSET)
    return StackPorts(nats=nats, s3=s3, http=http)


def isolated_environment(data_dir: Path, base: Mapping[str, str] | None = None,
                         **settings: str) -> dict[str, str]:
    """Environment of a `cascade up` of its own: ``data_dir``, free ports for NATS, S3 and
    HTTP, JSON logs, no ``CASCADE_*`` inherited; ``settings`` add ``CASCADE_<NAME>=value``."""
    ports = stack_ports()
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("CASCADE_")}
    env.update(
        CASCADE_DATA_DIR=str(data_dir),
        CASCADE_NATS_URL=f"nats://{LOOPBACK}:{ports.nats}",
        CASCADE_S3_ENDPOINT=f"http://{LOOPBACK}:{ports.s3}",
        CASCADE_HTTP_PORT=str(ports.http),
        CASCADE_LOG_FORMAT="json",
    )
    env.update({f"CASCADE_{k.upper()}": v for k, v in settings.items()})
    return env
