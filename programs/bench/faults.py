"""`cascade bench faults`: SIGKILL parts of a real `cascade up` at random moments, count the damage.

Starts the real command (this venv's interpreter, ``-m programs.cli up``) in a fresh
temporary data directory on free ports (the testbed's :class:`~programs.embedded.testbed.UpStack`), imports one generated Accel-Sim trace
folder and runs it once without a fault (the timing reference), then repeats
trials. Each trial imports a fresh copy of the folder through the real
``cascade import`` and runs it (configs x replicas, paced so a run lasts a few
seconds), and SIGKILLs one part of the stack at a random moment (seeded) of the
upload or of the run; trials take the (fault, phase) pairs of :data:`PHASES` in turn:

- a service process (``ingest``, ``prepare``, ``orchestrator``, ``simulator``,
  ``api``): `cascade up` restarts it;
- ``sim``: one ``services.simulator --once`` process of the local backend, mid-run;
- ``nats`` (nats-server) or ``s3`` (SeaweedFS): `cascade up` restarts it on the same
  ports and data;
- ``stack`` (only when asked for): `cascade up` and every child at once, then a new
  `cascade up` on the same data.

A ``cascade import`` that exits with an error is run again (it resumes the same
trace). Per trial it then checks, against the api, KV and S3:

- the run completed;
- every kernel was prepared exactly once: its unit is ``prepared``, exactly one
  prepared part object exists for it, and the trace's counters equal the kernel count;
- no result is duplicated: per sim at most one ``result.json`` object and at most one
  ``SimCompleted`` event in the ``CASCADE`` stream;
- recovery: from the kill until the killed part runs again and ``/readyz`` answers 200,
  and until the upload or the run progresses again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from programs.embedded.testbed import UpStack

NAME = "faults"
HELP = "SIGKILL services, simulators, nats-server and S3 mid-upload and mid-run; count lost and duplicated work"

#: Faults injected by default, in trial order.
DEFAULT_FAULTS: tuple[str, ...] = ("nats", "s3", "sim", "prepare", "ingest", "orchestrator",
                                   "simulator", "api")
#: Every fault ``--faults`` accepts.
KNOWN_FAULTS: tuple[str, ...] = (*DEFAULT_FAULTS, "stack")
#: When each fault is injected: during the upload (``cascade import`` until the trace is
#: ready), during the run, or both (one trial each).
PHASES: dict[str, tuple[str, ...]] = {
    "nats": ("upload", "run"), "s3": ("upload", "run"), "api": ("upload", "run"),
    "ingest": ("upload",), "prepare": ("upload",),
    "orchestrator": ("run",), "simulator": ("run",), "sim": ("run",), "stack": ("run",),
}
CONFIGS: tuple[str, ...] = ("SM90_H100", "SM80_A100")
FINAL_RUN_STATES = ("completed", "partial", "failed", "cancelled")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench faults``."""
    parser.add_argument("--trials", type=int, default=11,
                        help="fault trials, taking (fault, phase) pairs in turn (default 11: each "
                             "default fault once per phase it applies to)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault timing and phases (0)")
    parser.add_argument("--faults", default=",".join(DEFAULT_FAULTS),
                        help="comma-separated faults, taken in turn (default "
                             f"{','.join(DEFAULT_FAULTS)}; also: stack = a whole-stack crash)")
    parser.add_argument("--kernels", type=int, default=12, help="kernel files per imported trace (12)")
    parser.add_argument("--replicas", type=int, default=2,
                        help=f"replicas per config ({','.join(CONFIGS)}) of every run (2)")
    parser.add_argument("--chunk-delay", type=float, default=0.3,
                        help="seconds a simulator pauses after each chunk, so a run lasts long "
                             "enough to be hit (0.3)")
    parser.add_argument("--ack-wait", type=float, default=5.0,
                        help="CASCADE_JOB_ACK_WAIT_S of the stack: how soon a killed worker's job "
                             "is redelivered (5)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds a trial's upload or run may take before it counts as lost (180)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


class Trial(msgspec.Struct, kw_only=True):
    """What one fault trial did and found."""

    #: Trial number, from 1.
    index: int
    #: What was killed (see the module doc).
    fault: str
    #: "upload" or "run": what was going on when it was killed.
    phase: str
    #: Seconds after the start of the upload or run at which the kill was sent.
    delay_s: float
    #: Pids that got SIGKILL (empty when the target was not running).
    killed: list[int] = []
    #: The kill arrived after the upload or run had already finished.
    late: bool = False
    trace_id: str = ""
    run_id: str = ""
    #: Final state of the run ("" when it never started).
    run_state: str = ""
    #: Times ``cascade import`` had to be run again after exiting with an error.
    import_reruns: int = 0
    #: Kernels of the trace and how many were prepared exactly once.
    kernels: int = 0
    kernels_exactly_once: int = 0
    #: Units prepared more than once (a redelivered job, same output key).
    kernels_reprepared: int = 0
    #: Sims of the run, sims with more than one result object or completion event, without result.
    sims: int = 0
    results_duplicated: int = 0
    results_missing: int = 0
    #: Kill to the killed part running again and /readyz 200 (None: not within the timeout).
    ready_s: float | None = None
    #: Kill to the upload or run progressing again.
    progress_s: float | None = None
    #: Why the trial could not be completed, if it could not.
    error: str = ""


# --------------------------------------------------------------------------- the stack


def _trial_stack(workdir: Path, ack_wait_s: float) -> UpStack:
    """One `cascade up` in ``workdir`` on free ports (the testbed's), with the trials' job
    settings."""
    from programs.embedded.testbed import UpStack

    return UpStack(workdir, samples="false", job_ack_wait_s=f"{ack_wait_s:g}",
                   job_max_deliver="5", reconcile_interval_s="5")


#: The stack ``cascade bench hostile`` runs against too.
_Stack = _trial_stack


# --------------------------------------------------------------------------- processes


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _sim_processes(parent: int | None) -> list[int]:
    """Pids of ``services.simulator --once`` processes (children of ``parent`` when given)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmd = _cmdline(int(entry.name))
        if b"services.simulator" not in cmd or b"--once" not in cmd:
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent is None or ppid == parent:
            found.append(int(entry.name))
    return found


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# --------------------------------------------------------------------------- work


def _import(stack: UpStack, folder: Path, timeout: float, *,
            resume: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "programs.cli", "import", str(folder), "--app", stack.base,
         "--token", stack.token, "--name", folder.name, "--source-gpu", "SM80_A100",
         "--wait", f"{timeout:g}", "--quiet", *(["--resume"] if resume else [])],
        env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trace_id_of(folder: Path) -> str:
    """The trace id `cascade import` remembered for ``folder`` ("" before it made one)."""
    from programs.client import IMPORT_STATE_NAME

    try:
        state = json.loads((folder / IMPORT_STATE_NAME).read_text())
    except (OSError, ValueError):
        return ""
    entries = state.values() if isinstance(state, dict) else ()
    ids = [str(e["trace_id"]) for e in entries if isinstance(e, dict) and e.get("trace_id")]
    return ids[-1] if ids else ""


def _finish_import(stack: UpStack, folder: Path, proc: subprocess.Popen[str], timeout: float,
                   trial: Trial) -> str:
    """Wait for ``proc``; run the import again (it resumes) while it fails; the trace id."""
    deadline = time.monotonic() + timeout
    while True:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        if proc.returncode == 0:
            return out.split()[1].rstrip(":")
        if time.monotonic() > deadline or trial.import_reruns >= 5:
            raise RuntimeError(f"cascade import failed ({proc.returncode}): {err.strip()[-300:]}")
        trial.import_reruns += 1
        while not stack.ready() and time.monotonic() < deadline:
            time.sleep(0.2)
        # the earlier upload may be sealed already (incomplete): --resume finishes that trace
        proc = _import(stack, folder, max(1.0, deadline - time.monotonic()),
                       resume=bool(_trace_id_of(folder)))


def _trace_progress(stack: UpStack, trace_id: str) -> float | None:
    if not trace_id:
        return None
    body = stack.try_api("GET", f"/api/traces/{trace_id}", timeout=2.0)
    if not body:
        return None
    record = body.get("trace", body)
    return float(record.get("files_received") or 0) + float(record.get("kernels_prepared") or 0)


def _start_run(stack: UpStack, trace_id: str, replicas: int, chunk_delay: float) -> str:
    run = stack.api("POST", "/api/runs", {
        "trace_id": trace_id, "configs": list(CONFIGS), "replicas": replicas,
        "options": {"chunk_delay_s": chunk_delay}})
    return str(run["id"])


def _wait_run(stack: UpStack, run_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        body = stack.try_api("GET", f"/api/runs/{run_id}", timeout=5.0)
        if body:
            state = str(body["run"]["state"])
            if state in FINAL_RUN_STATES:
                return state
        time.sleep(0.2)
    return state or "unknown"


# --------------------------------------------------------------------------- one fault


def _inject(stack: UpStack, fault: str, timeout: float,
            busy: frozenset[int] = frozenset()) -> tuple[list[int], Callable[[], bool]]:
    """SIGKILL ``fault``; returns the pids killed and a check "the killed part runs again".

    ``busy``: simulator pids holding a running sim, preferred as the ``sim`` victim."""
    if fault == "sim":
        comps = stack.components()
        orch = comps.get("orchestrator")
        deadline = time.monotonic() + 5.0
        pids: list[int] = []
        while not pids and time.monotonic() < deadline:
            pids = _sim_processes(orch.pid if orch is not None else None)
            if not pids:
                time.sleep(0.05)
        victim = ([p for p in pids if p in busy] or pids)[:1]
        killed = [p for p in victim if _kill(p)]
        return killed, lambda: True
    if fault == "stack":
        orch = stack.components().get("orchestrator")
        killed = stack.crash(children=True,
                             extra=_sim_processes(orch.pid if orch is not None else None))
        restarted: list[bool] = []

        def stack_back() -> bool:
            from programs.embedded.testbed import StackNotUp

            if not restarted:
                restarted.append(True)
                try:
                    stack.start(timeout)
                except StackNotUp as exc:  # no stack to run more trials on
                    raise SystemExit(str(exc)) from exc
            return True

        return killed, stack_back
    comp = stack.kill(fault)
    if comp is None or not comp.pid:
        return [], lambda: True
    old, restarts = comp.pid, comp.restarts
    killed = [old]

    def back() -> bool:
        now = stack.components().get(fault)
        return (now is not None and now.pid not in (None, old) and now.state == "running"
                and now.restarts > restarts)

    return killed, back


def _first_true(check: Callable[[], bool], deadline: float, interval: float = 0.05) -> float | None:
    """Monotonic time at which ``check()`` first returned True (None: not before ``deadline``)."""
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(interval)
    return None


def _recover(stack: UpStack, back: Callable[[], bool], progressed: Callable[[], bool], t_kill: float,
             timeout: float) -> tuple[float | None, float | None]:
    """Seconds from ``t_kill`` until ``back()`` and /readyz 200, and until ``progressed()``;
    both polled at once (a request that hangs through the outage delays only its own probe)."""
    deadline = t_kill + timeout
    with ThreadPoolExecutor(max_workers=2) as pool:
        ready = pool.submit(_first_true, lambda: back() and stack.ready(), deadline)
        moved = pool.submit(_first_true, progressed, deadline)
        at_ready, at_moved = ready.result(), moved.result()
    return (None if at_ready is None else at_ready - t_kill,
            None if at_moved is None else at_moved - t_kill)


def _sim_of_worker(body: Any, pid: int) -> dict[str, Any] | None:
    """The sim of a run body whose current attempt runs in process ``pid``."""
    for sim in (body or {}).get("sims") or []:
        if str(sim.get("worker", "")).endswith(f":{pid}"):
            return dict(sim)
    return None


def _run_progressed(stack: UpStack, run_id: str, before: Any, killed: list[int]) -> Callable[[], bool]:
    """A check "the run moved on since ``before``": for a killed simulator, its sim started a
    new attempt that made progress (or completed); else any sim progressed or the run ended."""
    held = next((s for s in (_sim_of_worker(before, p) for p in killed) if s is not None), None)
    done_before = _progress_value(before)

    def check() -> bool:
        body = stack.try_api("GET", f"/api/runs/{run_id}", timeout=2.0)
        if not body:
            return False
        if body["run"]["state"] in FINAL_RUN_STATES:
            return True
        if held is not None:
            sim = next((s for s in body.get("sims") or [] if s["id"] == held["id"]), None)
            return sim is not None and (sim["state"] == "completed" or (
                sim.get("worker") != held.get("worker") and float(sim.get("kernels_done") or 0) > 0))
        return done_before is None or (_progress_value(body) or 0.0) > done_before

    return check


def _busy_workers(body: Any) -> frozenset[int]:
    """Pids of the simulator processes holding a running sim of a run body."""
    pids = set()
    for sim in (body or {}).get("sims") or []:
        worker = str(sim.get("worker", ""))
        if sim.get("state") == "running" and worker.rpartition(":")[2].isdigit():
            pids.add(int(worker.rpartition(":")[2]))
    return frozenset(pids)


def _progress_value(body: Any) -> float | None:
    if not body:
        return None
    return sum(float(s.get("kernels_done") or 0) + (1000.0 if s.get("state") == "completed" else 0.0)
               for s in body.get("sims") or [])


def _trial(stack: UpStack, template: Path, index: int, fault: str, phase: str, rng: random.Random,
           reference: dict[str, float], args: argparse.Namespace) -> Trial:
    span = reference["upload_s"] if phase == "upload" else reference["run_s"]
    delay = rng.uniform(0.05, 0.8) * span
    trial = Trial(index=index, fault=fault, phase=phase, delay_s=round(delay, 3))
    folder = stack.workdir / f"trial-{index}"
    shutil.copytree(template, folder)
    try:
        proc = _import(stack, folder, args.timeout)
        if phase == "upload":
            time.sleep(delay)
            trial.late = proc.poll() is not None
            before = _trace_progress(stack, _trace_id_of(folder))
            t_kill = time.monotonic()
            trial.killed, back = _inject(stack, fault, args.timeout)

            def upload_progressed() -> bool:
                if proc.poll() is not None:
                    return True
                value = _trace_progress(stack, _trace_id_of(folder))
                return value is not None and (before is None or value > before)

            trial.ready_s, trial.progress_s = _recover(stack, back, upload_progressed, t_kill,
                                                       args.timeout)
        trial.trace_id = _finish_import(stack, folder, proc, args.timeout, trial)
        trial.run_id = _start_run(stack, trial.trace_id, args.replicas, args.chunk_delay)
        if phase == "run":
            time.sleep(delay)
            at_kill = stack.try_api("GET", f"/api/runs/{trial.run_id}", timeout=2.0)
            t_kill = time.monotonic()
            trial.killed, back = _inject(stack, fault, args.timeout, _busy_workers(at_kill))
            trial.late = bool(at_kill) and at_kill["run"]["state"] in FINAL_RUN_STATES
            trial.ready_s, trial.progress_s = _recover(
                stack, back, _run_progressed(stack, trial.run_id, at_kill, trial.killed), t_kill,
                args.timeout)
        trial.run_state = _wait_run(stack, trial.run_id, args.timeout)
        asyncio.run(_check(stack, trial, args.kernels))
    except Exception as exc:  # noqa: BLE001 - a trial that breaks is reported, not fatal
        trial.error = f"{type(exc).__name__}: {exc}"
    return trial


async def _check(stack: UpStack, trial: Trial, kernels: int) -> None:
    """Fill in the exactly-once and duplicate counts from KV, S3 and the event stream."""
    from cascade.platform import subjects
    from cascade.platform.bus import connect
    from cascade.platform.keys import parts_prefix, result_key
    from cascade.platform.storage import Storage
    from cascade.platform.tracestore import TraceStore

    settings = stack.settings()
    bus = await connect(settings, name="cascade-bench-faults")
    try:
        async with Storage.from_settings(settings) as storage:
            store = await TraceStore.open(bus)
            record = await store.get(trial.trace_id)
            units = await store.units(trial.trace_id)
            kernel_units = [u for u in units if u.kind == "kernel"]
            parts: dict[str, int] = {}
            async for info in storage.list(parts_prefix(trial.trace_id)):
                unit = info.key[len(parts_prefix(trial.trace_id)):].split("/", 1)[0]
                parts[unit] = parts.get(unit, 0) + 1
            counters_ok = (record is not None and record.kernels_prepared == kernels
                           and record.kernels_total == kernels and record.kernels_failed == 0)
            trial.kernels = kernels
            trial.kernels_exactly_once = sum(
                1 for u in kernel_units if u.state == "prepared" and parts.get(u.unit, 0) == 1
            ) if counters_ok else 0
            trial.kernels_reprepared = sum(1 for u in kernel_units if u.attempts > 1)
            if not trial.run_id:
                return
            body = stack.api("GET", f"/api/runs/{trial.run_id}")
            sim_ids = [str(s) for s in body["run"]["sim_ids"]]
            trial.sims = len(sim_ids)
            stream = await bus.jsm.stream_info(subjects.EVENTS_STREAM,
                                               subjects_filter=subjects.sim_event("*", "completed"))
            completions = stream.state.subjects or {}
            for sim_id in sim_ids:
                objects = [o.key async for o in storage.list(result_key(trial.run_id, sim_id))]
                events = completions.get(subjects.sim_event(sim_id, "completed"), 0)
                if len(objects) > 1 or events > 1:
                    trial.results_duplicated += 1
                if trial.run_state == "completed" and not objects:
                    trial.results_missing += 1
    finally:
        await bus.close()


# --------------------------------------------------------------------------- figures


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(trials: list[Trial], reference: dict[str, float], args: argparse.Namespace,
             faults: list[str]) -> dict[str, Any]:
    ready = [t.ready_s for t in trials if t.ready_s is not None]
    progress = [t.progress_s for t in trials if t.progress_s is not None]
    return {
        "seed": args.seed, "faults": faults, "trials": len(trials),
        "trials_with_a_kill": sum(1 for t in trials if t.killed),
        "kills_after_the_work_had_finished": sum(1 for t in trials if t.late),
        "runs_completed": sum(1 for t in trials if t.run_state == "completed"),
        "kernels": sum(t.kernels for t in trials),
        "kernels_prepared_exactly_once": sum(t.kernels_exactly_once for t in trials),
        "kernels_reprepared": sum(t.kernels_reprepared for t in trials),
        "sims": sum(t.sims for t in trials),
        "results_duplicated": sum(t.results_duplicated for t in trials),
        "results_missing": sum(t.results_missing for t in trials),
        "import_reruns": sum(t.import_reruns for t in trials),
        "recovery_ready_p50_s": _pct(ready, 0.5), "recovery_ready_p95_s": _pct(ready, 0.95),
        "recovery_ready_max_s": max(ready) if ready else None,
        "recovery_progress_p50_s": _pct(progress, 0.5),
        "recovery_progress_p95_s": _pct(progress, 0.95),
        "not_recovered": sum(1 for t in trials if t.killed and t.ready_s is None),
        "reference": reference,
        "per_trial": [msgspec.to_builtins(t) for t in trials],
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _print(s: dict[str, Any], args: argparse.Namespace) -> None:
    ref = s["reference"]
    print(f"cascade up on fresh data: /readyz 200 in {ref['up_s']:.1f} s; reference import "
          f"({args.kernels} kernel files) {ref['upload_s']:.1f} s, run ({len(CONFIGS)} configs x "
          f"{args.replicas} replicas, chunk delay {args.chunk_delay:g} s) {ref['run_s']:.1f} s")
    print(f"{'#':>2} {'fault':<12} {'phase':<6} {'kill at':>8} {'run':<10} {'once':>6} {'dup':>3} "
          f"{'ready':>8} {'progress':>9}  note")
    for t in s["per_trial"]:
        note = t["error"] or ("kill after the work finished" if t["late"] else "")
        if not t["killed"] and not t["error"]:
            note = "target not running at the kill"
        if t["import_reruns"]:
            note = (note + "; " if note else "") + f"import run again x{t['import_reruns']}"
        print(f"{t['index']:>2} {t['fault']:<12} {t['phase']:<6} {t['delay_s']:>7.2f}s "
              f"{t['run_state'] or '-':<10} {t['kernels_exactly_once']:>3}/{t['kernels']:<2} "
              f"{t['results_duplicated']:>3} {_fmt(t['ready_s']):>8} {_fmt(t['progress_s']):>9}  {note}")
    print(f"trials                        : {s['trials']} (seed {s['seed']}; faults {','.join(s['faults'])})")
    print(f"runs completed                : {s['runs_completed']} of {s['trials']}")
    print(f"kernels prepared exactly once : {s['kernels_prepared_exactly_once']} of {s['kernels']} "
          f"({s['kernels_reprepared']} prepared again after a redelivery, same output)")
    print(f"results duplicated            : {s['results_duplicated']} of {s['sims']} sims "
          f"(missing: {s['results_missing']})")
    print(f"recovery, kill -> killed part up and /readyz 200 : p50 {_fmt(s['recovery_ready_p50_s'])}, "
          f"p95 {_fmt(s['recovery_ready_p95_s'])}, max {_fmt(s['recovery_ready_max_s'])}"
          f" (not recovered: {s['not_recovered']})")
    print(f"recovery, kill -> upload/run progresses again     : p50 "
          f"{_fmt(s['recovery_progress_p50_s'])}, p95 {_fmt(s['recovery_progress_p95_s'])}")


def _faults(text: str) -> list[str]:
    faults = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in faults if f not in KNOWN_FAULTS]
    if unknown or not faults:
        raise SystemExit(f"--faults: unknown {', '.join(unknown) or '(none given)'}; "
                         f"expected a comma-separated list of {', '.join(KNOWN_FAULTS)}")
    return faults


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    from cascade.traces.generate import TraceSpec, write_trace_folder

    faults = _faults(args.faults)
    if args.trials < 1:
        raise SystemExit("--trials: expected an integer >= 1")
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="cascade-bench-faults-"))
    stack = _trial_stack(workdir, args.ack_wait)
    trials: list[Trial] = []
    try:
        template = workdir / "trace-template"
        write_trace_folder(template, [TraceSpec(kernel_id=i, iterations=20 + 4 * i, grid=(8, 2, 1),
                                                block=(128, 1, 1)) for i in range(1, args.kernels + 1)])
        reference = {"up_s": stack.start(args.timeout)}
        folder = workdir / "reference"
        shutil.copytree(template, folder)
        t0 = time.monotonic()
        ref = Trial(index=0, fault="none", phase="", delay_s=0.0)
        trace_id = _finish_import(stack, folder, _import(stack, folder, args.timeout), args.timeout, ref)
        reference["upload_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        state = _wait_run(stack, _start_run(stack, trace_id, args.replicas, args.chunk_delay), args.timeout)
        reference["run_s"] = time.monotonic() - t0
        if state != "completed":
            raise SystemExit(f"the reference run (no fault) ended {state}; see {stack.log}")
        plan = [(f, phase) for f in faults for phase in PHASES[f]]
        for i in range(args.trials):
            fault, phase = plan[i % len(plan)]
            trial = _trial(stack, template, i + 1, fault, phase, rng, reference, args)
            trials.append(trial)
            if not args.json:
                print(f"  trial {trial.index}: {trial.fault} ({trial.phase}) -> run "
                      f"{trial.run_state or '-'}{' ' + trial.error if trial.error else ''}",
                      file=sys.stderr, flush=True)
    finally:
        stack.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    summary = _summary(trials, reference, args, faults)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary, args)
        if args.keep:
            print(f"data and logs kept in {workdir}")
    ok = (summary["runs_completed"] == len(trials) and summary["results_duplicated"] == 0
          and summary["kernels_prepared_exactly_once"] == summary["kernels"])
    return 0 if ok else 1
