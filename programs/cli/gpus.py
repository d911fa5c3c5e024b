"""`cascade gpus [--json] [--specs DIR]`: list known GPU specs and the Accel-Sim config that
serves each (CASCADE_ACCELSIM_CONFIGS, paired by :mod:`cascade.gpus.accelsim_names`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from cascade.platform.accelsim import AccelSimSetup


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("gpus", help="list the GPU specs Cascade knows")
    p.add_argument("--json", action="store_true", help="print the full specs as JSON")
    p.add_argument("--specs", metavar="DIR", help="also load user spec files (*.toml, *.json) from DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the registry as a table or JSON."""
    from cascade.gpus import GPURegistry, builtin_specs

    reg = GPURegistry(builtin_specs())
    if args.specs:
        reg.load_dir(args.specs)
    specs = list(reg)
    from cascade.platform.accelsim import discover_from
    from cascade.platform.settings import load_settings

    settings = load_settings()

    def resolve(name: str) -> str | None:
        spec = reg.resolve(name)
        return spec.id if spec is not None else None

    setup = discover_from(settings, resolve=resolve, specs=specs)
    base = ["auto", "scaled", "analytical", "roofline"]

    def models(spec_id: str) -> list[str]:
        return [*base, "accel-sim"] if setup.can_run(spec_id) else base

    if args.json:
        out = [msgspec.to_builtins(s) | {"spec_hash": s.spec_hash(), "models": models(s.id),
                                         "accelsim": setup.can_run(s.id),
                                         "accelsim_config": msgspec.to_builtins(setup.serving(s.id))}
               for s in specs]
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(out), indent=2).decode() + "\n")
        if setup.problems or setup.unrunnable:
            sys.stderr.write(footer(setup) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    def served(spec_id: str) -> str:
        got = setup.serving(spec_id)
        if got.config is None:
            return "none"
        return f"{got.config} ({got.relation})"

    table = Table(title="GPU specs")
    for col in ("id", "name", "sm", "SMs", "MHz", "mem GB", "GB/s", "L2 MB", "FP32 TF", "FP16 TC TF",
                "accel-sim", "aliases"):
        table.add_column(col)
    for s in specs:
        table.add_row(s.id, s.name, str(s.sm_version), str(s.sms), f"{s.boost_clock_mhz:g}",
                      f"{s.memory_gb:g}", f"{s.memory_bandwidth_gbps:g}", f"{s.l2_mb:g}",
                      f"{s.fp32_tflops:g}", f"{s.tensor_tflops.get('fp16', 0):g}",
                      served(s.id), ", ".join(s.aliases[:2]))
    Console(width=200).print(table)
    print(footer(setup))
    return 0


def footer(setup: AccelSimSetup) -> str:
    """What can run accel-sim, what keeps it from running, and each config folder that serves
    no GPU here with why (once each)."""
    runnable = setup.runnable()
    lines = [f"accel-sim model: {'configs ' + ', '.join(runnable) if runnable else 'not available'}"]
    lines += [f"  {p}" for p in setup.problems]
    if setup.binary_ok and setup.library_path:
        lines.append(f"  library path: {setup.library_path} (from {setup.library_source})")
    if setup.unrunnable:
        lines.append("  config folders that serve no GPU here:")
        lines += [f"    {name}: {why}" for name, why in setup.unrunnable.items()]
    return "\n".join(lines)
