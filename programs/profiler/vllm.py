"""``cascade profile vllm``: trace a vLLM server as it serves.

vLLM V1 runs its engine in worker processes (one per tensor-parallel rank), where a profiler
in the launching process sees no kernel. vLLM's own PyTorch profiler does: a server started
with ``VLLM_TORCH_PROFILER_DIR=D`` has ``POST /start_profile`` and ``POST /stop_profile``, and
on stop every rank writes ``<worker>.<ms>.pt.trace.json.gz`` into ``D``.

:func:`profile_vllm`:

1. attaches to the server at ``--url`` (``--profile-dir`` = the ``D`` it was started with), or
   launches ``--launch "vllm serve MODEL ..."`` with ``VLLM_TORCH_PROFILER_DIR`` set and waits
   for ``GET /health``;
2. drives ``--warmup`` requests, then ``--requests`` timed ones, closed loop at
   ``--concurrency``: streaming ``/v1/completions`` with a fixed-length random-token prompt
   (``--prompt`` tokens) and ``--output`` tokens (``ignore_eos``, ``max_tokens``); TTFT and
   TPOT measured client-side per request;
3. brackets ``--profile-requests`` more requests (one wave at the concurrency by default) with
   ``/start_profile`` and ``/stop_profile``, and waits for every rank's file to be complete
   (sizes stable, the gzip stream whole);
4. writes the trace folder: ``timeline.csv`` (every rank's kernels as one workload, rank ``r``'s
   streams as ``r * stride + stream``, :mod:`cascade.traces.ranks`) and ``baseline.json``
   (the load and the measured TTFT / TPOT), the rank files kept in ``vllm-profile/``;
5. hands the folder to ``upload`` (``cascade import``'s upload) when ``--app`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import random
import re
import shlex
import signal
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from cascade.errors import ValidationError
from cascade.traces.baseline import BASELINE_NAME, Baseline, ServingLoad, write_baseline
from programs.profiler.session import ProfileError

PROFILER_DIR_ENV = "VLLM_TORCH_PROFILER_DIR"
RPC_TIMEOUT_ENV = "VLLM_RPC_TIMEOUT"
TIMELINE_NAME = "timeline.csv"
PROFILE_SUBDIR = "vllm-profile"
SERVER_LOG = "server.log"
RANK_FILE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_TP_RE = re.compile(r"^(?:--tensor-parallel-size|-tp)(?:=(\d+))?$")
STOP_GRACE_S = 20.0


class VllmOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``cascade profile vllm`` was told."""

    url: str
    """The server's base URL (``http://HOST:PORT``)."""
    launch: str = ""
    """Command line that starts the server ('' to attach to a running one)."""
    model: str = ""
    """Model name sent in requests ('' = the first one ``/v1/models`` lists)."""
    concurrency: int = 1
    prompt: int = 128
    output: int = 128
    requests: int = 8
    warmup: int = 1
    profile_requests: int = 0
    """Requests in the profiled window (0 = one per client)."""
    ranks: int = 0
    """Rank files to wait for (0 = from --tensor-parallel-size in the launch command, else 1)."""
    out: Path | None = None
    profile_dir: Path | None = None
    app: str | None = None
    token: str | None = None
    name: str = ""
    source_gpu: str = ""
    workload: str = ""
    startup_timeout: float = 1800.0
    flush_timeout: float = 1800.0
    """Seconds to wait for the ranks' trace files after /stop_profile."""
    settle_s: float = 2.0
    """A rank file is complete when its size has not changed for this long (and it decodes)."""
    request_timeout: float = 1800.0
    wait: float = 600.0
    quiet: bool = False
    seed: int = 0


@dataclass
class VllmResult:
    """What happened."""

    folder: Path
    rank_files: list[Path] = field(default_factory=list)
    kernels: int = 0
    stride: int = 0
    device: str = ""
    baseline: Baseline | None = None
    upload: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def tensor_parallel_of(argv: list[str]) -> int:
    """``--tensor-parallel-size N`` / ``-tp N`` of a ``vllm serve`` command line (1 if absent)."""
    for i, arg in enumerate(argv):
        m = _TP_RE.match(arg)
        if m is None:
            continue
        value = m.group(1) or (argv[i + 1] if i + 1 < len(argv) else "")
        if value.isdigit() and int(value) > 0:
            return int(value)
        raise ValidationError(f"--launch: {arg} needs a positive number, not {value!r}",
                              field="--launch")
    return 1


def rank_of_file(path: Path) -> int | None:
    """The rank a vLLM trace file name says (``...rank1...pt.trace.json.gz``), None if none."""
    m = _RANK_RE.search(path.name)
    return int(m.group(1)) if m else None


class _Request(msgspec.Struct, frozen=True):
    ttft_s: float
    e2e_s: float
    tokens: int


