"""Shared pytest configuration: loads the real-server session fixtures (NATS, S3, the api with a
finished sim) from ``tests/support``. The tests live in tiers, ``tests/unit``,
``tests/integration`` and ``tests/e2e``; each folder's conftest marks its tests."""

from __future__ import annotations

import importlib.util

pytest_plugins = [
    name
    for name in ("tests.support.fixtures_nats", "tests.support.fixtures_s3", "tests.support.fixtures_api")
    if importlib.util.find_spec(name) is not None
]


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """Say loudly when the browser tests did not run (no playwright or no /usr/bin/chromium)."""
    import os

    ran = [r for r in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
           if "test_ui_browser" in str(getattr(r, "nodeid", ""))]
    if ran:
        screens = os.environ.get("CASCADE_UI_SCREENSHOTS") or str(config.rootpath / "test-artifacts" / "ui-screens")
        terminalreporter.write_line(f"web UI screenshots: {screens}")
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "test_ui_browser" in str(getattr(r, "nodeid", "")) or "test_ui_browser" in str(r.location[0])]
    if not skipped:
        return
    reason = skipped[0].longrepr[2] if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
    terminalreporter.write_sep("!", "BROWSER TESTS SKIPPED", red=True, bold=True)
    terminalreporter.write_line(f"the web UI was not tested in chromium: {reason}", red=True, bold=True)
