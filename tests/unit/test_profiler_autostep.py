"""`cascade profile`'s baseline pass runs a Python COMMAND through the wrapper that adds the
automatic step markers, and any other command as given (the markers themselves, in a real
COMMAND run: tests/integration/test_profiler_autostep.py)."""

from __future__ import annotations


def test_the_baseline_pass_runs_python_commands_through_the_wrapper() -> None:
    import argparse

    from programs.profiler.session import ProfileSession

    session = ProfileSession.__new__(ProfileSession)
    session.opts = argparse.Namespace(command=["python3", "-c", "print(1)"])  # type: ignore[assignment]
    assert session.baseline_argv()[:5] == ["python3", "-m", "programs.profiler.torchrun",
                                           "--no-profile", "--"]
    session.opts = argparse.Namespace(command=["./a.out", "x"])  # type: ignore[assignment]
    assert session.baseline_argv() == ["./a.out", "x"]
