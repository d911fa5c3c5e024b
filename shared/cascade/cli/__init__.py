"""The `cascade` command line.

Every module in this package that defines ``register(subparsers)`` adds its
own sub-command(s); each sub-parser sets ``func`` (``args -> int``). Modules
are discovered, so adding a command never means editing this file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from cascade import __version__
from cascade.errors import CascadeError, ConfigError


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every discovered sub-command."""
    parser = argparse.ArgumentParser(
        prog="cascade",
        description="Cascade: simulate a traced GPU workload on GPUs you do not have.",
    )
    parser.add_argument("--version", action="version", version=f"cascade {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cascade`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except ConfigError as exc:
        print(f"cascade: {exc}", file=sys.stderr)
        return 2
    except CascadeError as exc:
        print(f"cascade: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
