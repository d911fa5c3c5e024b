"""`cascade bench NAME`: benchmark commands that print figures (not timed tests)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import programs.bench as bench_pkg


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("bench", help="run a benchmark and print its figures")
    sub = parser.add_subparsers(dest="bench", metavar="NAME")
    for info in sorted(pkgutil.iter_modules(bench_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"programs.bench.{info.name}")
        p = sub.add_parser(module.NAME, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    parser.set_defaults(func=lambda _a: parser.print_help() or 2)
