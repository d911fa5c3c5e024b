"""Timeline replay: put predicted GPU durations back on the traced host timeline.

Device start = max(host launch, stream free); the host keeps its measured
launch times, except that after a synchronisation (``sync_after``) it resumes
when the simulated device finishes instead of when the measured one did, which
shifts every later launch by the accumulated difference. Between syncs the
schedule is computed per stream with a cumulative maximum (no Python loop per kernel).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from cascade.errors import ValidationError
from cascade.kerneltable import KernelTable


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Per-step results (arrays, one entry per step in first-launch order)."""

    step: np.ndarray
    kind: np.ndarray
    tokens: np.ndarray
    context: np.ndarray
    kernels: np.ndarray
    """Kernels in the step."""
    start_ns: np.ndarray
    """First host launch of the step (simulated host timeline)."""
    end_ns: np.ndarray
    """Last device end of the step."""
    duration_ns: np.ndarray
    """end_ns - start_ns."""
    gpu_ns: np.ndarray
    """Sum of the step's kernel durations (device busy time)."""
    host_ns: np.ndarray
    """Host span of the step's launches (first to last launch call), kept from the trace."""

    def as_rows(self) -> list[dict[str, object]]:
        """One dict per step (JSON-friendly)."""
        return [
            {"step": int(self.step[i]), "kind": str(self.kind[i]), "tokens": int(self.tokens[i]),
             "context": int(self.context[i]), "kernels": int(self.kernels[i]),
             "start_ns": float(self.start_ns[i]), "end_ns": float(self.end_ns[i]),
             "duration_ns": float(self.duration_ns[i]), "gpu_ns": float(self.gpu_ns[i]),
             "host_ns": float(self.host_ns[i])}
            for i in range(len(self.step))
        ]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A replayed timeline."""

    host_launch_ns: np.ndarray
    """Host launch time of each kernel on the simulated timeline."""
    start_ns: np.ndarray
    end_ns: np.ndarray
    duration_ns: np.ndarray
    steps: StepTimes
    end_to_end_ns: float
    """Last device end minus the first host launch."""
    gpu_busy_ns: float
    """Sum of all kernel durations."""


def _schedule(h: np.ndarray, d: np.ndarray, streams: np.ndarray, free: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """start/end of a sync-free segment: per stream, start_i = max(h_i, end_{i-1})."""
    start = np.empty(len(h))
    uniq = np.unique(streams)
    for s in uniq:
        idx = np.flatnonzero(streams == s) if len(uniq) > 1 else np.arange(len(h))
        dd = d[idx]
        before = np.cumsum(dd) - dd
        base = np.maximum.accumulate(h[idx] - before)
        base = np.maximum(base, free.get(int(s), -np.inf))
        start[idx] = base + before
        free[int(s)] = float(start[idx[-1]] + dd[-1])
    return start, start + d


def _run(h: np.ndarray, d: np.ndarray, streams: np.ndarray, sync: np.ndarray,
         orig_end: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Schedule with host shifts after syncs. ``orig_end`` = measured device ends
    (None: this is the measured schedule itself, so shifts are zero)."""
    n = len(h)
    start = np.empty(n)
    host = h.copy()
    free: dict[int, float] = {}
    cuts = np.flatnonzero(sync) + 1
    bounds = [0, *cuts.tolist(), n] if len(cuts) else [0, n]
    delay = 0.0
    resume = -np.inf
    sim_end_so_far = -np.inf
    orig_end_so_far = -np.inf
    for a, b in itertools.pairwise(bounds):
        if a >= b:
            continue
        host[a:b] = np.maximum(h[a:b] + delay, resume)
        s, e = _schedule(host[a:b], d[a:b], streams[a:b], free)
        start[a:b] = s
        sim_end_so_far = max(sim_end_so_far, float(e.max()))
        if orig_end is not None:
            orig_end_so_far = max(orig_end_so_far, float(np.max(orig_end[a:b])))
        if b - 1 < n and sync[b - 1] and orig_end is not None:
            r_sim = max(sim_end_so_far, float(host[b - 1]))
            r_orig = max(orig_end_so_far, float(h[b - 1]))
            delay = r_sim - r_orig
            resume = r_sim
    return host, start, start + d


