"""``python -m cascade.profiler.torchrun --out FILE -- SCRIPT [ARGS...]``: run a Python
script (or ``-m MODULE``) under the PyTorch profiler (the timeline pass of a Python
COMMAND). :func:`cascade.profiler.step` calls in the script become step markers."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from cascade.profiler.torchtimeline import profiled


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m cascade.profiler.torchrun")
    parser.add_argument("--out", type=Path, required=True, help="Chrome trace to write")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS] or -m MODULE [ARGS]")
    args = parser.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        parser.error("give SCRIPT [ARGS] or -m MODULE [ARGS]")
    code = 0
    with profiled(args.out):
        try:
            if target[0] == "-m":
                sys.argv = target[1:]
                runpy.run_module(target[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = target
                runpy.run_path(target[0], run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code


if __name__ == "__main__":
    sys.exit(main())
