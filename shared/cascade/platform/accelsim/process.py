"""Running ``accel-sim.out``: in a working directory holding the config folder, in its own
process group, its output read as it is written (:func:`run_accelsim`; :func:`run_accelsim_blocking`
without an event loop); cancellation and the timeout kill the whole group."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from cascade.engine.accelsim import AccelSimConfig, AccelSimOutputParser, SimulatedKernel
from cascade.errors import AccelSimError, JobTimeoutError, ValidationError
from cascade.platform.accelsim.configs import BIN_VAR, AccelSimGPUConfig, stage_config, staged_files
from cascade.platform.accelsim.failures import failure_message
from cascade.platform.accelsim.library import run_env
from cascade.platform.accelsim.tracefiles import listed_ids

#: Lines of output kept for an error message.
TAIL_LINES = 40
#: Characters of that tail kept at most.
TAIL_CHARS = 4000
#: Seconds between SIGTERM and SIGKILL when a simulation's process group is stopped.
KILL_GRACE_S = 2.0


class AccelSimOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One finished Accel-Sim run."""

    kernels: list[Any]
    """:class:`SimulatedKernel` per kernel reported, in output order."""
    returncode: int
    first_line_s: float | None
    """Seconds from starting the process to its first output line."""
    wall_s: float
    lines: int
    tail: str
    """Last lines of output."""
    statistics: list[Any] = []
    """:class:`~cascade.engine.accelsim.KernelStatistics` per kernel, in output order."""


def accelsim_argv(binary: str, kernelslist: str, config_files: list[str]) -> list[str]:
    """``accel-sim.out -trace kernelslist.g -config gpgpusim.config -config trace.config``."""
    args = [str(binary), "-trace", str(kernelslist)]
    for cfg in config_files:
        args += ["-config", str(cfg)]
    return args


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid: int) -> list[int]:
    """Pids of the (non-zombie) processes in process group ``pgid`` (Linux ``/proc``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, SIGKILL it after :data:`KILL_GRACE_S`, reap the leader and
    wait (briefly) until no member of the group is left running."""
    pgid = proc.pid
    if proc.returncode is None:
        kill_group(pgid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE_S)
    if kill_group(pgid, signal.SIGKILL):
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            left: list[int] = await asyncio.to_thread(group_alive, pgid)
            if not left:
                break
            await asyncio.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()


