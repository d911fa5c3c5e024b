"""TCP port helpers: pick free ports, check that a port is free, wait for one to answer."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from pathlib import Path

from cascade.errors import ConfigError

#: SeaweedFS puts each component's gRPC port at its HTTP port plus this offset.
GRPC_OFFSET = 10_000


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` and we could bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


#: Lowest port :func:`free_port_pairs` picks (below: well-known and much-configured ports).
PICK_LOW = 10_000


def ephemeral_ports() -> tuple[int, int] | None:
    """The kernel's range of ports for outgoing connections (Linux), if known."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def pick_range(offset: int = GRPC_OFFSET) -> tuple[int, int]:
    """Where :func:`free_port_pairs` picks ``p``: below the kernel's ephemeral ports with
    ``p + offset`` too, where there is room (Linux's default: 10000-22767), so that no
    outgoing connection takes a picked port between the pick and the server's bind (with
    many connections made, one did); else anywhere from 20000."""
    eph = ephemeral_ports()
    if eph is not None and eph[0] - 1 - offset - PICK_LOW >= 2_000:
        return PICK_LOW, eph[0] - 1 - offset
    return 20_000, 65_535 - offset


def free_port_pairs(count: int, *, offset: int = GRPC_OFFSET, avoid: set[int] | None = None,
                    host: str = "127.0.0.1") -> list[int]:
    """``count`` ports ``p`` such that ``p`` and ``p + offset`` are both free and all distinct
    (picked at random in :func:`pick_range`)."""
    taken = set(avoid or ())
    chosen: list[int] = []
    rng = random.SystemRandom()
    low, high = pick_range(offset)
    for _ in range(count * 200):
        if len(chosen) == count:
            break
        p = rng.randint(low, high)
        if {p, p + offset} & taken:
            continue
        if port_is_free(p, host) and port_is_free(p + offset, host):
            chosen.append(p)
            taken.update((p, p + offset))
    if len(chosen) < count:
        raise ConfigError("ports", None, f"{count} free port pairs (port and port+{offset})")
    return chosen


def free_ports(count: int, *, avoid: set[int] | None = None, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports, below the kernel's ephemeral range where there is room:
    for a topology whose servers start seconds apart, so that no two are handed the same port
    (two :func:`free_port` calls can be) and no outgoing connection takes one meanwhile."""
    return free_port_pairs(count, offset=0, avoid=avoid, host=host)


def can_connect(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


async def wait_port(host: str, port: int, deadline: float) -> bool:
    """Poll until ``host:port`` accepts connections or ``deadline`` (monotonic) passes."""
    delay = 0.02
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 0.5)
        except (OSError, TimeoutError):
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.2)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False
