"""`cascade profile` finds its token like `cascade import`: option, environment, then the data dir."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from programs.cli.profile import options_from_args, register
from programs.embedded.stack import StackLayout, ensure_credentials


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["profile", "--source-gpu", "SM90_H100", *extra, "--", "true"])


def test_the_token_comes_from_the_stacks_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    creds, _ = ensure_credentials(StackLayout(tmp_path / "data"))
    monkeypatch.setenv("CASCADE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("CASCADE_API_TOKEN", raising=False)
    assert options_from_args(_args("--app", "http://127.0.0.1:9")).token == creds.api_token
    monkeypatch.setenv("CASCADE_API_TOKEN", "from-env")
    assert options_from_args(_args("--app", "http://127.0.0.1:9")).token == "from-env"
    assert options_from_args(_args("--app", "http://127.0.0.1:9", "--token", "given")).token == "given"
    assert options_from_args(_args()).token == "from-env"  # offline (no --app): no data dir lookup
