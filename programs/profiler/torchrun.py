"""``python -m programs.profiler.torchrun [--out FILE | --no-profile] -- SCRIPT [ARGS...]``:
run a Python script (or ``-m MODULE``) under the PyTorch profiler (the timeline pass of a
Python COMMAND), or unprofiled (``--no-profile``: the baseline pass). Either way
:mod:`programs.profiler.autostep` marks the steps of Hugging Face ``generate`` and vLLM
``LLM.generate`` loops, and :func:`programs.profiler.step` calls in the script become step
markers."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from programs.profiler import autostep


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m programs.profiler.torchrun")
    parser.add_argument("--out", type=Path, help="Chrome trace to write")
    parser.add_argument("--no-profile", action="store_true",
                        help="run unprofiled (only the automatic step markers)")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS] or -m MODULE [ARGS]")
    args = parser.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        parser.error("give SCRIPT [ARGS] or -m MODULE [ARGS]")
    if args.out is None and not args.no_profile:
        parser.error("give --out FILE (the Chrome trace) or --no-profile")
    autostep.install()
    if args.no_profile:
        return _run(target)
    from programs.profiler.torchtimeline import profiled  # imports torch

    with profiled(args.out):
        return _run(target)


def _run(target: list[str]) -> int:
    try:
        if target[0] == "-c":
            sys.argv = ["-c", *target[2:]]
            exec(compile(target[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
        elif target[0] == "-m":
            sys.argv = target[1:]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = target
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