async def run_accelsim(
    binary: str,
    kernelslist: str,
    config: AccelSimGPUConfig | list[str],
    workdir: str | Path,
    *,
    timeout_s: float = 3600.0,
    on_kernel: Callable[[SimulatedKernel], Awaitable[None]] | None = None,
    on_start: Callable[[int], None] | None = None,
    core_clock_mhz: float | None = None,
    env: dict[str, str] | None = None,
) -> AccelSimOutcome:
    """Run Accel-Sim on ``kernelslist`` (see the module docstring) and return its kernels.

    ``config``: the GPU's config folder, or config files by path (every file of their folders
    is staged too). The working directory holds every file of the folder (:func:`stage_config`)
    and Accel-Sim is given ``-config gpgpusim.config -config trace.config`` relative to it, as
    Accel-Sim's own run scripts do, so includes such as ``-inter_config_file`` resolve.
    ``on_kernel`` is awaited for each kernel as its statistics appear; ``on_start`` gets the
    process (group) id. Cancelling the awaiting task or passing ``timeout_s`` kills the
    process group (:class:`JobTimeoutError` for the timeout).
    """
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    if env is None:
        env = run_env(config.library_path if isinstance(config, AccelSimGPUConfig) else "")
    library = env.get("LD_LIBRARY_PATH", "")
    paths, names = staged_files(config)
    await asyncio.to_thread(stage_config, paths, work)
    args = accelsim_argv(binary, kernelslist, names)
    t0 = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=str(work), start_new_session=True, env=env,
        )
    except OSError as exc:
        raise AccelSimError(f"cannot start accel-sim {binary} ({BIN_VAR}): {exc}") from None
    if on_start is not None:
        on_start(proc.pid)
    parser = AccelSimOutputParser(binary, core_clock_mhz=core_clock_mhz)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    first_line_s: float | None = None
    assert proc.stdout is not None
    stdout = proc.stdout

    async def pump() -> None:
        nonlocal first_line_s
        pending = b""
        while True:
            chunk = await stdout.read(1 << 16)
            if not chunk:
                break
            if first_line_s is None:
                first_line_s = time.perf_counter() - t0
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                await _line(raw)
            if len(pending) > (1 << 20):  # a runaway line: keep its start only
                await _line(pending[:4096])
                pending = b""
        if pending:
            await _line(pending)

    async def _line(raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip("\r")
        tail.append(line)
        kernel = parser.feed(line)
        if kernel is not None and on_kernel is not None:
            await on_kernel(kernel)

    try:
        async with asyncio.timeout(timeout_s):
            await pump()
            returncode = await proc.wait()
    except TimeoutError:
        await _stop_group(proc)
        raise JobTimeoutError(
            f"accel-sim ran past {timeout_s:g} s (CASCADE_SIM_TIMEOUT_S); its process group "
            f"{proc.pid} was killed after {parser.lineno} lines, "
            f"{len(parser.kernels)} kernels done") from None
    finally:
        await _stop_group(proc)
    last = parser.finish()
    if last is not None and on_kernel is not None:
        await on_kernel(last)
    text_tail = "\n".join(tail)[-TAIL_CHARS:]
    failure = failure_message(returncode, len(parser.kernels), text_tail, paths=paths,
                              kernelslist=kernelslist, library=library)
    if failure:
        raise AccelSimError(failure, returncode=returncode, tail=text_tail)
    return AccelSimOutcome(kernels=list(parser.kernels), returncode=returncode,
                           first_line_s=first_line_s, wall_s=time.perf_counter() - t0,
                           lines=parser.lineno, tail=text_tail, statistics=list(parser.statistics))


def run_accelsim_blocking(binary: str, trace_dir: str, config: list[str] | AccelSimGPUConfig, *,
                          timeout_s: float = 3600.0, env: dict[str, str] | None = None
                          ) -> list[SimulatedKernel]:
    """Run Accel-Sim to completion without an event loop (``cascade predict``, scripts): a plain
    subprocess in its own process group, killed whole on timeout. ``config``: config files by
    path, or a discovered config folder (run with its library path)."""
    import tempfile

    kernelslist = Path(trace_dir).resolve() / "kernelslist.g"
    if not kernelslist.is_file():
        raise ValidationError(f"{kernelslist} does not exist: the accel-sim model needs an Accel-Sim "
                              "trace folder (kernelslist.g and kernel-N.traceg)", field="trace")
    if env is None:
        env = run_env(config.library_path if isinstance(config, AccelSimGPUConfig) else "")
    with tempfile.TemporaryDirectory(prefix="cascade-accelsim-") as work:
        paths, names = staged_files(config)
        stage_config(paths, Path(work))
        return _run_blocking(binary, str(kernelslist), names, work, trace_dir, timeout_s, env, paths,
                             config.core_clock_mhz if isinstance(config, AccelSimGPUConfig) else None)


def _run_blocking(binary: str, kernelslist: str, names: list[str], work: str, trace_dir: str,
                  timeout_s: float, env: dict[str, str], paths: dict[str, str],
                  clock: float | None) -> list[SimulatedKernel]:
    parser = AccelSimOutputParser(binary, core_clock_mhz=clock)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        proc = subprocess.Popen(accelsim_argv(binary, kernelslist, names),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, cwd=work, start_new_session=True, env=env)
    except OSError as exc:
        raise AccelSimError(f"cannot start accel-sim {binary}: {exc}") from None
    timer = threading.Timer(timeout_s, kill_group, (proc.pid,))
    timer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n")
            tail.append(line)
            parser.feed(line)
        code = proc.wait()
    finally:
        timer.cancel()
        kill_group(proc.pid)
        proc.wait()
    if timer.finished.is_set() and code == -signal.SIGKILL:
        raise JobTimeoutError(f"accel-sim ran past {timeout_s:g} s on {trace_dir}; its process "
                              "group was killed")
    parser.finish()
    text_tail = "\n".join(tail)[-TAIL_CHARS:]
    failure = failure_message(code, len(parser.kernels), text_tail, paths=paths, kernelslist=kernelslist,
                              library=env.get("LD_LIBRARY_PATH", ""))
    if failure:
        raise AccelSimError(failure, returncode=code, tail=text_tail)
    return list(parser.kernels)


def clean_workdir(path: str | Path) -> None:
    """Remove a simulation's working directory (ignoring what is already gone)."""
    shutil.rmtree(path, ignore_errors=True)


def simulate(binary: str, trace_dir: str, config_files: list[str] | AccelSimGPUConfig, *,
             timeout_s: float = 3600.0, env: dict[str, str] | None = None) -> AccelSimConfig:
    """Run Accel-Sim to completion (:func:`run_accelsim_blocking`) and return the
    :class:`~cascade.engine.accelsim.AccelSimConfig` that hands its cycles to
    ``predict(..., model="accel-sim", config=...)``: kernels by the ``kernel-N`` file Accel-Sim
    processed, else by their kernelslist order, else by launch uid."""
    sims = run_accelsim_blocking(binary, trace_dir, config_files, timeout_s=timeout_s, env=env)
    listed = listed_ids((Path(trace_dir) / "kernelslist.g").read_text(errors="replace"))
    cycles: dict[int, int] = {}
    for k in sims:
        by_list = listed[k.uid - 1] if 0 < k.uid <= len(listed) else k.uid
        cycles[int(k.kernel_id if k.kernel_id is not None else by_list)] = k.cycles
    return AccelSimConfig(simulated_cycles={str(k): c for k, c in cycles.items()},
                          core_clock_mhz=sims[0].core_clock_mhz)
