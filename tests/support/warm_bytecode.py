"""Compile the bytecode the suite imports once, before it runs (``make test`` calls it).

On a fresh clone nothing is compiled yet (the venv is installed without bytecode, and the
project's lives under ``PYTHONPYCACHEPREFIX``): the test workers and the hundreds of processes
they start would each compile the same modules at the same moment, the first minute of the run
spent compiling one module set several times over. Importing them here first, in two processes
(the PyTorch / Transformers half and the rest), compiles each once; on a warm checkout it costs
the imports alone (about two seconds).

``python -m tests.support.warm_bytecode heavy|light``; a module that fails to import (an optional
dependency that is not installed) is skipped.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "transformers.models.opt.modeling_opt", "transformers.generation.utils")
LIGHT = ("numpy", "scipy.spatial", "pyarrow.parquet", "aiohttp", "aiohttp.web", "aiobotocore.session", "botocore.client",
         "nats", "structlog", "rich.traceback", "msgspec", "hypothesis", "schemathesis", "schemathesis.cli",
         "playwright.async_api", "openai", "pytest", "xdist")


def _ours() -> list[str]:
    """Every module of the project's packages (shared/cascade, services, programs)."""
    names: list[str] = []
    for package, path in (("cascade", ROOT / "shared" / "cascade"), ("services", ROOT / "services"),
                          ("programs", ROOT / "programs")):
        names.append(package)
        names += [m.name for m in pkgutil.walk_packages([str(path)], prefix=f"{package}.")
                  if not m.name.endswith("__main__")]
    return names


def main(argv: list[str]) -> int:
    which = argv[1] if len(argv) > 1 else "light"
    for name in HEAVY if which == "heavy" else (*LIGHT, *_ours()):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional or side-effecting modules: compile what imports
            continue
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
