"""The `cascade` command table: one owner of command names, light start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from programs.cli import COMMANDS, build_parser


def test_the_table_and_the_modules_agree() -> None:
    full = build_parser("*")
    action = next(a for a in full._actions if a.dest == "command")
    registered = {c.dest: c.help for c in action._choices_actions}
    assert set(registered) == set(COMMANDS), "a module registers a command the table lacks"
    for name, (_module, text) in COMMANDS.items():
        assert registered[name] == text, f"help of {name!r} differs between table and module"


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


def test_a_command_still_gets_its_full_parser(capsys: pytest.CaptureFixture[str]) -> None:
    from programs.cli import main

    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "--batch-rows" in capsys.readouterr().out
    assert main([]) == 2
