"""Discrete-event serving simulator: N replicas behind a router.

Events are ordered by ``(time_ns, priority, seq)``: step ends (and request
finishes) first, then arrivals, then scheduling decisions, so a step that ends
at the instant a request arrives frees its resources before the arrival is
routed, and the next step is planned with both. The simulator owns no clock
but its own event times and draws nothing at random (arrivals and lengths are
drawn before it starts).

A run of pure-decode steps whose composition cannot change (no admission
possible, no request finishing, enough free blocks) is planned as one chunk of
k steps with closed-form step times; an arrival routed to that replica cuts the
chunk at the step in flight, so results are identical to stepping one at a time.

Closed loop (``concurrency`` N, as ``vllm bench serve --max-concurrency N`` with every
request queued at t=0, or aiperf's concurrency mode): N clients each send their next
request the moment their previous one finishes, so never more than N are in flight; a
request's arrival time is the time it was sent, so TTFT leaves out the client-side wait.
A closed loop's warm-up is a phase of its own, as both tools run it: the warm-up requests
are sent, every one of them finishes, and only then do the N clients send their first
measured requests, together again, to an idle engine; that first wave is in the figures.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import numpy as np

from cascade.errors import CascadeError
from cascade.registry import Registry
from cascade.serving.passes import Plan, Replica, advance, cdiv, decode_run, log_steps, retire
from cascade.serving.routers import Router
from cascade.serving.schedulers import Sglang, Static, Vllm
from cascade.serving.sglang import SglangScheduler
from cascade.serving.stepmodel import StepCostModel

PRIO_END = 0
PRIO_ARRIVE = 1
PRIO_SCHEDULE = 2

_EV_END = 0
_EV_FINISH = 1
_EV_SCHEDULE = 2

Progress = Callable[[int, int], None]


class SimulationInvariantError(CascadeError, RuntimeError):
    """The simulator's own bookkeeping went wrong (a bug, never bad input)."""


@dataclass
class StepExtents:
    """Smallest and largest step shapes the simulation asked the step model for."""

    prefill_tokens: list[int] = field(default_factory=lambda: [1 << 62, 0])
    decode_batch: list[int] = field(default_factory=lambda: [1 << 62, 0])
    decode_context: list[int] = field(default_factory=lambda: [1 << 62, 0])


@dataclass
class SimOutcome:
    """Raw per-request and per-replica results (times in ns from the start)."""

    arrival_ns: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    replica: np.ndarray
    first_scheduled_ns: np.ndarray
    first_token_ns: np.ndarray
    finished_ns: np.ndarray
    tokens_emitted: np.ndarray
    preemptions: np.ndarray
    itl_ns: np.ndarray
    """Every inter-token gap of every request, pooled."""
    step_ends: list[np.ndarray]
    token_ranges: list[list[int]]
    """Per request: flat [start, end, start, end, ...] step indices on its replica."""
    replicas: list[Replica]
    extents: StepExtents
    num_blocks: int
    block_size: int
    run_span_ns: float = 0.0
    """First arrival to last finish of every simulated request, a warm-up's included: the
    window the replicas' busy time and KV-cache area were accumulated over."""

    def token_times_ns(self, rid: int) -> np.ndarray:
        """Emission time of every output token of request ``rid``."""
        ends = self.step_ends[int(self.replica[rid])]
        rg = self.token_ranges[rid]
        return np.concatenate([ends[rg[i]: rg[i + 1] + 1] for i in range(0, len(rg), 2)]) \
            if rg else np.zeros(0)


class SchedulerImpl(Protocol):
    truncatable: bool
    lookahead: bool
    """The next step is built while this one runs (vLLM's async scheduling): a request that
    arrives during a step joins the step after the next."""

    def schedule(self, rep: Replica, t: float) -> Plan | None: ...

    def complete(self, rep: Replica, plan: Plan, t: float) -> None: ...