def replay(table: KernelTable, predicted_ns: np.ndarray) -> ReplayResult:
    """Replay a traced timeline with predicted kernel durations (see module doc).

    Needs ``host_launch_ns`` (else kernels launch back to back) and uses ``stream``,
    ``sync_after``, ``start_ns``/``duration_ns`` (the measured schedule; reconstructed from
    launches and durations when ``start_ns`` is missing) and the ``step*`` columns.
    Kernels are taken in table order, which must be launch order.
    """
    n = len(table)
    d = np.asarray(predicted_ns, dtype=np.float64)
    if d.shape != (n,):
        raise ValidationError(f"predicted_ns has shape {d.shape}, the table has {n} kernels",
                              field="predicted_ns")
    if n and not np.all(np.isfinite(d) & (d >= 0)):
        raise ValidationError("predicted durations must be finite and >= 0", field="predicted_ns")
    h = table["host_launch_ns"].astype(np.float64)
    if np.isnan(h).all():
        h = np.zeros(n)
    elif np.isnan(h).any():
        bad = int(np.flatnonzero(np.isnan(h))[0])
        raise ValidationError(f"host_launch_ns missing for kernel {bad}", field="host_launch_ns")
    streams = np.maximum(table["stream"], 0)
    sync = table["sync_after"] == 1
    measured_d = table["duration_ns"].astype(np.float64)
    if table.has("start_ns") and not np.isnan(table["start_ns"]).any() and not np.isnan(measured_d).any():
        orig_end = table["start_ns"].astype(np.float64) + measured_d
    elif not np.isnan(measured_d).any():
        _, _, orig_end = _run(h, measured_d, streams, sync, None)
    else:
        orig_end = None
    if orig_end is None:
        host, start, end = _run(h, d, streams, np.zeros(n, dtype=bool), None)
    else:
        host, start, end = _run(h, d, streams, sync, orig_end)
    steps = _steps(table, host, start, end, d)
    e2e = float(end.max() - host.min()) if n else 0.0
    return ReplayResult(host_launch_ns=host, start_ns=start, end_ns=end, duration_ns=d,
                        steps=steps, end_to_end_ns=e2e, gpu_busy_ns=float(d.sum()))


def _steps(table: KernelTable, host: np.ndarray, start: np.ndarray, end: np.ndarray,
           d: np.ndarray) -> StepTimes:
    step = table["step"]
    if len(step) == 0:
        z = np.zeros(0)
        return StepTimes(z.astype(np.int64), z.astype(object), z.astype(np.int64), z.astype(np.int64),
                         z.astype(np.int64), z, z, z, z, z)
    ids, first, inverse = np.unique(step, return_index=True, return_inverse=True)
    order = np.argsort(first)
    ids, first = ids[order], first[order]
    remap = np.empty(len(order), dtype=np.int64)
    remap[order] = np.arange(len(order))
    g = remap[inverse.reshape(-1)]
    k = len(ids)
    s_start = np.full(k, np.inf)
    np.minimum.at(s_start, g, host)
    s_end = np.full(k, -np.inf)
    np.maximum.at(s_end, g, end)
    h_last = np.full(k, -np.inf)
    np.maximum.at(h_last, g, host)
    gpu = np.bincount(g, weights=d, minlength=k)
    count = np.bincount(g, minlength=k)
    return StepTimes(step=ids.astype(np.int64), kind=table["step_kind"][first],
                     tokens=table["step_tokens"][first], context=table["step_context"][first],
                     kernels=count, start_ns=s_start, end_ns=s_end, duration_ns=s_end - s_start,
                     gpu_ns=gpu, host_ns=h_last - s_start)
