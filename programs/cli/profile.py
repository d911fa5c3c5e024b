"""``cascade profile ... -- COMMAND`` and ``cascade profile hf ...``: trace a workload next
to the GPU and stream it to the app while it runs.

Passes: a baseline (unprofiled, ``--baseline-warmup`` + ``--baseline-repeats`` runs), the
timeline (PyTorch profiler for Python commands, Nsight Systems ``nsys`` otherwise) and the
instruction traces (``CASCADE_NVBIT_TRACER`` = the Accel-Sim NVBit ``tracer_tool.so``),
chosen by ``--mode``. ``TRACES_FOLDER`` (= ``--traces-dir`` / ``--out``, a temporary folder
by default) is exported to COMMAND; each kernel file written there is uploaded as soon as
it is complete. Then kernelslist, stats.csv, the timeline and baseline.json; then the seal.

Uploads are parallel, retried and resumable: ``cascade profile --resume --out DIR --app URL``
or ``cascade import DIR --app URL`` finishes the same trace. Without a reachable app (or
without ``--app``) ``--out DIR`` keeps everything for a later ``cascade import``.

The exit status is COMMAND's (1 when COMMAND succeeded but files could not be uploaded,
130 after Ctrl-C, which stops COMMAND and seals what arrived: the trace ends incomplete).

``cascade profile hf --model facebook/opt-125m --random-init --source-gpu SM90_H100 --app URL``
runs the Hugging Face recipe (:mod:`programs.profiler.hf`): by default the OPT-125m sample
workload (32 new tokens from "Hello, my name is", 4 repeats, 1 warm-up, eager).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HELP = "trace a workload (baseline, timeline, NVBit instructions) and stream it to the app"
TOKEN_ENV = "CASCADE_API_TOKEN"
TRACER_ENV = "CASCADE_NVBIT_TRACER"


def _common(p: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    d = (lambda v: v) if defaults else (lambda _v: argparse.SUPPRESS)
    p.add_argument("--app", default=d(None), help="api URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--token", default=d(None), help=f"bearer token (default: ${TOKEN_ENV})")
    p.add_argument("--name", default=d(""), help="trace name (default: the folder name)")
    p.add_argument("--source-gpu", default=d(None),
                   help="GPU traced on: spec id or driver device name (default: nvidia-smi's)")
    p.add_argument("--workload", default=d(""), help="free-form workload description")
    p.add_argument("--mode", choices=("timeline", "instructions", "both"), default=d(None),
                   help=f"passes after the baseline (default: both when ${TRACER_ENV} is set, "
                        "else timeline)")
    p.add_argument("--traces-dir", type=Path, default=d(None),
                   help="TRACES_FOLDER for COMMAND (default: --out, else a temporary folder)")
    p.add_argument("--out", type=Path, default=d(None),
                   help="keep the whole trace here (used when the app cannot be reached)")
    p.add_argument("--baseline-repeats", type=int, default=d(3),
                   help="timed unprofiled runs of COMMAND (0: no baseline; default 3)")
    p.add_argument("--baseline-warmup", type=int, default=d(1), help="untimed runs first (default 1)")
    p.add_argument("--timeline-tool", choices=("auto", "torch", "nsys"), default=d("auto"),
                   help="auto: the PyTorch profiler for Python commands, nsys otherwise")
    p.add_argument("--kernel-range", default=d(None), metavar="START:END",
                   help="kernel ids the NVBit tracer traces (DYNAMIC_KERNEL_LIMIT_START/END)")
    p.add_argument("--compress", action="store_true", default=d(False),
                   help="the tracer xz-compresses kernel files (TOOL_COMPRESS=1)")
    p.add_argument("--tracer-env", action="append", default=d([]), metavar="KEY=VALUE",
                   help="more tracer settings (repeatable)")
    p.add_argument("--parallel", type=int, default=d(4), help="uploads in flight (default 4)")
    p.add_argument("--retry-for", type=float, default=d(300.0), metavar="SECONDS",
                   help="keep retrying a failed upload this long (default 300)")
    p.add_argument("--wait", type=float, default=d(600.0), metavar="SECONDS",
                   help="after the seal, wait this long for the trace to be ready (0: no wait)")
    p.add_argument("--resume", action="store_true", default=d(False),
                   help="do not run COMMAND: finish uploading the folder's trace and seal it")
    p.add_argument("--quiet", action="store_true", default=d(False), help="no progress bar")


def register(subparsers: Any) -> None:
    """Add the ``profile`` sub-command."""
    p = subparsers.add_parser("profile", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...] | hf ...",
                   help="the workload to trace, or `hf` and the recipe's options")
    p.set_defaults(func=main)


def hf_parser() -> argparse.ArgumentParser:
    """Options of ``cascade profile hf`` (the recipe's and the common ones)."""
    from programs.profiler.hf import add_recipe_arguments

    p = argparse.ArgumentParser(prog="cascade profile hf",
                                description="Profile the Hugging Face generate recipe.")
    add_recipe_arguments(p)
    _common(p, defaults=False)
    return p


def detect_gpu() -> str | None:
    """The first GPU's name from ``nvidia-smi`` (None without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _token(args: argparse.Namespace) -> str | None:
    """--token, $CASCADE_API_TOKEN, else the credentials of the `cascade up` stack at --app."""
    from programs.cli.importer import resolve_token

    if not args.app:
        return args.token or os.environ.get(TOKEN_ENV) or None
    return resolve_token(args.token, args.app)[0]


def options_from_args(args: argparse.Namespace) -> Any:
    """The :class:`ProfileOptions` a command line asks for."""
    from cascade.errors import ValidationError
    from programs.profiler.session import Mode, ProfileOptions

    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    recipe = False
    if command[:1] == ["hf"]:
        from programs.profiler.hfsource import resolve_model

        hf = hf_parser().parse_args(command[1:])
        resolve_model(hf.model, random_init=hf.random_init)  # one line now, not a traceback later
        for key, value in vars(hf).items():
            if key in ("model", "random_init", "tokenizer", "prompt", "max_new_tokens", "repeats",
                       "warmup", "device", "dtype"):
                continue
            setattr(args, key, value)
        command = [sys.executable, "-m", "programs.profiler.hf", "--model", hf.model,
                   "--prompt", hf.prompt, "--max-new-tokens", str(hf.max_new_tokens),
                   "--repeats", str(hf.repeats), "--warmup", str(hf.warmup), "--device", hf.device,
                   "--dtype", hf.dtype, *(["--random-init"] if hf.random_init else []),
                   *(["--tokenizer", hf.tokenizer] if hf.tokenizer else [])]
        recipe = True
        if not args.name:
            args.name = "hf-" + Path(hf.model).name.replace("config.json", Path(hf.model).parent.name)
    if not command and not args.resume:
        raise ValidationError("give COMMAND after --, e.g. cascade profile --app URL --source-gpu "
                              "SM90_H100 -- python serve.py (or `cascade profile hf --model ...`)",
                              field="COMMAND")
    tracer = os.environ.get(TRACER_ENV) or None
    mode: Mode = args.mode or ("both" if tracer else "timeline")
    return ProfileOptions(
        command=command, app=args.app, token=_token(args),
        name=args.name, source_gpu=args.source_gpu or detect_gpu() or "", workload=args.workload,
        mode=mode, traces_dir=args.traces_dir, out=args.out, baseline_repeats=args.baseline_repeats,
        baseline_warmup=args.baseline_warmup, recipe=recipe, timeline_tool=args.timeline_tool,
        tracer=tracer, kernel_range=args.kernel_range, compress=args.compress,
        tracer_env=list(args.tracer_env), parallel=args.parallel, retry_for=args.retry_for,
        wait=args.wait, resume=args.resume, quiet=args.quiet,
    )


def main(args: argparse.Namespace) -> int:
    """Entry point of ``cascade profile``."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TransferSpeedColumn,
    )

    from programs.profiler.session import profile

    opts = options_from_args(args)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=Console(stderr=True),
                  disable=opts.quiet or not sys.stderr.isatty(),
                  transient=False) as bar:
        result = asyncio.run(profile(opts, progress=bar))
    print(result.summary_line(), file=sys.stderr)
    if result.baseline is not None and result.baseline.e2e_ms:
        s = result.baseline.summary()
        print(f"cascade profile: baseline e2e {s['e2e_ms']:.2f} ms (mean of {int(s['repeats'])}, "
              f"p50 {s['e2e_ms_p50']:.2f} ms)", file=sys.stderr)
    for name, why in sorted(result.failed.items()):
        print(f"cascade profile: {name} NOT uploaded: {why}", file=sys.stderr)
    if result.failed or (result.trace_id is None and opts.app is None):
        hint = f"--app {opts.app}" if opts.app else "--app URL --source-gpu GPU"
        print(f"cascade profile: the trace is kept in {result.folder}; upload it with: "
              f"cascade import {result.folder} {hint}", file=sys.stderr)
    if result.exit_status == 0 and (result.failed or result.state in ("failed",)):
        return 1
    return result.exit_status