class _Chunk(msgspec.Struct):
    choices: list[dict[str, Any]] = []
    usage: dict[str, Any] | None = None


class VllmClient:
    """The few endpoints of an OpenAI-compatible vLLM server this needs."""

    def __init__(self, http: aiohttp.ClientSession, url: str, opts: VllmOptions) -> None:
        self.http = http
        self.url = url.rstrip("/")
        self.opts = opts
        self._chunk = msgspec.json.Decoder(_Chunk)

    async def healthy(self) -> bool:
        try:
            async with self.http.get(f"{self.url}/health",
                                     timeout=aiohttp.ClientTimeout(total=5)) as r:
                return r.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def first_model(self) -> str:
        async with self.http.get(f"{self.url}/v1/models") as r:
            if r.status != 200:
                raise ProfileError(f"GET {self.url}/v1/models answered {r.status}: is this an "
                                   "OpenAI-compatible vLLM server? (or give --model)")
            data = await r.json()
        models = data.get("data") or []
        if not models or not isinstance(models[0], dict) or not models[0].get("id"):
            raise ProfileError(f"GET {self.url}/v1/models lists no model; give --model")
        return str(models[0]["id"])

    async def profiler_routes_known(self) -> bool | None:
        """Whether the server's OpenAPI document lists /start_profile (None: no document)."""
        try:
            async with self.http.get(f"{self.url}/openapi.json") as r:
                if r.status != 200:
                    return None
                doc = await r.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        paths = doc.get("paths") if isinstance(doc, dict) else None
        return None if not isinstance(paths, dict) else "/start_profile" in paths

    async def profiler(self, action: str) -> None:
        """``POST /start_profile`` or ``/stop_profile``."""
        timeout = aiohttp.ClientTimeout(total=self.opts.flush_timeout)
        async with self.http.post(f"{self.url}/{action}_profile", timeout=timeout) as r:
            if r.status == 404:
                raise ProfileError(no_profiler_message(self.url))
            if r.status >= 400:
                text = (await r.text())[:300]
                raise ProfileError(f"POST {self.url}/{action}_profile answered {r.status}: {text}")

    async def complete(self, model: str, prompt: list[int]) -> _Request:
        """One streaming completion; its TTFT, end-to-end time and output tokens."""
        o = self.opts
        body = {"model": model, "prompt": prompt, "max_tokens": o.output, "min_tokens": o.output,
                "ignore_eos": True, "stream": True, "temperature": 0.0,
                "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        first: float | None = None
        pieces = 0
        usage_tokens = 0
        timeout = aiohttp.ClientTimeout(total=o.request_timeout)
        async with self.http.post(f"{self.url}/v1/completions", json=body, timeout=timeout) as r:
            if r.status != 200:
                text = (await r.text())[:300]
                raise ProfileError(f"POST {self.url}/v1/completions answered {r.status}: {text}")
            async for raw in r.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                try:
                    chunk = self._chunk.decode(data)
                except msgspec.DecodeError as exc:
                    raise ProfileError(f"{self.url}/v1/completions streamed a chunk that is not "
                                       f"JSON ({exc}): {data[:120]!r}") from None
                if chunk.usage and isinstance(chunk.usage.get("completion_tokens"), int):
                    usage_tokens = chunk.usage["completion_tokens"]
                if any(c.get("text") for c in chunk.choices):
                    pieces += 1
                    if first is None:
                        first = time.perf_counter()
        end = time.perf_counter()
        if first is None:
            raise ProfileError(f"{self.url}/v1/completions streamed no tokens")
        return _Request(ttft_s=first - t0, e2e_s=end - t0, tokens=usage_tokens or pieces)


def no_profiler_message(url: str) -> str:
    """What to do when the server has no /start_profile (it was started without the env var)."""
    return (f"the server at {url} has no /start_profile (404): vLLM registers /start_profile and "
            f"/stop_profile only when {PROFILER_DIR_ENV} is set; restart it with "
            f"{PROFILER_DIR_ENV}=DIR and pass --profile-dir DIR, or let cascade start it with "
            "--launch \"vllm serve MODEL ...\"")


async def closed_loop(client: VllmClient, model: str, prompts: list[list[int]],
                      concurrency: int) -> tuple[list[_Request], float]:
    """Send ``prompts`` with ``concurrency`` clients, each sending its next one when its last
    one finished; the results in completion order and the wall time (s)."""
    queue = list(reversed(prompts))
    done: list[_Request] = []

    async def client_loop() -> None:
        while queue:
            done.append(await client.complete(model, queue.pop()))

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for _ in range(min(concurrency, len(prompts))):
            tg.create_task(client_loop())
    return done, time.perf_counter() - t0


def random_prompts(n: int, length: int, rng: random.Random) -> list[list[int]]:
    """``n`` prompts of ``length`` random token ids (below 20,000: inside every common vocab)."""
    return [[rng.randrange(1000, 20000) for _ in range(length)] for _ in range(n)]


class _Server:
    """A launched server in its own process group; stopped with SIGINT, then SIGKILL."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as fh:
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv, env=self.env, stdout=fh, stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL, process_group=0)
            except FileNotFoundError:
                raise ProfileError(f"--launch: {self.argv[0]!r} not found (give a program on PATH "
                                   "or a path to one)") from None

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def wait_healthy(client: VllmClient, server: _Server | None, timeout: float) -> None:
    """Until ``GET /health`` answers 200; fails when the launched server exits first."""
    deadline = time.monotonic() + timeout
    while not await client.healthy():
        if server is not None and server.exited() is not None:
            raise ProfileError(f"the server exited with status {server.exited()} before "
                               f"{client.url}/health answered; its log ({server.log}) ends:\n"
                               f"{server.log_tail()}")
        if time.monotonic() > deadline:
            where = f"; its log: {server.log}" if server is not None else ""
            raise ProfileError(f"{client.url}/health did not answer 200 within {timeout:.0f} s "
                               f"(--startup-timeout){where}")
        await asyncio.sleep(0.5)


def _rank_files(folder: Path) -> dict[Path, tuple[int, int]]:
    """Profiler trace files in ``folder`` -> (size, mtime ns)."""
    out: dict[Path, tuple[int, int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for p in folder.iterdir():
            if p.name.endswith(RANK_FILE_SUFFIXES) and p.is_file():
                with contextlib.suppress(FileNotFoundError):
                    st = p.stat()
                    out[p] = (st.st_size, st.st_mtime_ns)
    return out


def _is_whole(path: Path) -> bool:
    """The file decodes to its end (a gzip stream with its trailer; JSON closed)."""
    try:
        if path.name.endswith(".gz"):
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            with path.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    d.decompress(chunk, 0)
            return d.eof
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - 64))
            return fh.read().rstrip().endswith((b"}", b"]"))
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile):
        return False


async def wait_rank_files(folder: Path, before: dict[Path, tuple[int, int]], ranks: int, *,
                          settle_s: float, timeout: float) -> list[Path]:
    """The rank files written since ``before``, once there are ``ranks`` of them, none has
    grown for ``settle_s`` and each decodes whole; in rank order."""
    deadline = time.monotonic() + timeout
    last: dict[Path, tuple[int, int]] = {}
    stable_since = time.monotonic()
    while True:
        now = _rank_files(folder)
        new = {p: s for p, s in now.items() if before.get(p) != s}
        if new != last:
            last, stable_since = new, time.monotonic()
        elif len(new) >= ranks and time.monotonic() - stable_since >= settle_s:
            if all(_is_whole(p) for p in new):
                return sorted(new, key=lambda p: (rank_of_file(p) is None, rank_of_file(p) or 0,
                                                  p.name))
            stable_since = time.monotonic()
        if time.monotonic() > deadline:
            raise ProfileError(f"{folder}: {len(new)} of {ranks} rank trace files complete after "
                               f"{timeout:.0f} s (--flush-timeout); vLLM can take minutes to "
                               f"write them (set {RPC_TIMEOUT_ENV} high on the server)")
        await asyncio.sleep(min(0.2, settle_s / 4))


def import_ranks(files: list[Path]) -> tuple[Any, int, str, list[str]]:
    """Every rank's trace as one kernel table: (table, stream stride, device, warnings)."""
    from cascade.traces.chrome import read_chrome_trace
    from cascade.traces.ranks import merge_rank_timelines

    timelines = [read_chrome_trace(p) for p in files]
    table, stride = merge_rank_timelines(timelines)
    warnings = [w for tl in timelines for w in tl.warnings]
    return table, stride, timelines[0].device, warnings


def _folder(opts: VllmOptions) -> Path:
    folder = opts.out or Path(tempfile.mkdtemp(prefix="cascade-vllm-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve()


def _validate(opts: VllmOptions) -> None:
    for name, value, low in (("--concurrency", opts.concurrency, 1), ("--prompt", opts.prompt, 1),
                             ("--output", opts.output, 1), ("--requests", opts.requests, 1),
                             ("--warmup", opts.warmup, 0), ("--profile-requests",
                                                            opts.profile_requests, 0),
                             ("--ranks", opts.ranks, 0)):
        if value < low:
            raise ValidationError(f"{name} must be at least {low}, not {value}", field=name)
    if not opts.url.startswith(("http://", "https://")):
        raise ValidationError(f"--url must be http://HOST:PORT, not {opts.url!r}", field="--url")
    if not opts.launch and opts.profile_dir is None:
        raise ValidationError(
            f"--profile-dir: give the {PROFILER_DIR_ENV} the server at {opts.url} was started "
            "with (its rank traces are read from there, so the server must run on this machine "
            "or share that folder), or let cascade start it with --launch \"vllm serve ...\"",
            field="--profile-dir")


#: Uploads a finished trace folder: (folder, source GPU, workload) -> the import's summary.
Uploader = Callable[[Path, str, str], Awaitable[dict[str, Any]]]


async def profile_vllm(opts: VllmOptions, *, upload: Uploader | None = None) -> VllmResult:
    """Trace the server while it serves (see the module docstring); ``upload`` (the CLI passes
    ``cascade import``'s) is called with the finished folder when ``opts.app`` is set."""
    _validate(opts)
    folder = _folder(opts)
    result = VllmResult(folder=folder)
    profile_dir = (opts.profile_dir or folder / PROFILE_SUBDIR).resolve()
    profile_dir.mkdir(parents=True, exist_ok=True)
    argv = shlex.split(opts.launch) if opts.launch else []
    ranks = opts.ranks or (tensor_parallel_of(argv) if argv else 1)
    server: _Server | None = None
    if argv:
        env = dict(os.environ)
        env[PROFILER_DIR_ENV] = str(profile_dir)
        env.setdefault(RPC_TIMEOUT_ENV, str(int(opts.flush_timeout * 1000)))
        server = _Server(argv, env, profile_dir / SERVER_LOG)
    rng = random.Random(opts.seed)
    try:
        async with aiohttp.ClientSession() as http:
            client = VllmClient(http, opts.url, opts)
            if server is not None:
                if await client.healthy():
                    raise ProfileError(f"something already answers at {opts.url}; give --launch a "
                                       "free port, or attach to it without --launch")
                await server.start()
                _say(opts, f"started {argv[0]} ({PROFILER_DIR_ENV}={profile_dir}); waiting for "
                           f"{client.url}/health")
            await wait_healthy(client, server, opts.startup_timeout if server else 30.0)
            if await client.profiler_routes_known() is False:
                raise ProfileError(no_profiler_message(client.url))
            model = opts.model or await client.first_model()
            if opts.warmup:
                await closed_loop(client, model, random_prompts(opts.warmup, opts.prompt, rng),
                                  opts.concurrency)
            _say(opts, f"{opts.requests} requests of {opts.prompt} -> {opts.output} tokens at "
                       f"concurrency {opts.concurrency} ({model})")
            timed, duration = await closed_loop(
                client, model, random_prompts(opts.requests, opts.prompt, rng), opts.concurrency)
            before = _rank_files(profile_dir)
            await client.profiler("start")
            try:
                n = opts.profile_requests or opts.concurrency
                await closed_loop(client, model, random_prompts(n, opts.prompt, rng),
                                  opts.concurrency)
            finally:
                await client.profiler("stop")
            _say(opts, f"profiled window done; waiting for {ranks} rank trace file(s) in "
                       f"{profile_dir}")
            files = await wait_rank_files(profile_dir, before, ranks, settle_s=opts.settle_s,
                                          timeout=opts.flush_timeout)
    finally:
        if server is not None:
            await server.stop()
    result.rank_files = files
    serving = ServingLoad(
        concurrency=opts.concurrency, prompt_tokens=opts.prompt, output_tokens=opts.output,
        requests=len(timed), tensor_parallel=len(files),
        ttft_ms=[r.ttft_s * 1000 for r in timed],
        tpot_ms=[(r.e2e_s - r.ttft_s) * 1000 / (r.tokens - 1) for r in timed if r.tokens > 1],
        request_ms=[r.e2e_s * 1000 for r in timed], duration_s=duration)
    table, stride, device, warnings = await asyncio.to_thread(import_ranks, files)
    from cascade.tableio import write_table

    await asyncio.to_thread(write_table, table, folder / TIMELINE_NAME)
    result.kernels, result.stride, result.device, result.warnings = len(table), stride, device, warnings
    workload = opts.workload or (f"vllm {model}: concurrency {opts.concurrency}, {opts.prompt} in / "
                                 f"{opts.output} out, {len(files)} ranks (rank r = streams "
                                 f"r*{stride}+s)")
    result.baseline = Baseline(workload=workload[:4000], device=device, serving=serving)
    write_baseline(folder / BASELINE_NAME, result.baseline)
    if opts.app and upload is not None:
        result.upload = await upload(folder, opts.source_gpu or device, workload[:4000])
    return result


def _say(opts: VllmOptions, text: str) -> None:
    if not opts.quiet:
        print(f"cascade profile vllm: {text}", file=sys.stderr)
