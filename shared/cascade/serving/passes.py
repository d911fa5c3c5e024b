"""Step plans and the bookkeeping every scheduler of :mod:`cascade.serving.sim` shares: a
replica's state, a plan of one or more steps, a pure-decode run extended while nothing can
change, and applying a finished plan to its requests."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from cascade.serving.sim import Simulation


class Plan:
    """Steps a scheduler planned on one replica: the requests and tokens each step runs
    (``sched``), the steps' start and end times, whether it is a run of pure decodes
    (``chunk``: ``comps`` the requests' computed tokens at its start) and the KV blocks in use
    at its start."""

    __slots__ = ("chunk", "comps", "ends", "k", "sched", "starts", "used_start")

    def __init__(self, sched: list[tuple[int, int]], starts: list[float], ends: list[float],
                 chunk: bool, used_start: int, comps: list[int] | None = None) -> None:
        self.sched = sched
        self.k = len(ends)
        self.starts = starts
        self.ends = ends
        self.chunk = chunk
        self.used_start = used_start
        self.comps = comps


class Replica:
    """State of one replica (engine) during a simulation."""

    __slots__ = (
        "busy",
        "busy_ns",
        "ends",
        "free",
        "index",
        "kv_area",
        "kv_max",
        "last_end",
        "last_start",
        "num_blocks",
        "plan",
        "preemptions",
        "running",
        "steps_log",
        "version",
        "waiting",
    )

    def __init__(self, index: int, num_blocks: int) -> None:
        self.index = index
        self.num_blocks = num_blocks
        self.free = num_blocks
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.busy = False
        self.plan: Plan | None = None
        self.version = 0
        self.ends: list[float] = []
        self.kv_area = 0.0
        self.kv_max = 0
        self.busy_ns = 0.0
        self.preemptions = 0
        self.steps_log: list[tuple[float, float, int, int, int]] = []
        self.last_start = -math.inf
        """Start and end of the replica's last finished step (async scheduling: a request that
        arrived between them came after the next step was already built)."""
        self.last_end = -math.inf


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def decode_run(sim: Simulation, rep: Replica, t: float, sched: list[tuple[int, int]], nb: int, bctx: int,
               used: int) -> Plan:
    """A pure decode of every running request (``sched``: each with one token), extended over
    as many steps as nothing can change in: no request finishes before the last and every
    request's next blocks fit the free ones."""
    comp, held, out, target = sim.comp, sim.held, sim.out, sim.target
    bs = sim.bs
    running = rep.running
    cost = sim.cost
    ext = sim.extents
    free = rep.free
    k_fin = min(target[rid] - out[rid] for rid in running)
    comps = [comp[rid] for rid in running]
    k = 1
    if k_fin > 1:
        held_now = sum(held[rid] for rid in running)
        lo, hi = 1, k_fin
        while lo < hi:
            mid = (lo + hi + 1) // 2
            extra = sum(cdiv(c + mid, bs) for c in comps) - held_now
            if extra <= free:
                lo = mid
            else:
                hi = mid - 1
        k = lo
    if k == 1:
        d = cost.mixed_step_ns((), nb, bctx)
        return Plan(sched, [t], [t + d], True, used, comps)
    durs = cost.decode_steps_ns(np.full(k, nb, dtype=float),
                                bctx + nb * np.arange(k, dtype=float))
    ends = t + np.cumsum(durs)
    starts = np.concatenate(([t], ends[:-1]))
    top = max(comps) + k
    ext.decode_context[1] = max(ext.decode_context[1], top)
    return Plan(sched, starts.tolist(), ends.tolist(), True, used, comps)


def advance(sim: Simulation, rep: Replica, plan: Plan) -> list[int]:
    """Apply a finished plan's steps to its requests (computed tokens, output tokens, blocks
    held, emitted token steps); the requests that produced their last token."""
    comp, ntok, held, out, target = sim.comp, sim.ntok, sim.held, sim.out, sim.target
    bs = sim.bs
    k = plan.k
    idx0 = len(rep.ends)
    rep.ends.extend(plan.ends[:k])
    finished: list[int] = []
    if plan.chunk:
        free = rep.free
        for rid, _ in plan.sched:
            c = comp[rid] + k
            comp[rid] = c
            out[rid] += k
            ntok[rid] += k
            nh = cdiv(c, bs)
            free -= nh - held[rid]
            held[rid] = nh
            sim.emit(rid, idx0, idx0 + k - 1)
            if out[rid] == target[rid]:
                finished.append(rid)
        rep.free = free
    else:
        ranges = sim.ranges
        prev = idx0 - 1
        for rid, nt in plan.sched:
            c = comp[rid] + nt
            comp[rid] = c
            if c >= ntok[rid]:
                o = out[rid] + 1
                out[rid] = o
                ntok[rid] += 1
                rg = ranges[rid]
                if rg and rg[-1] == prev:
                    rg[-1] = idx0
                else:
                    rg.append(idx0)
                    rg.append(idx0)
                if o == target[rid]:
                    finished.append(rid)
    return finished


def retire(sim: Simulation, rep: Replica, plan: Plan, finished: list[int], t: float) -> None:
    """Account a finished plan's busy time and KV area; free the finished requests' blocks."""
    sim.account(rep, plan, rep.num_blocks - rep.free)
    if finished:
        gone = set(finished)
        rep.running = [r for r in rep.running if r not in gone]
        for rid in finished:
            rep.free += sim.held[rid]
            sim.held[rid] = 0
            sim.finish_request(rid, t)


def log_steps(sim: Simulation, rep: Replica, plan: Plan, idx0: int) -> None:
    """Record a finished plan's steps (start, end, tokens, sequences, blocks in use)."""
    bs = sim.bs
    if plan.chunk and plan.comps is not None:
        for j in range(plan.k):
            used = sum(cdiv(c + j + 1, bs) for c in plan.comps)
            rep.steps_log.append((plan.starts[j], plan.ends[j], len(plan.comps),
                                  len(plan.comps), used))
    else:
        toks = sum(nt for _, nt in plan.sched)
        rep.steps_log.append((plan.starts[0], plan.ends[0], toks, len(plan.sched),
                              rep.num_blocks - rep.free))
