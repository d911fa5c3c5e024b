"""The `cascade` command table: one owner of command names, and each command still gets its full
parser (the light start-up, in a fresh interpreter: tests/integration/test_cli.py)."""

from __future__ import annotations

import pytest

from programs.cli import COMMANDS, build_parser


def test_the_table_and_the_modules_agree() -> None:
    full = build_parser("*")
    action = next(a for a in full._actions if a.dest == "command")
    registered = {c.dest: c.help for c in action._choices_actions}
    assert set(registered) == set(COMMANDS), "a module registers a command the table lacks"
    for name, (_module, text) in COMMANDS.items():
        assert registered[name] == text, f"help of {name!r} differs between table and module"


def test_a_command_still_gets_its_full_parser(capsys: pytest.CaptureFixture[str]) -> None:
    from programs.cli import main

    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "--batch-rows" in capsys.readouterr().out
    assert main([]) == 2
