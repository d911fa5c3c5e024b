"""`cascade bench platform`'s own pieces: the idle CPU reading and the stack's settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from programs.bench.platform import _setting, cpu_ticks


def test_busy_child_uses_ticks_an_idle_one_does_not() -> None:
    # the reading that says how much of a core an idle stack's processes burn
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 5: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(5)"])
    try:
        time.sleep(0.3)
        a = cpu_ticks(os.getpid())
        assert busy.pid in a and idle.pid in a and "python" in a[busy.pid][0]
        time.sleep(0.5)
        b = cpu_ticks(os.getpid())
        hz = os.sysconf("SC_CLK_TCK")
        assert (b[busy.pid][1] - a[busy.pid][1]) / hz > 0.2
        assert (b[idle.pid][1] - a[idle.pid][1]) / hz < 0.05
    finally:
        busy.kill()
        idle.kill()
        busy.wait(10)
        idle.wait(10)


def test_a_setting_is_name_equals_value() -> None:
    assert _setting("embedded_go_memory_mib=128") == ("embedded_go_memory_mib", "128")
    assert _setting("CASCADE_EMBEDDED_GO_GC=50") == ("embedded_go_gc", "50")
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        _setting("embedded_go_memory_mib")
