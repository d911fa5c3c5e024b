"""``cascade profile ... -- COMMAND`` and ```cascade profile hf ...`` and
``cascade profile vllm ...``: trace a workload next to the GPU and stream it to the app while
it runs.

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

``cascade profile vllm --url http://HOST:PORT [--launch "vllm serve MODEL ..."] --concurrency N
--prompt ISL --output OSL --requests R --out DIR`` traces a vLLM server as it serves
(:mod:`programs.profiler.vllm`).
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
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...] | hf ... | vllm ...",
                   help="the workload to trace, or `hf` / `vllm` and the recipe's options")
    p.set_defaults(func=main)


def hf_parser() -> argparse.ArgumentParser:
    """Options of ``cascade profile hf`` (the recipe's and the common ones)."""
    from programs.profiler.hf import add_recipe_arguments

    p = argparse.ArgumentParser(prog="cascade profile hf",
                                description="Profile the Hugging Face generate recipe.")
    add_recipe_arguments(p)
    _common(p, defaults=False)
    return p


def vllm_parser() -> argparse.ArgumentParser:
    """Options of ``cascade profile vllm``."""
    p = argparse.ArgumentParser(
        prog="cascade profile vllm",
        description="Trace a vLLM server as it serves: attach to --url (started with "
                    "VLLM_TORCH_PROFILER_DIR=--profile-dir) or start it with --launch, drive a "
                    "closed-loop load, profile a window with /start_profile and /stop_profile, "
                    "import every rank's trace as one workload with the measured TTFT / TPOT as "
                    "its baseline.")
    p.add_argument("--url", required=True, help="the server, http://HOST:PORT")
    p.add_argument("--launch", default="", metavar="COMMAND",
                   help='start the server: "vllm serve MODEL --port PORT --tensor-parallel-size N '
                        '..." (VLLM_TORCH_PROFILER_DIR is set for it)')
    p.add_argument("--model", default="", help="model name in requests (default: /v1/models' first)")
    p.add_argument("--concurrency", type=int, default=1, help="clients, closed loop (default 1)")
    p.add_argument("--prompt", type=int, default=128, metavar="ISL", help="prompt tokens (default 128)")
    p.add_argument("--output", type=int, default=128, metavar="OSL", help="output tokens (default 128)")
    p.add_argument("--requests", type=int, default=8, help="timed requests (default 8)")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests first (default 1)")
    p.add_argument("--profile-requests", type=int, default=0, metavar="N",
                   help="requests in the profiled window (default: one per client)")
    p.add_argument("--ranks", type=int, default=0,
                   help="rank trace files to wait for (default: --tensor-parallel-size of --launch, "
                        "else 1)")
    p.add_argument("--profile-dir", type=Path, default=None, metavar="DIR",
                   help="VLLM_TORCH_PROFILER_DIR (attach: the one the server was started with; "
                        "launch: default OUT/vllm-profile)")
    p.add_argument("--out", type=Path, default=None, help="the trace folder (default: a temporary one)")
    p.add_argument("--app", default=None, help="api URL to upload to (default: keep in --out)")
    p.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV})")
    p.add_argument("--name", default="", help="trace name (default: the folder name)")
    p.add_argument("--source-gpu", default="", help="GPU served on (default: the traces' device)")
    p.add_argument("--workload", default="", help="free-form workload description")
    p.add_argument("--startup-timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="wait this long for /health after --launch (default 1800)")
    p.add_argument("--flush-timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="wait this long for the rank trace files after /stop_profile (default 1800)")
    p.add_argument("--settle", type=float, default=2.0, metavar="SECONDS",
                   help="a rank file is complete when unchanged this long (default 2)")
    p.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                   help="after the upload, wait this long for the trace to be ready")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def vllm_main(argv: list[str]) -> int:
    """``cascade profile vllm ...``."""
    from programs.profiler.vllm import VllmOptions, profile_vllm

    a = vllm_parser().parse_args(argv)
    token = a.token
    if a.app:
        from programs.cli.importer import resolve_token

        token = resolve_token(a.token, a.app)[0]
    opts = VllmOptions(
        url=a.url, launch=a.launch, model=a.model, concurrency=a.concurrency, prompt=a.prompt,
        output=a.output, requests=a.requests, warmup=a.warmup, profile_requests=a.profile_requests,
        ranks=a.ranks, out=a.out, profile_dir=a.profile_dir, app=a.app, token=token, name=a.name,
        source_gpu=a.source_gpu, workload=a.workload, startup_timeout=a.startup_timeout,
        flush_timeout=a.flush_timeout, settle_s=a.settle, wait=a.wait, quiet=a.quiet, seed=a.seed)
    async def upload(folder: Path, source_gpu: str, workload: str) -> dict[str, Any]:
        from programs.cli.importer import run_import

        return await run_import(argparse.Namespace(
            path=folder, app=a.app, token=token, name=a.name or folder.name,
            source_gpu=source_gpu or None, force_source_gpu=bool(a.source_gpu), kind="timeline",
            workload=workload, state_file=None, no_seal=False, wait=a.wait, quiet=True, run=None))

    result = asyncio.run(profile_vllm(opts, upload=upload))
    s = result.baseline.summary() if result.baseline is not None else {}
    print(f"cascade profile vllm: {len(result.rank_files)} rank traces, {result.kernels} kernels "
          f"(rank r = streams r*{result.stride}+s); TTFT mean {s.get('ttft_ms', 0):.2f} ms "
          f"(p50 {s.get('ttft_ms_p50', 0):.2f}), TPOT mean {s.get('tpot_ms', 0):.2f} ms "
          f"(p50 {s.get('tpot_ms_p50', 0):.2f})", file=sys.stderr)
    for w in result.warnings[:5]:
        print(f"cascade profile vllm: warning: {w}", file=sys.stderr)
    if result.upload is not None:
        print(f"cascade profile vllm: trace {result.upload['trace_id']} {result.upload['state']}",
              file=sys.stderr)
        return 0 if result.upload.get("state") != "failed" else 1
    hint = f" --app {a.app}" if a.app else " --app URL"
    print(f"cascade profile vllm: the trace is kept in {result.folder}; upload it with: "
          f"cascade import {result.folder}{hint}", file=sys.stderr)
    return 0


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

    command = list(args.command or [])
    if command[:1] == ["vllm"]:
        return vllm_main(command[1:])
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
