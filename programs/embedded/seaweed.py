"""SeaweedFS (``weed mini``) as the embedded S3 server.

``weed mini`` runs master, volume server, filer and S3 gateway in one
process. Each component listens on an HTTP port and a gRPC port at HTTP +
10000 (the admin worker always dials admin + 10000, so the offset is kept for
every component). Credentials come from an S3 identities file, which turns
signature checks on: unsigned or mis-signed requests get 403.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import msgspec

from cascade.errors import ConfigError
from programs.embedded.ports import GRPC_OFFSET, free_port_pairs, port_is_free

#: Identity name used in the generated S3 config.
IDENTITY = "cascade"


class SeaweedPorts(msgspec.Struct, frozen=True, kw_only=True):
    """HTTP ports of the ``weed mini`` components (gRPC ports are each + 10000)."""

    s3: int
    master: int
    volume: int
    filer: int
    admin: int

    def all_ports(self) -> list[int]:
        """Every TCP port the server listens on."""
        http = [self.s3, self.master, self.volume, self.filer, self.admin]
        return http + [p + GRPC_OFFSET for p in http]

    def busy(self, host: str = "127.0.0.1") -> list[int]:
        """Ports that something else already holds."""
        return [p for p in self.all_ports() if not port_is_free(p, host)]


def pick_ports(s3_port: int | None = None, host: str = "127.0.0.1") -> SeaweedPorts:
    """Free ports for every component; ``s3_port`` fixed when given (0/None: random)."""
    avoid = {s3_port, s3_port + GRPC_OFFSET} if s3_port else set()
    n = 4 if s3_port else 5
    pairs = free_port_pairs(n, avoid=avoid, host=host)
    if s3_port:
        pairs.insert(0, s3_port)
    return SeaweedPorts(s3=pairs[0], master=pairs[1], volume=pairs[2], filer=pairs[3],
                        admin=pairs[4])


#: What ``weed mini`` logs when a port it was given is taken by the time it binds it
#: ("port N is not available" from its own check, or the listen call's error).
PORT_TAKEN_MESSAGES = ("not available", "address already in use")


def port_was_taken(log_tail: str) -> bool:
    """True when the end of a ``weed mini`` log says it exited over a port already taken."""
    return any(m in log_tail for m in PORT_TAKEN_MESSAGES)


def generate_credentials() -> tuple[str, str]:
    """A fresh (access key, secret key) pair."""
    access = "CASCADE" + secrets.token_hex(8).upper()
    return access, secrets.token_urlsafe(30)


def write_s3_config(path: Path, access_key: str, secret_key: str) -> Path:
    """Write the S3 identities file (mode 0600) giving ``access_key`` full access."""
    if not access_key or not secret_key:
        raise ConfigError("s3_access_key", access_key, "a non-empty access key and secret key")
    config = {
        "identities": [
            {
                "name": IDENTITY,
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(config, fh, indent=2)
    os.replace(tmp, path)
    return path


def weed_mini_argv(
    binary: Path,
    data_dir: Path,
    ports: SeaweedPorts,
    s3_config: Path,
    *,
    host: str = "127.0.0.1",
    volume_size_limit_mb: int = 256,
) -> list[str]:
    """Command line for ``weed mini`` with data in ``data_dir`` and every port pinned.

    WebDAV, Iceberg and Lance endpoints and telemetry are off; everything
    binds to ``host`` only.
    """
    g = GRPC_OFFSET
    return [
        str(binary),
        "mini",
        f"-dir={data_dir}",
        f"-ip={host}",
        f"-ip.bind={host}",
        f"-master.port={ports.master}",
        f"-master.port.grpc={ports.master + g}",
        f"-volume.port={ports.volume}",
        f"-volume.port.grpc={ports.volume + g}",
        f"-filer.port={ports.filer}",
        f"-filer.port.grpc={ports.filer + g}",
        f"-s3.port={ports.s3}",
        f"-s3.port.grpc={ports.s3 + g}",
        f"-admin.port={ports.admin}",
        f"-admin.port.grpc={ports.admin + g}",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-master.telemetry=false",
        f"-master.volumeSizeLimitMB={volume_size_limit_mb}",
        "-s3.readerCacheSizeMB=32",
        "-s3.cacheCapacityMB=0",
        f"-s3.config={s3_config}",
    ]
