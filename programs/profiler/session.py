"""``cascade profile``: the passes around COMMAND, streaming uploads, the seal.

1. **Baseline** (unprofiled): COMMAND ``warmup + repeats`` times (a recipe that times
   itself runs once and writes ``baseline.json``, in the same process as its timeline when
   that runs under the PyTorch profiler: ``baseline+timeline``); end-to-end wall time per run
   and the step times :func:`programs.profiler.step` marked.
2. **Timeline**: COMMAND under the PyTorch profiler (Python commands, through
   :mod:`programs.profiler.torchrun`) or Nsight Systems (``nsys`` on PATH).
3. **Instructions**: COMMAND with the NVBit tracer injected (``CUDA_INJECTION64_PATH`` =
   ``CASCADE_NVBIT_TRACER``).

``TRACES_FOLDER`` is the trace folder in the timeline and instruction passes (a scratch
folder in the baseline pass); kernel files that appear there are uploaded as soon as
they are complete, while COMMAND runs. Then kernelslist[.g], stats.csv, the timeline
and the baseline; then the seal. COMMAND's output passes through; Ctrl-C stops COMMAND
(SIGINT to its process group, SIGKILL after a grace period) and seals what arrived,
naming the unfinished files, so the trace ends ``incomplete``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import msgspec
import structlog

from cascade.errors import CascadeError, ValidationError
from cascade.traces.baseline import BASELINE_NAME, Baseline, steps_from_marks, write_baseline
from programs.client import IMPORT_STATE_NAME, ApiError, CascadeClient
from programs.profiler import ENV_BASELINE, ENV_PASS, ENV_STEPS, ENV_TIMELINE, ENV_TRACES_FOLDER
from programs.profiler.upload import StreamUploader
from programs.profiler.watch import KernelFolderWatcher

log = structlog.get_logger("programs.profiler")

TRACER_ENV = "CASCADE_NVBIT_TRACER"
TIMELINE_NAME = "timeline.pt.trace.json"
CPU_TIMELINE_NAME = "timeline.jsonl"
NSYS_NAME = "timeline"
STOP_GRACE_S = 10.0

Mode = Literal["timeline", "instructions", "both"]


class ProfileError(CascadeError, RuntimeError):
    """The profiler could not do what it was asked (the message says what to do)."""

    code = "profile_failed"


class ProfileOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``cascade profile`` was told."""

    command: list[str] = []
    """COMMAND and its arguments."""
    app: str | None = None
    """api URL; None: keep everything in ``out``."""
    token: str | None = None
    name: str = ""
    source_gpu: str = ""
    workload: str = ""
    mode: Mode = "timeline"
    traces_dir: Path | None = None
    out: Path | None = None
    baseline_repeats: int = 3
    baseline_warmup: int = 1
    recipe: bool = False
    """COMMAND follows the CASCADE_PROFILE_PASS protocol (times and profiles itself)."""
    timeline_tool: Literal["auto", "torch", "nsys"] = "auto"
    tracer: str | None = None
    """Path of the NVBit ``tracer_tool.so`` (CASCADE_NVBIT_TRACER)."""
    kernel_range: str | None = None
    """``START:END`` kernel ids the tracer traces (DYNAMIC_KERNEL_LIMIT_START/END)."""
    compress: bool = False
    """Ask the tracer to xz-compress its kernel files."""
    tracer_env: list[str] = []
    """Further ``KEY=VALUE`` settings for the tracer."""
    parallel: int = 4
    retry_for: float = 300.0
    wait: float = 600.0
    """Seconds to wait for the trace to be ready after the seal (0: do not wait)."""
    resume: bool = False
    """Do not run COMMAND: upload what the folder holds to the remembered trace, seal."""
    quiet: bool = False
    poll_s: float = 0.1


@dataclass
class ProfileResult:
    """What happened (returned to the CLI and the tests)."""

    exit_status: int
    folder: Path
    trace_id: str | None = None
    state: str | None = None
    kernels: int = 0
    files: int = 0
    bytes: int = 0
    retries: int = 0
    first_kernel_to_ready_s: float | None = None
    interrupted: bool = False
    failed: dict[str, str] = field(default_factory=dict)
    lag_s: dict[str, float] = field(default_factory=dict)
    arrived: dict[str, float] = field(default_factory=dict)
    command_exited_at: float | None = None
    uploads_started_at: float | None = None
    baseline: Baseline | None = None
    local_only: bool = False

    def summary_line(self) -> str:
        """The one-line summary printed at the end."""
        lag = (f", first kernel -> ready {self.first_kernel_to_ready_s:.1f} s"
               if self.first_kernel_to_ready_s is not None else "")
        where = f"trace {self.trace_id} {self.state}" if self.trace_id else f"kept in {self.folder}"
        return (f"cascade profile: {where}: {self.kernels} kernel files, {self.files} files, "
                f"{self.bytes / 1e6:.1f} MB{lag}"
                + (f", {self.retries} retries" if self.retries else "")
                + (f", {len(self.failed)} files NOT uploaded" if self.failed else ""))


