"""SGLang's scheduler for the serving simulator (its settings:
:class:`cascade.serving.schedulers.Sglang`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from cascade.serving.passes import Plan, Replica, advance, cdiv, decode_run, log_steps, retire
from cascade.serving.schedulers import Sglang

if TYPE_CHECKING:
    from cascade.serving.sim import Simulation

#: Decode steps of headroom per running request that SGLang's ratio keeps after a retraction
#: (``SGLANG_RETRACT_DECODE_STEPS``).
RETRACT_DECODE_STEPS = 20


class SglangScheduler:
    """SGLang's scheduler (see :class:`cascade.serving.schedulers.Sglang`): a pass is all
    prefill or all decode, a prefill first whenever one can be formed."""

    truncatable = True

    def __init__(self, cfg: Sglang, sim: Simulation) -> None:
        self.cfg = cfg
        self.sim = sim
        self.lookahead = cfg.overlap_schedule
        self.min_ratio = cfg.init_new_token_ratio * cfg.min_new_token_ratio_factor
        self.decay = (cfg.init_new_token_ratio - self.min_ratio) / cfg.new_token_ratio_decay_steps
        n = len(sim.reps)
        self.ratio = [cfg.init_new_token_ratio] * n
        """Per replica, the share of a running request's remaining output its KV room reserves."""
        self.full = [False] * n
        """Per replica, admission stopped (a request did not fit) until one finishes or retracts."""
        self.chunked = [-1] * n
        """Per replica, the request whose prompt is being prefilled in chunks (-1: none)."""
        self.max_running = cfg.max_running_requests or max(1, min(sim.num_blocks * sim.bs // 2, 4096))
        self.deferred = False
        """A waiting request arrived while this pass was being built: the pass is one step."""

    def schedule(self, rep: Replica, t: float) -> Plan | None:
        i = rep.index
        if not rep.running and not rep.waiting and self.chunked[i] < 0:
            self.ratio[i] = self.cfg.init_new_token_ratio  # idle: the reservation starts afresh
            return None
        self.deferred = False
        plan = self._prefill(rep, t)
        if plan is None and rep.running:
            plan = self._decode(rep, t)
            if plan is None:  # every running request retracted: their prompts prefill again
                plan = self._prefill(rep, t)
        return plan

    def _prefill(self, rep: Replica, t: float) -> Plan | None:
        sim, cfg, i = self.sim, self.cfg, rep.index
        comp, ntok, held, out, target = sim.comp, sim.ntok, sim.held, sim.out, sim.target
        bs, clip = sim.bs, cfg.clip_max_new_tokens
        waiting, running = rep.waiting, rep.running
        ch = self.chunked[i]
        if ch < 0 and (not waiting or self.full[i]):
            return None
        free = rep.free
        rem_total = free * bs - self.ratio[i] * sum(min(target[r] - out[r], clip) for r in running)
        rem_chunk, rem_input = cfg.chunked_prefill_size, cfg.max_prefill_tokens
        sched: list[tuple[int, int]] = []
        if ch >= 0:  # the prompt being chunked goes on first, chunk after chunk
            left = ntok[ch] - comp[ch]
            nt = min(left, rem_chunk)
            need = cdiv(comp[ch] + nt, bs) - held[ch]
            if need > free:
                return None
            free -= need
            held[ch] += need
            sched.append((ch, nt))
            rem_chunk -= nt
            rem_input -= nt
            rem_total -= left + min(target[ch] - out[ch], clip)  # its whole prompt's room stays its own
            if nt == left:
                self.chunked[i] = -1
        late = rep.last_start if self.lookahead and (running or sched) else math.inf
        while waiting and rem_chunk > 0 and rem_input > 0 and self.chunked[i] < 0:
            if len(running) + len(sched) >= self.max_running:
                self.full[i] = True
                break
            rid = waiting[0]
            if late < sim.arrival[rid] <= rep.last_end:
                self.deferred = True  # arrived while this pass was being built (overlap schedule)
                break
            left = ntok[rid] - comp[rid]
            reserve = min(target[rid] - out[rid], clip)
            idle = not running and not sched
            # an idle engine takes its head request whenever the whole prompt's blocks fit
            if cdiv(comp[rid] + left, bs) - held[rid] > free or (left + reserve >= rem_total and not idle):
                self.full[i] = True
                break
            nt = min(left, rem_chunk)
            need = cdiv(comp[rid] + nt, bs) - held[rid]
            waiting.popleft()
            free -= need
            held[rid] += need
            sched.append((rid, nt))
            rem_chunk -= nt
            rem_input -= nt
            if nt < left:
                self.chunked[i] = rid
            rem_total -= left + reserve
            if sim.first_sched[rid] < 0:
                sim.first_sched[rid] = t
        if not sched:
            return None
        rep.free = free
        ext = sim.extents
        chunks = [(nt, comp[rid]) for rid, nt in sched]
        for nt, _ in chunks:
            ext.prefill_tokens[1] = max(ext.prefill_tokens[1], nt)
            ext.prefill_tokens[0] = min(ext.prefill_tokens[0], nt)
        d = sim.cost.mixed_step_ns(chunks, 0, 0)
        return Plan(sched, [t], [t + d], False, rep.num_blocks - free)

    def _decode(self, rep: Replica, t: float) -> Plan | None:
        sim, i = self.sim, rep.index
        comp, held, out, target = sim.comp, sim.held, sim.out, sim.target
        bs = sim.bs
        running = rep.running
        need = sum(1 for r in running if comp[r] % bs == 0)
        retracted = False
        while need > rep.free and running:
            # the request with the fewest output tokens goes, the longest prompt on ties
            victim = min(running, key=lambda r: (out[r], -sim.prompt[r]))
            running.remove(victim)
            rep.free += held[victim]
            held[victim] = 0
            comp[victim] = 0
            sim.npre[victim] += 1
            rep.preemptions += 1
            rep.waiting.append(victim)
            retracted = True
            need = sum(1 for r in running if comp[r] % bs == 0)
        if retracted:
            self.full[i] = False
            self.ratio[i] = min(1.0, (sum(out[r] for r in running) + RETRACT_DECODE_STEPS * len(running))
                                / (sum(target[r] for r in running) + 1))
        if not running:
            return None
        sched = [(rid, 1) for rid in running]
        nb = len(running)
        bctx = sum(comp[r] + 1 for r in running)
        ext = sim.extents
        ext.decode_batch[1] = max(ext.decode_batch[1], nb)
        ext.decode_batch[0] = min(ext.decode_batch[0], nb)
        used = rep.num_blocks - rep.free
        # one pass where the next could prefill (a deferred arrival; the queue unlatched by a
        # retraction; a prompt mid-chunk); else every pass until something changes
        if self.deferred or (rep.waiting and not self.full[i]) or self.chunked[i] >= 0 or not sim.fast_forward:
            return Plan(sched, [t], [t + sim.cost.mixed_step_ns((), nb, bctx)], True, used,
                        [comp[r] for r in running])
        return decode_run(sim, rep, t, sched, nb, bctx, used)

    def complete(self, rep: Replica, plan: Plan, t: float) -> None:
        sim, i = self.sim, rep.index
        decode = plan.chunk
        idx0 = len(rep.ends)
        finished = advance(sim, rep, plan)
        if sim.record_steps:
            log_steps(sim, rep, plan, idx0)
        if decode:
            self.ratio[i] = max(self.min_ratio, self.ratio[i] - self.decay * plan.k)
        else:  # prompts whose last chunk ran join the running batch with their first token
            rep.running.extend(rid for rid, _ in plan.sched if sim.comp[rid] >= sim.ntok[rid] - 1
                               and rid != self.chunked[i])
        if finished:
            self.full[i] = False
        retire(sim, rep, plan, finished, t)
