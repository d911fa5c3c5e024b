"""The `cascade` command line.

:data:`COMMANDS` names every sub-command, the module of this package that registers it
(``register(subparsers)``, each sub-parser setting ``func``: ``args -> int``) and its
one-line help. A command line imports only the module of the command it runs, so
``cascade --help`` and ``cascade predict --help`` start without numpy, the bus or the S3
client; the test suite checks that the table and the modules agree.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from cascade import __version__
from cascade.errors import CascadeError, ConfigError

#: sub-command -> (module in this package, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("bench", "run a benchmark and print its figures"),
    "bootstrap": ("up", "create the bucket, streams and KV buckets on the configured NATS and S3"),
    "calibrate": ("calibrate", "fit model parameters on measured cross-GPU data"),
    "gpus": ("gpus", "list the GPU specs Cascade knows"),
    "import": ("importer", "upload an existing trace folder or timeline file to a running app"),
    "predict": ("predict", "predict a traced kernel table on other GPUs"),
    "runs": ("lists", "list the app's runs, newest first (paged; --state, --name, --all)"),
    "profile": ("profile", "trace a workload (baseline, timeline, NVBit instructions) and stream it to the app"),
    "scenario": ("scenario", "simulate request traffic (TTFT, TPOT, ITL, throughput) on replicas"),
    "status": ("up", "show which parts of the embedded stack are up"),
    "trace": ("trace", "work with local trace files"),
    "traces": ("lists", "list the app's traces, newest first (paged; --state, --name, --all)"),
    "up": ("up", "run NATS, S3 and the five services on this machine (Ctrl-C stops them)"),
    "validate": ("validate", "predict each GPU's measured times from another GPU's"),
}


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The argument parser: every command registered by its module (``"*"``), only
    ``command``'s module (the others listed by name and help), or none (``None``)."""
    parser = argparse.ArgumentParser(
        prog="cascade",
        description="Cascade: simulate a traced GPU workload on GPUs you do not have.",
    )
    parser.add_argument("--version", action="version", version=f"cascade {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = {m for m, _ in COMMANDS.values()} if command == "*" else (
        {COMMANDS[command][0]} if command in COMMANDS else set())
    for module in sorted(wanted):
        importlib.import_module(f"{__name__}.{module}").register(subparsers)
    registered = set(subparsers.choices)
    for name, (_module, text) in sorted(COMMANDS.items()):
        if name not in registered:
            subparsers.add_parser(name, help=text)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command an argument list names (its first word that is not an option)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cascade`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(args_list))
    args = parser.parse_args(args_list)
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
