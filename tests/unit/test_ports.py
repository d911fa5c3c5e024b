"""Port picking for topologies whose servers start seconds apart."""

from __future__ import annotations

import socket

from programs.embedded.ports import ephemeral_ports, free_ports, pick_range, port_is_free


def test_one_draw_gives_distinct_free_ports_outside_what_it_must_avoid() -> None:
    avoid = set(range(10_000, 30_000))
    ports = free_ports(12, avoid=avoid)
    assert len(set(ports)) == 12
    assert not set(ports) & avoid
    assert all(port_is_free(p) for p in ports)
    eph = ephemeral_ports()
    if eph is not None and eph[0] - 10_000 >= 2_000:
        assert all(p < eph[0] for p in ports), "a port the kernel may hand an outgoing connection"


def test_a_port_someone_listens_on_is_never_drawn() -> None:
    low, high = pick_range(0)
    held: list[socket.socket] = []
    try:
        for port in range(low, min(high, low + 400)):  # a crowded corner of the range
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sock.listen()
            held.append(sock)
        taken = {s.getsockname()[1] for s in held}
        for _ in range(20):
            assert not set(free_ports(8)) & taken
    finally:
        for sock in held:
            sock.close()
