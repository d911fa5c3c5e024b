"""The `cascade` command's light start-up: `--help` imports neither numpy nor the platform (the
command table itself: tests/unit/test_cli.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from programs.cli import COMMANDS


@pytest.mark.parametrize("argv", [["--help"], ["predict", "--help"], ["up", "--help"]])
def test_help_imports_neither_numpy_nor_the_platform(argv: list[str]) -> None:
    code = ("import sys\nfrom programs.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('numpy', 'pyarrow', 'nats', 'aiobotocore', 'aiohttp',"
            " 'cascade.platform.bus', 'cascade.platform.storage') if m in sys.modules)\n"
            "print('HEAVY', ','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         check=True).stdout
    assert "HEAVY \n" in out or out.rstrip().endswith("HEAVY"), out
    for name in COMMANDS if argv == ["--help"] else ():
        assert name in out
