"""Shared pytest configuration: loads the real-server session fixtures (NATS, S3, the api with a
finished sim) from ``tests/support``. The tests live in tiers, ``tests/unit``,
``tests/integration`` and ``tests/e2e``; each folder's conftest marks its tests."""

from __future__ import annotations

import importlib.util
import os

import pytest

# The suite runs more test processes than there are cores (make test: 3 on 2), and each starts
# more: a BLAS / OpenMP pool of one thread per core in each of them spins against the others
# (PyTorch's CPU generate in the hf recipe ran 14 times slower so). One thread each, for this
# process and every child it starts.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

pytest_plugins = [
    name
    for name in ("tests.support.fixtures_nats", "tests.support.fixtures_s3", "tests.support.fixtures_api")
    if importlib.util.find_spec(name) is not None
]


#: Files whose tests each start their own servers and share no module fixture: under
#: ``pytest -n N --dist loadgroup`` (``make test``) they spread over the workers; every other
#: file's tests stay together on one worker, so its module fixtures are made once.
SPREAD_FILES = frozenset({"tests/e2e/test_embedded.py", "tests/integration/test_validate.py",
                          "tests/integration/test_runs.py", "tests/unit/test_validate.py",
                          "tests/unit/test_physics.py", "tests/unit/test_traces_reference.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each test with its file for pytest-xdist, but for :data:`SPREAD_FILES`."""
    for item in items:
        rel = item.path.relative_to(config.rootpath).as_posix()
        if rel not in SPREAD_FILES:
            item.add_marker(pytest.mark.xdist_group(rel))


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
