"""The api's window of failed sign-in attempts: per client, sliding, bounded in memory."""

from __future__ import annotations

from services.api.routes.signin import FailureWindow


def test_a_client_waits_until_its_oldest_failure_leaves_the_window() -> None:
    now = [0.0]
    w = FailureWindow(3, 10.0, clock=lambda: now[0])
    for t in (0.0, 2.0, 4.0):
        now[0] = t
        assert w.retry_after("a") == 0.0
        w.failed("a")
    now[0] = 5.0
    assert w.retry_after("a") == 5.0 and w.retry_after("b") == 0.0  # another client may
    now[0] = 10.0  # the failure at 0 left the window
    assert w.retry_after("a") == 0.0
    w.failed("a")
    assert w.retry_after("a") == 2.0  # 2, 4 and 10 in the window: until 2 leaves it


def test_memory_is_bounded_per_client_and_in_clients() -> None:
    now = [0.0]
    w = FailureWindow(2, 60.0, max_clients=3, clock=lambda: now[0])
    for _ in range(100):
        w.failed("a")
    assert len(w._failures["a"]) == 2
    for client in ("b", "c", "d"):  # the least recently failing client is forgotten first
        w.failed(client)
    assert w.retry_after("a") == 0.0 and set(w._failures) == {"b", "c", "d"}