class Simulation:
    """One serving simulation over pre-drawn arrivals and lengths."""

    def __init__(self, *, arrival_ns: np.ndarray, prompt_tokens: np.ndarray,
                 output_tokens: np.ndarray, replicas: int, router: Router,
                 scheduler: msgspec.Struct, cost: StepCostModel, num_blocks: int, block_size: int,
                 record_steps: bool = False, progress: Progress | None = None,
                 progress_every: int = 1000, fast_forward: bool = True,
                 concurrency: int | None = None, client_gap_ns: np.ndarray | None = None,
                 warmup: int = 0) -> None:
        n = len(arrival_ns)
        self.n = n
        if warmup < 0:
            raise SimulationInvariantError(f"warmup must be >= 0, got {warmup}")
        self.warmup = min(warmup, n)
        """The first requests (in index order) are simulated and left out of the outcome: a
        benchmark's warm-up (in a closed loop run to the end before the measured requests
        start, as a benchmark runs it)."""
        self.arrival = np.asarray(arrival_ns, dtype=float).tolist()
        self.prompt = np.asarray(prompt_tokens, dtype=np.int64).tolist()
        self.target = np.asarray(output_tokens, dtype=np.int64).tolist()
        self.comp = [0] * n
        self.ntok = list(self.prompt)
        self.out = [0] * n
        self.held = [0] * n
        self.first_sched = [-1.0] * n
        self.finish = [-1.0] * n
        self.npre = [0] * n
        self.req_replica = [-1] * n
        self.ranges: list[list[int]] = [[] for _ in range(n)]
        self.reps = [Replica(i, num_blocks) for i in range(replicas)]
        self.outstanding = [0] * replicas
        self.router = router
        self.cost = cost
        self.bs = block_size
        self.num_blocks = num_blocks
        self.record_steps = record_steps
        self.fast_forward = fast_forward
        self.progress = progress
        self.progress_every = max(1, progress_every)
        self.done = 0
        self.extents = StepExtents()
        self._heap: list[tuple[float, int, int, int, int, int]] = []
        self._seq = 0
        if concurrency is not None and concurrency < 1:
            raise SimulationInvariantError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        # closed loop: the first `concurrency` requests are sent at their drawn times; each
        # later one when a request finishes (its time unknown until then: +inf). With a warm-up,
        # as `vllm bench serve --num-warmups` and aiperf's --warmup-request-count run it: the
        # warm-up requests alone, every one of them finished (drained), then the measured
        # requests' first wave sent as the first wave was (the same offsets from that instant)
        self._wave = [] if concurrency is None else self.arrival[:min(concurrency, n)]
        self._drain = self.warmup if concurrency is not None and 0 < self.warmup < n else 0
        self._released = n if concurrency is None else min(concurrency, self._drain or n, n)
        self._gap = (np.zeros(n) if client_gap_ns is None else np.asarray(client_gap_ns, dtype=float)).tolist()
        for rid in range(self._released, n):
            self.arrival[rid] = math.inf
        head = np.asarray(self.arrival[:self._released], dtype=float)
        if head.size > 1 and np.any(np.diff(head) < 0):
            rid = int(np.argmax(np.diff(head) < 0)) + 1
            raise SimulationInvariantError(
                f"arrival times must not decrease: request {rid} arrives at {head[rid]:.0f} ns, before "
                f"request {rid - 1} at {head[rid - 1]:.0f} ns (sort the arrivals)")
        _, factory = SCHEDULERS.get(str(type(scheduler).__struct_config__.tag))
        self.sched: SchedulerImpl = factory(scheduler, self)

    # ---- event plumbing ------------------------------------------------------------------
    def push(self, t: float, prio: int, kind: int, a: int, b: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, prio, self._seq, kind, a, b))

    def finish_request(self, rid: int, t: float) -> None:
        self.finish[rid] = t
        self.outstanding[self.req_replica[rid]] -= 1
        self.done += 1
        if self._released == self._drain and self._drain:  # the warm-up's phase
            if self.done == self._drain:  # drained: the measured clients start together again
                for j in range(min(len(self._wave), self.n - self._drain)):
                    self.arrival[self._drain + j] = t + self._wave[j]
                    self._released += 1
        elif self._released < self.n:  # closed loop: that client sends its next request, after its own gap
            # (arrivals are taken in index order: never before the one released before it)
            prev = self.arrival[self._released - 1] if self._released else 0.0
            self.arrival[self._released] = max(t + self._gap[self._released], prev)
            self._released += 1
        if self.progress is not None and self.done % self.progress_every == 0:
            self.progress(self.done, self.n)

    def run(self) -> SimOutcome:
        """Simulate until every request has finished."""
        heap = self._heap
        arrival = self.arrival
        n = self.n
        ai = 0
        reps = self.reps
        sched = self.sched
        while True:
            if ai < n:
                ta = arrival[ai]
                if ta != math.inf and (not heap or ta < heap[0][0]
                                       or (ta == heap[0][0] and heap[0][1] > PRIO_ARRIVE)):
                    self._arrive(ai, ta)
                    ai += 1
                    continue
            if not heap:
                break
            t, _prio, _s, kind, a, b = heapq.heappop(heap)
            if kind == _EV_END:
                rep = reps[a]
                done = rep.plan
                if b != rep.version or done is None:
                    continue
                rep.plan = None
                rep.last_start = done.starts[done.k - 1]
                rep.last_end = t
                sched.complete(rep, done, t)
                self.push(t, PRIO_SCHEDULE, _EV_SCHEDULE, a, 0)
            elif kind == _EV_SCHEDULE:
                rep = reps[a]
                plan = sched.schedule(rep, t)
                if plan is None:
                    rep.busy = False
                else:
                    rep.plan = plan
                    rep.version += 1
                    self.push(plan.ends[-1], PRIO_END, _EV_END, a, rep.version)
            else:
                self.finish_request(a, t)
        if self.done != n:
            raise SimulationInvariantError(f"{n - self.done} requests never finished")
        if self.progress is not None and n % self.progress_every:
            self.progress(self.done, n)
        return self._outcome()

    def _arrive(self, rid: int, t: float) -> None:
        r = self.router.choose(self.outstanding)
        rep = self.reps[r]
        self.req_replica[rid] = r
        self.outstanding[r] += 1
        rep.waiting.append(rid)
        if not rep.busy:
            rep.busy = True
            self.push(t, PRIO_SCHEDULE, _EV_SCHEDULE, r, 0)
            return
        plan = rep.plan
        if plan is not None and plan.k > 1 and self.sched.truncatable:
            # steps starting before t are under way; the first step always is (it began when
            # the plan was made, possibly at this very instant)
            keep = max(1, bisect_left(plan.starts, t))
            if self.sched.lookahead:  # async scheduling: the step after the current one is built already
                keep += 1
            if keep < plan.k:
                plan.k = keep
                del plan.ends[keep:]
                del plan.starts[keep:]
                rep.version += 1
                self.push(plan.ends[-1], PRIO_END, _EV_END, r, rep.version)

    # ---- shared bookkeeping for schedulers --------------------------------------------------
    def emit(self, rid: int, first: int, last: int) -> None:
        """Request ``rid`` emitted one token at each step index first..last of its replica."""
        rg = self.ranges[rid]
        if rg and rg[-1] == first - 1:
            rg[-1] = last
        else:
            rg.append(first)
            rg.append(last)

    def account(self, rep: Replica, plan: Plan, used_end: int) -> None:
        dt = plan.ends[plan.k - 1] - plan.starts[0]
        rep.busy_ns += dt
        rep.kv_area += 0.5 * (plan.used_start + used_end) * dt
        rep.kv_max = max(rep.kv_max, used_end)
        rep.kv_max = max(rep.kv_max, plan.used_start)
        if rep.free < 0 or used_end > rep.num_blocks:
            raise SimulationInvariantError(
                f"replica {rep.index}: {rep.num_blocks - rep.free} KV blocks in use, "
                f"capacity {rep.num_blocks}")

    def _outcome(self) -> SimOutcome:
        """The measured requests' outcome (the warm-up's left out: their inter-token gaps too)."""
        w = self.warmup
        n = self.n - w
        step_ends = [np.asarray(rep.ends, dtype=float) for rep in self.reps]
        first = np.empty(n)
        last = np.empty(n)
        emitted = np.zeros(n, dtype=np.int64)
        pieces: list[np.ndarray] = []
        counts = [np.zeros(len(e) + 1, dtype=np.int64) for e in step_ends]
        for rid in range(n):
            rg = self.ranges[w + rid]
            ends = step_ends[self.req_replica[w + rid]]
            if not rg:
                first[rid] = last[rid] = np.nan
                continue
            first[rid] = ends[rg[0]]
            last[rid] = ends[rg[-1]]
            cnt = counts[self.req_replica[w + rid]]
            tot = 0
            for i in range(0, len(rg), 2):
                s, e = rg[i], rg[i + 1]
                tot += e - s + 1
                cnt[s + 1] += 1
                cnt[e + 1] -= 1
                if i:
                    pieces.append(np.array([ends[s] - ends[rg[i - 1]]]))
            emitted[rid] = tot
        for ends, cnt in zip(step_ends, counts, strict=False):
            mult = np.cumsum(cnt)[1:len(ends)]
            if len(ends) > 1:
                pieces.append(np.repeat(np.diff(ends), mult))
        itl = np.concatenate(pieces) if pieces else np.zeros(0)
        return SimOutcome(
            arrival_ns=np.asarray(self.arrival[w:]), prompt_tokens=np.asarray(self.prompt[w:]),
            output_tokens=np.asarray(self.target[w:]), replica=np.asarray(self.req_replica[w:]),
            first_scheduled_ns=np.asarray(self.first_sched[w:]), first_token_ns=first,
            finished_ns=np.asarray(self.finish[w:]), tokens_emitted=emitted,
            preemptions=np.asarray(self.npre[w:]), itl_ns=itl, step_ends=step_ends,
            token_ranges=self.ranges[w:], replicas=self.reps, extents=self.extents,
            num_blocks=self.num_blocks, block_size=self.bs,
            run_span_ns=(max(self.finish) - min(self.arrival)) if self.n else 0.0)