def _is_python(argv: list[str]) -> bool:
    head = Path(argv[0]).name
    return argv[0] == sys.executable or head.startswith("python") or argv[0].endswith(".py")


def _exit_code(rc: int | None) -> int:
    if rc is None:
        return 1
    return 128 - rc if rc < 0 else rc


class _Runner:
    """Runs COMMAND in its own process group; Ctrl-C stops it."""

    def __init__(self) -> None:
        self.interrupted = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None

    def on_sigint(self) -> None:
        self.interrupted.set()
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGINT)

    async def start(self, argv: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
        try:
            self.proc = await asyncio.create_subprocess_exec(*argv, env=env, process_group=0)
        except FileNotFoundError:
            raise ProfileError(f"COMMAND {argv[0]!r} not found: give a program on PATH or a path "
                               "to one after --") from None
        except PermissionError:
            raise ProfileError(f"COMMAND {argv[0]!r} is not executable (chmod +x it or run it "
                               "through its interpreter)") from None
        return self.proc

    async def wait(self) -> int:
        assert self.proc is not None
        proc = self.proc
        waiter = asyncio.ensure_future(proc.wait())
        stop = asyncio.ensure_future(self.interrupted.wait())
        await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            try:
                await asyncio.wait_for(asyncio.shield(waiter), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await waiter
        stop.cancel()
        return _exit_code(proc.returncode)


class ProfileSession:
    """One ``cascade profile`` invocation."""

    def __init__(self, opts: ProfileOptions, *, progress: Any = None) -> None:
        self.opts = opts
        self.progress = progress
        self.runner = _Runner()
        self.folder = self._folder()
        self.watcher = KernelFolderWatcher(self.folder)
        self.api: CascadeClient | None = None
        self.uploader: StreamUploader | None = None
        self.trace_id: str | None = None
        self.state_path = self.folder / IMPORT_STATE_NAME
        self.state: dict[str, Any] = {}
        self.entry: dict[str, Any] = {}
        self.result = ProfileResult(exit_status=0, folder=self.folder)

    def _folder(self) -> Path:
        o = self.opts
        if o.out and o.traces_dir and o.out.resolve() != o.traces_dir.resolve():
            raise ValidationError("give --out or --traces-dir, or the same folder to both "
                                  "(the trace is kept where the tracer writes it)", field="--out")
        folder = o.out or o.traces_dir
        if folder is None:
            if o.resume:
                raise ValidationError("--resume needs the trace folder (--out or --traces-dir)",
                                      field="--resume")
            folder = Path(tempfile.mkdtemp(prefix="cascade-profile-"))
        folder.mkdir(parents=True, exist_ok=True)
        return folder.resolve()

    # -- the app -------------------------------------------------------------------------
    def _entry_key(self) -> str:
        assert self.opts.app
        return f"{self.opts.app.rstrip('/')} {self.folder}"

    def _save_state(self) -> None:
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        tmp.write_bytes(msgspec.json.format(msgspec.json.encode(self.state), indent=2))
        tmp.replace(self.state_path)

    async def _connect(self) -> None:
        """Open (or resume) the trace on the app; local only when it cannot be reached."""
        o = self.opts
        if not o.app:
            self.result.local_only = True
            return
        self.api = CascadeClient(o.app, o.token, timeout=120.0)
        with contextlib.suppress(FileNotFoundError, ValueError):
            self.state = msgspec.json.decode(self.state_path.read_bytes())
        self.entry = dict(self.state.get(self._entry_key()) or {})
        try:
            trace = None
            if self.entry.get("trace_id"):
                try:
                    trace = await self.api.get_trace(self.entry["trace_id"], details=False)
                except ApiError as exc:
                    if exc.http_status != 404:
                        raise
            if trace is None:
                if not o.source_gpu:
                    raise ValidationError("a new trace needs --source-gpu (spec id such as SM90_H100 "
                                          "or the driver's device name)", field="--source-gpu")
                kind = {"timeline": "timeline", "instructions": "instructions", "both": "both"}[o.mode]
                trace = await self.api.create_trace(name=o.name or self.folder.name,
                                                    source_gpu=o.source_gpu, kind=kind,
                                                    workload=o.workload or " ".join(o.command)[:4000])
                self.entry = {"trace_id": trace["id"], "part_sizes": {}, "uploaded": {}}
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            await self.api.close()
            self.api = None
            if o.out is None:
                raise ProfileError(
                    f"the app at {o.app} cannot be reached ({type(exc).__name__}: {exc}); start it, "
                    "or pass --out DIR to keep the trace locally and upload it later with "
                    "cascade import DIR") from None
            print(f"cascade profile: the app at {o.app} cannot be reached ({exc}); keeping "
                  f"everything in {self.folder} (upload it later with: cascade import "
                  f"{self.folder} --app {o.app})", file=sys.stderr)
            self.result.local_only = True
            return
        self.trace_id = str(trace["id"])
        self.result.trace_id = self.trace_id
        self.entry["trace_id"] = self.trace_id
        self.state[self._entry_key()] = self.entry
        self._save_state()
        self.uploader = StreamUploader(self.api, self.trace_id, parallel=o.parallel,
                                       retry_for=o.retry_for, entry=self.entry,
                                       save=self._save_state, progress=self.progress)
        self.uploader.start()
        log.info("trace opened", trace_id=self.trace_id, folder=str(self.folder))

    # -- passes --------------------------------------------------------------------------
    def _env(self, pass_name: str, traces: Path, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({ENV_PASS: pass_name, ENV_TRACES_FOLDER: str(traces)})
        env.update(extra)
        return env

    async def _run(self, argv: list[str], env: dict[str, str], *, watch: bool) -> int:
        await self.runner.start(argv, env)
        if not watch:
            return await self.runner.wait()
        waiter = asyncio.ensure_future(self.runner.wait())
        while not waiter.done():
            self._submit_complete(exited=False)
            await asyncio.wait({waiter}, timeout=self.opts.poll_s)
        rc = waiter.result()
        self.result.command_exited_at = time.time()
        if not self.runner.interrupted.is_set():
            self._submit_complete(exited=True)
        return rc

    def _submit_complete(self, *, exited: bool) -> None:
        for f in self.watcher.scan(exited=exited):
            if self.uploader is not None:
                if self.result.uploads_started_at is None:
                    self.result.uploads_started_at = time.time()
                self.uploader.submit(f.path, f.seen_complete)

    async def baseline_pass(self) -> int:
        """Unprofiled runs; writes baseline.json into the trace folder."""
        o = self.opts
        scratch = Path(tempfile.mkdtemp(prefix="cascade-baseline-"))
        try:
            target = self.folder / BASELINE_NAME
            if o.recipe:
                rc = await self._run(o.command, self._env("baseline", scratch, **{
                    ENV_BASELINE: str(target)}), watch=False)
                return rc
            e2e, steps = [], []
            command = self.baseline_argv()
            for i in range(o.baseline_warmup + o.baseline_repeats):
                marks = scratch / f"steps-{i}.txt"
                t0 = time.monotonic_ns()
                rc = await self._run(command, self._env("baseline", scratch, **{
                    ENV_STEPS: str(marks)}), watch=False)
                t1 = time.monotonic_ns()
                if rc != 0 or self.runner.interrupted.is_set():
                    return rc
                if i >= o.baseline_warmup:
                    e2e.append((t1 - t0) / 1e6)
                    points = [int(x) for x in marks.read_text().split()] if marks.exists() else []
                    steps.append(steps_from_marks(t0, points))
            write_baseline(target, Baseline(workload=" ".join(o.command)[:4000],
                                            warmup=o.baseline_warmup, e2e_ms=e2e,
                                            step_ms=[s for s in steps if s]))
            return 0
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def baseline_argv(self) -> list[str]:
        """COMMAND for the baseline pass: a Python COMMAND runs unprofiled through
        :mod:`programs.profiler.torchrun` (for its automatic step markers), others as given."""
        argv = list(self.opts.command)
        if argv[0].endswith(".py"):
            argv = [sys.executable, *argv]
        if not _is_python(argv) or len(argv) < 2:
            return list(self.opts.command)
        return [argv[0], "-m", "programs.profiler.torchrun", "--no-profile", "--", *argv[1:]]

    def timeline_argv(self) -> tuple[list[str], dict[str, str]]:
        """COMMAND as the timeline pass runs it, and the extra environment."""
        o = self.opts
        tool = o.timeline_tool
        nsys = shutil.which("nsys")
        if tool == "auto":
            tool = "torch" if (o.recipe or _is_python(o.command)) else "nsys"
        if tool == "nsys":
            if nsys is None:
                raise ProfileError(
                    f"the timeline pass of {o.command[0]!r} needs Nsight Systems (nsys on PATH) or a "
                    "Python COMMAND (run under the PyTorch profiler); install nsys, or use "
                    "--mode instructions")
            out = self.folder / NSYS_NAME
            return ([nsys, "profile", "--trace", "cuda,nvtx,osrt", "--sample", "none",
                     "--export", "sqlite", "--force-overwrite", "true", "-o", str(out),
                     *o.command], {})
        timeline = str(self.folder / TIMELINE_NAME)
        if o.recipe:
            return list(o.command), {ENV_TIMELINE: timeline}
        argv = list(o.command)
        if argv[0].endswith(".py"):
            argv = [sys.executable, *argv]
        elif not _is_python(argv):
            raise ProfileError(f"--timeline-tool torch needs a Python COMMAND, not {argv[0]!r}")
        return ([argv[0], "-m", "programs.profiler.torchrun", "--out", timeline, "--", *argv[1:]],
                {ENV_TIMELINE: timeline})

    async def recipe_passes(self) -> int:
        """A built-in recipe's baseline and PyTorch-profiler timeline in one process
        (``baseline+timeline``: the baseline first, unprofiled), so the workload is built once."""
        argv, extra = self.timeline_argv()
        return await self._run(argv, self._env("baseline+timeline", self.folder, **extra, **{
            ENV_BASELINE: str(self.folder / BASELINE_NAME)}), watch=True)

    def _one_recipe_process(self) -> bool:
        """Baseline and timeline in one recipe process: a built-in recipe, both passes wanted,
        the timeline under the PyTorch profiler."""
        o = self.opts
        return (o.recipe and o.baseline_repeats > 0 and o.mode in ("timeline", "both")
                and ENV_TIMELINE in self.timeline_argv()[1])

    async def timeline_pass(self) -> int:
        argv, extra = self.timeline_argv()
        # under nsys a recipe only marks its steps (NVTX ranges); under torch it profiles itself
        name = "timeline" if ENV_TIMELINE in extra else "nsys"
        return await self._run(argv, self._env(name, self.folder, **extra), watch=True)

    async def instruction_pass(self) -> int:
        o = self.opts
        extra: dict[str, str] = {"USER_DEFINED_FOLDERS": "1"}
        if o.tracer:
            if not Path(o.tracer).is_file():
                raise ProfileError(f"{TRACER_ENV}={o.tracer}: no such file (point it at the "
                                   "Accel-Sim NVBit tracer_tool.so)")
            extra["CUDA_INJECTION64_PATH"] = o.tracer
        else:
            print(f"cascade profile: {TRACER_ENV} is not set: COMMAND runs without the NVBit "
                  f"tracer; kernel files it writes to TRACES_FOLDER ({self.folder}) are uploaded",
                  file=sys.stderr)
        if o.kernel_range:
            start, _, end = o.kernel_range.partition(":")
            if not (start.isdigit() and (end.isdigit() or end == "")):
                raise ValidationError("expected START:END kernel ids, e.g. 1:200",
                                      field="--kernel-range")
            extra["DYNAMIC_KERNEL_LIMIT_START"] = start
            extra["DYNAMIC_KERNEL_LIMIT_END"] = end or "0"
        if o.compress:
            extra["TOOL_COMPRESS"] = "1"
        for item in o.tracer_env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValidationError(f"expected KEY=VALUE, not {item!r}", field="--tracer-env")
            extra[key] = value
        return await self._run(list(o.command), self._env("instructions", self.folder, **extra),
                               watch=True)

    # -- after COMMAND ------------------------------------------------------------------
    def _final_files(self) -> list[Path]:
        out = list(self.watcher.extras())
        for name in (CPU_TIMELINE_NAME, TIMELINE_NAME, f"{NSYS_NAME}.sqlite"):
            p = self.folder / name
            if p.is_file():
                if name == TIMELINE_NAME and (self.folder / CPU_TIMELINE_NAME).is_file():
                    continue  # a CPU run: its kernels are the ops in timeline.jsonl
                out.append(p)
        base = self.folder / BASELINE_NAME
        if base.is_file():
            out.append(base)
        return out

    def _count_kept(self) -> None:
        """Local only: what the folder keeps, kernel files and the timeline, baseline and lists
        beside them (every file ``cascade import`` would upload)."""
        from cascade.traces.files import check_name, collect_files

        with contextlib.suppress(OSError):
            files = collect_files(self.folder)
            self.result.files = len(files)
            self.result.bytes = sum(f.stat().st_size for f in files)
            self.result.kernels = sum(1 for f in files if check_name(f.name).kind == "kernel")

    async def _finish(self, command_status: int) -> None:
        if self.uploader is None or self.api is None or self.trace_id is None:
            self._count_kept()
            return
        up = self.uploader
        # after Ctrl-C or a failed COMMAND: seal what arrived, naming the unfinished files
        interrupted = self.runner.interrupted.is_set() or command_status != 0
        pending = self.watcher.pending() if interrupted else []
        await up.drain()
        for p in self._final_files():
            up.submit(p)
        await up.close()
        uploaded = sorted(up.entry.get("uploaded", {}))
        expected = sorted({*uploaded, *up.stats.failed, *pending})
        try:
            record = await self.api.seal(self.trace_id, expected_files=expected)
            self.result.state = str(record.get("state"))
            if self.opts.wait > 0 and not interrupted and not up.stats.failed:
                final = await self.api.wait_for_state(self.trace_id, {"ready", "incomplete", "failed"},
                                                      timeout=self.opts.wait)
                self.result.state = str(final["state"])
                if final["state"] == "ready" and up.stats.first_kernel_at is not None:
                    self.result.first_kernel_to_ready_s = time.time() - up.stats.first_kernel_at
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            print(f"cascade profile: sealing trace {self.trace_id} failed ({exc}); finish it with: "
                  f"cascade profile --resume --out {self.folder} --app {self.opts.app}", file=sys.stderr)
        s = up.stats
        self.result.kernels, self.result.files, self.result.bytes = s.kernels, s.files, s.bytes
        self.result.retries, self.result.failed = s.retries, dict(s.failed)
        self.result.lag_s, self.result.arrived = dict(s.lag_s), dict(s.arrived)

    async def _resume_uploads(self) -> None:
        """--resume: submit every trace file the app does not hold yet."""
        from cascade.traces.files import collect_files
        from programs.client import already_there

        assert self.api is not None and self.uploader is not None and self.trace_id is not None
        remote = {f["name"]: f for f in (await self.api.get_trace(self.trace_id)).get("files", [])}
        parts = self.entry.get("part_sizes", {})
        for path in collect_files(self.folder):
            if already_there(path, remote.get(path.name), parts.get(path.name)):
                self.uploader.entry["uploaded"][path.name] = remote[path.name].get("etag", "")
                self.uploader.submitted.add(path.name)
            elif path.name.startswith("kernel-"):
                self.watcher.reported.add(path.name)
                self.uploader.submit(path)

    async def run(self) -> ProfileResult:
        """Do every pass; returns the result (COMMAND's exit status in ``exit_status``)."""
        o = self.opts
        if not o.command and not o.resume:
            raise ValidationError("give COMMAND after --, e.g. cascade profile ... -- python train.py",
                                  field="COMMAND")
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self.runner.on_sigint)
        rc = 0
        try:
            await self._connect()
            if o.resume:
                if self.uploader is None:
                    raise ProfileError(f"--resume needs a reachable app (--app); {o.app} is not")
                await self._resume_uploads()
            else:
                if o.mode in ("timeline", "both"):
                    self.timeline_argv()  # fail early when no timeline tool fits
                if self._one_recipe_process():
                    rc = await self.recipe_passes()
                else:
                    if o.baseline_repeats > 0:
                        rc = await self.baseline_pass()
                    if rc == 0 and not self.runner.interrupted.is_set() and o.mode in ("timeline", "both"):
                        rc = await self.timeline_pass()
                if rc == 0 and not self.runner.interrupted.is_set() and o.mode in ("instructions", "both"):
                    rc = await self.instruction_pass()
            if self.runner.interrupted.is_set():
                self.result.interrupted = True
                rc = rc or 130
            await self._finish(rc)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            if self.uploader is not None:
                await self.uploader.cancel()
            if self.api is not None:
                await self.api.close()
        base = self.folder / BASELINE_NAME
        if base.is_file():
            from cascade.traces.baseline import read_baseline
            self.result.baseline = read_baseline(base.read_bytes(), str(base))
        self.result.exit_status = rc
        return self.result


async def profile(opts: ProfileOptions, *, progress: Any = None) -> ProfileResult:
    """Run one profiling session (see :class:`ProfileSession`)."""
    return await ProfileSession(opts, progress=progress).run()