class VllmScheduler:
    """vLLM v1 continuous batching (see :class:`cascade.serving.schedulers.Vllm`)."""

    truncatable = True

    def __init__(self, cfg: Vllm, sim: Simulation) -> None:
        self.cfg = cfg
        self.budget, self.max_seqs = cfg.limits
        self.sim = sim
        self.lookahead = cfg.async_scheduling

    def schedule(self, rep: Replica, t: float) -> Plan | None:
        sim = self.sim
        cfg = self.cfg
        bs = sim.bs
        comp, ntok, held, out = sim.comp, sim.ntok, sim.held, sim.out
        budget = self.budget
        thr = cfg.long_prefill_token_threshold
        free = rep.free
        running = rep.running
        waiting = rep.waiting
        sched: list[tuple[int, int]] = []
        preempted = False
        i = 0
        nrun = len(running)
        while i < nrun and budget > 0:
            rid = running[i]
            c = comp[rid]
            nt = ntok[rid] - c
            if nt == 1:
                if c % bs:
                    sched.append((rid, 1))
                    budget -= 1
                    i += 1
                    continue
                need = 1
            else:
                if thr and nt > thr:
                    nt = thr
                nt = min(nt, budget)
                need = -(-(c + nt) // bs) - held[rid]
            ok = True
            while need > free:
                victim = running.pop()
                free += held[victim]
                held[victim] = 0
                comp[victim] = 0
                sim.npre[victim] += 1
                rep.preemptions += 1
                waiting.appendleft(victim)
                preempted = True
                if victim == rid:
                    ok = False
                    break
            if not ok:
                break
            nrun = len(running)
            free -= need
            held[rid] += need
            sched.append((rid, nt))
            budget -= nt
            i += 1
        admitted = False
        deferred = False
        if not preempted:
            max_seqs = self.max_seqs
            chunked = cfg.enable_chunked_prefill
            # async scheduling: this step was built while the last one ran, so whoever arrived
            # during that one waits for the next (unless nothing else would run: an idle engine
            # builds a step at once)
            late = rep.last_start if self.lookahead and sched else math.inf
            while waiting and budget > 0 and len(running) < max_seqs:
                rid = waiting[0]
                if late < sim.arrival[rid] <= rep.last_end:
                    deferred = True
                    break
                nt = ntok[rid] - comp[rid]
                if not chunked and nt > budget:
                    break
                if thr and nt > thr:
                    nt = thr
                nt = min(nt, budget)
                need = cdiv(comp[rid] + nt, bs) - held[rid]
                if need > free:
                    break
                waiting.popleft()
                running.append(rid)
                free -= need
                held[rid] += need
                sched.append((rid, nt))
                budget -= nt
                admitted = True
                if sim.first_sched[rid] < 0:
                    sim.first_sched[rid] = t
        rep.free = free
        if not sched:
            return None
        ext = sim.extents
        ptok = 0
        chunks: list[tuple[int, int]] = []
        nb = 0
        bctx = 0
        for rid, nt in sched:
            c = comp[rid] + nt
            if nt == 1 and out[rid] > 0:
                nb += 1
                bctx += c
                ext.decode_context[1] = max(ext.decode_context[1], c)
                ext.decode_context[0] = min(ext.decode_context[0], c)
            else:
                ptok += nt
                chunks.append((nt, comp[rid]))
                ext.prefill_tokens[1] = max(ext.prefill_tokens[1], nt)
                ext.prefill_tokens[0] = min(ext.prefill_tokens[0], nt)
        if nb:
            ext.decode_batch[1] = max(ext.decode_batch[1], nb)
            ext.decode_batch[0] = min(ext.decode_batch[0], nb)
        cost = sim.cost
        used = rep.num_blocks - free
        if preempted or admitted or deferred or ptok or nb != len(running) or not sim.fast_forward:
            d = cost.mixed_step_ns(chunks, nb, bctx)
            return Plan(sched, [t], [t + d], False, used)
        return decode_run(sim, rep, t, sched, nb, bctx, used)

    def complete(self, rep: Replica, plan: Plan, t: float) -> None:
        idx0 = len(rep.ends)
        finished = advance(self.sim, rep, plan)
        if self.sim.record_steps:
            log_steps(self.sim, rep, plan, idx0)
        retire(self.sim, rep, plan, finished, t)

class StaticScheduler:
    """Fixed batches run to completion (see :class:`cascade.serving.schedulers.Static`)."""

    truncatable = False
    lookahead = False

    def __init__(self, cfg: Static, sim: Simulation) -> None:
        self.cfg = cfg
        self.sim = sim

    def schedule(self, rep: Replica, t: float) -> Plan | None:
        sim = self.sim
        waiting = rep.waiting
        batch: list[int] = []
        free = rep.free
        while waiting and len(batch) < self.cfg.batch_size:
            rid = waiting[0]
            need = cdiv(sim.prompt[rid] + sim.target[rid], sim.bs)
            if need > free:
                break
            waiting.popleft()
            free -= need
            sim.held[rid] = need
            batch.append(rid)
            sim.first_sched[rid] = t
        if not batch:
            return None
        rep.free = free
        p = np.array([sim.prompt[r] for r in batch], dtype=float)
        o = np.array([sim.target[r] for r in batch], dtype=np.int64)
        cost = sim.cost
        steps = int(o.max())
        durs = np.empty(steps)
        durs[0] = cost.mixed_step_ns([(int(x), 0) for x in p.tolist()], 0, 0)
        if steps > 1:
            j = np.arange(1, steps, dtype=float)
            if self.cfg.drop_finished:
                order = np.argsort(o, kind="stable")
                o_sorted = o[order]
                p_suffix = np.concatenate([np.cumsum(p[order][::-1])[::-1], [0.0]])
                first_active = np.searchsorted(o_sorted, j, side="right")
                nb = len(o) - first_active
                bctx = p_suffix[first_active] + nb * j
            else:
                nb = np.full(steps - 1, len(o), dtype=float)
                bctx = p.sum() + len(o) * j
            durs[1:] = cost.decode_steps_ns(nb, bctx)
        ends = t + np.cumsum(durs)
        starts = np.concatenate(([t], ends[:-1]))
        ext = sim.extents
        ext.prefill_tokens[0] = min(ext.prefill_tokens[0], int(p.min()))
        ext.prefill_tokens[1] = max(ext.prefill_tokens[1], int(p.max()))
        if steps > 1:
            ext.decode_batch[0] = min(ext.decode_batch[0], len(o) if not self.cfg.drop_finished
                                      else 1)
            ext.decode_batch[1] = max(ext.decode_batch[1], len(o))
            ext.decode_context[0] = min(ext.decode_context[0], int(p.min()) + 1)
            ext.decode_context[1] = max(ext.decode_context[1], int(p.max()) + steps - 1)
        endl = ends.tolist()
        for rid, oi in zip(batch, o.tolist(), strict=False):
            sim.push(endl[oi - 1], PRIO_END, _EV_FINISH, rid, 0)
        used = rep.num_blocks - free
        return Plan([(rid, 0) for rid in batch], starts.tolist(), endl, False, used)

    def complete(self, rep: Replica, plan: Plan, t: float) -> None:
        sim = self.sim
        idx0 = len(rep.ends)
        rep.ends.extend(plan.ends)
        for rid, _ in plan.sched:
            o = sim.target[rid]
            sim.out[rid] = o
            sim.emit(rid, idx0, idx0 + o - 1)
        if sim.record_steps:
            used = rep.num_blocks - rep.free
            for j in range(plan.k):
                rep.steps_log.append((plan.starts[j], plan.ends[j], 0, len(plan.sched), used))
        sim.account(rep, plan, plan.used_start)
        for rid, _ in plan.sched:
            rep.free += sim.held[rid]
            sim.held[rid] = 0


SchedulerFactory = Callable[[msgspec.Struct, Simulation], SchedulerImpl]

SCHEDULERS: Registry[SchedulerFactory] = Registry("scheduler")
SCHEDULERS.register("vllm", Vllm, VllmScheduler)  # type: ignore[arg-type]
SCHEDULERS.register("static", Static, StaticScheduler)  # type: ignore[arg-type]
SCHEDULERS.register("sglang", Sglang, SglangScheduler)  # type: ignore[arg-type]
