"""A run's progress events, read from the ``CASCADE`` JetStream stream: the read model of the
api's ``GET /api/runs/{id}/events``.

:class:`EventFeed` takes a set of subjects through one ephemeral consumer and survives the loss
of its NATS node; :func:`sim_event_data` / :func:`run_event_data` turn sim and run events into
the record fields they change (:class:`SimEventData`, :class:`RunEventData`); :class:`RunFollower`
follows one run from a stream sequence until its final event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Literal

import msgspec
import nats.errors
import nats.js.errors
from msgspec.structs import replace
from nats.js import api as jsapi

from cascade.errors import ValidationError
from cascade.platform import subjects
from cascade.platform.messages.run import (
    RunCancelRequested,
    RunCompleted,
    RunFailed,
    RunStateChanged,
    decode_run_event,
)
from cascade.platform.messages.sim import (
    KernelSimulated,
    SimCancelled,
    SimCompleted,
    SimFailed,
    SimProgress,
    SimQueued,
    SimStarted,
    decode_sim_event,
)
from cascade.platform.state import TERMINAL_RUN_STATES, RunRecord, SimStateName

#: Seconds without a message after which a feed asks whether its consumer still exists.
CONSUMER_CHECK_S = 3.0
#: Seconds a follower waits for its lost consumer to come back before it ends (the client then
#: reconnects, to this replica or another, with the last event id it got).
FEED_LOST_S = 30.0
#: Seconds between KV reads of a quiet run's record (a run that ended without its event in reach).
RUN_CHECK_S = 2.0


class SimEventData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``event: sim``: a sim event as the SimRecord fields it changes."""

    id: str
    run_id: str
    type: str
    """The event's tag (``sim.progress.v1``, ...)."""
    at: float
    state: SimStateName | msgspec.UnsetType = msgspec.UNSET
    config: str | msgspec.UnsetType = msgspec.UNSET
    replica: int | msgspec.UnsetType = msgspec.UNSET
    percent: float | msgspec.UnsetType = msgspec.UNSET
    attempts: int | msgspec.UnsetType = msgspec.UNSET
    worker: str | msgspec.UnsetType = msgspec.UNSET
    kernels_total: int | msgspec.UnsetType = msgspec.UNSET
    kernels_done: int | msgspec.UnsetType = msgspec.UNSET
    simulated_ns: float | msgspec.UnsetType = msgspec.UNSET
    eta_s: float | None | msgspec.UnsetType = msgspec.UNSET
    kernel: KernelSimulated | msgspec.UnsetType = msgspec.UNSET
    result_key: str | msgspec.UnsetType = msgspec.UNSET
    predicted_e2e_ns: float | None | msgspec.UnsetType = msgspec.UNSET
    error: str | None | msgspec.UnsetType = msgspec.UNSET


class RunEventData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``event: run`` from the event log: the run fields it changes."""

    id: str
    type: str
    at: float
    state: str | msgspec.UnsetType = msgspec.UNSET
    previous: str | None | msgspec.UnsetType = msgspec.UNSET
    reason: str | msgspec.UnsetType = msgspec.UNSET
    sims_completed: int | msgspec.UnsetType = msgspec.UNSET
    sims_failed: int | msgspec.UnsetType = msgspec.UNSET
    error: str | msgspec.UnsetType = msgspec.UNSET
    cancel_requested: bool | msgspec.UnsetType = msgspec.UNSET


def sim_event_data(data: bytes) -> SimEventData | None:
    """A sim event as the SimRecord-like fields the UI merges into its row (None: not shown)."""
    ev = decode_sim_event(data)
    base = SimEventData(id=ev.sim_id, run_id=ev.run_id, type=str(type(ev).__struct_config__.tag), at=ev.at)
    match ev:
        case SimQueued():
            return replace(base, state="queued", config=ev.config, replica=ev.replica, percent=0.0)
        case SimStarted():
            return replace(base, state="running", attempts=ev.attempt, worker=ev.worker,
                           kernels_total=ev.kernels_total or msgspec.UNSET)
        case SimProgress():
            return replace(base, state="running", percent=ev.percent, kernels_done=ev.kernels_done,
                           kernels_total=ev.kernels_total, simulated_ns=ev.simulated_ns, eta_s=ev.eta_s,
                           attempts=ev.attempt, kernel=ev.kernel if ev.kernel is not None else msgspec.UNSET)
        case SimCompleted():
            return replace(base, state="completed", percent=100.0, eta_s=0.0, result_key=ev.result_key,
                           predicted_e2e_ns=ev.predicted_e2e_ns, attempts=ev.attempt, simulated_ns=ev.simulated_ns)
        case SimFailed():
            return replace(base, state="failed", error=ev.error, attempts=ev.attempts, eta_s=None)
        case SimCancelled():
            return replace(base, state="cancelled", error=ev.reason or None, eta_s=None)
        case _:
            return None


def run_event_data(data: bytes) -> RunEventData | None:
    """A run event as ``{"id", "state", ...}`` (None for the request itself)."""
    ev = decode_run_event(data)
    base = RunEventData(id=ev.run_id, type=str(type(ev).__struct_config__.tag), at=ev.at)
    match ev:
        case RunStateChanged():
            return replace(base, state=ev.state, previous=ev.previous, reason=ev.reason)
        case RunCompleted():
            return replace(base, state="partial" if ev.sims_failed and ev.sims_completed else "completed",
                           sims_completed=ev.sims_completed, sims_failed=ev.sims_failed)
        case RunFailed():
            return replace(base, state="failed", error=ev.error)
        case RunCancelRequested():
            return replace(base, cancel_requested=True, reason=ev.reason)
        case _:
            return None


class EventFeed:
    """Events of some subjects from the CASCADE stream through one ephemeral consumer (memory,
    one replica: it lives on one NATS node). When that node goes away (a cluster node lost, the
    server restarted) the consumer is opened again right after the last sequence taken, so the
    reader goes on without a gap or a repeat."""

    def __init__(self, bus: Any, filters: list[str], start_seq: int | None) -> None:
        self.bus = bus
        self.filters = filters
        self.next_seq = start_seq
        """Sequence to start from when (re)opened (None: the stream's first)."""
        self.name = ""
        self.sub: Any = None
        self.broken_since: float | None = None
        self.checked_at = time.monotonic()

    async def open(self) -> None:
        config = jsapi.ConsumerConfig(
            ack_policy=jsapi.AckPolicy.NONE,
            deliver_policy=(jsapi.DeliverPolicy.BY_START_SEQUENCE if self.next_seq
                            else jsapi.DeliverPolicy.ALL),
            opt_start_seq=self.next_seq,
            filter_subjects=self.filters,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        info = await self.bus.jsm.add_consumer(subjects.EVENTS_STREAM, config=config)
        self.name = info.name
        self.bus.stats.consumer_opened("events")
        try:
            self.sub = await self.bus.js.pull_subscribe_bind(
                durable=None, stream=subjects.EVENTS_STREAM, name=self.name)
        except BaseException:
            await self.close()
            raise
        self.broken_since = None

    async def close(self) -> None:
        if not self.name:
            return
        self.bus.stats.consumer_closed("events")
        name, sub = self.name, self.sub
        self.name, self.sub = "", None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await self.bus.jsm.delete_consumer(subjects.EVENTS_STREAM, name)

    async def fetch(self) -> list[Any]:
        """The next messages (none after a second without any); a lost consumer is replaced."""
        if self.sub is None:
            try:
                await self.open()
            except (nats.errors.Error, TimeoutError, OSError):
                await asyncio.sleep(0.5)
                return []
        try:
            msgs = await self.sub.fetch(256, timeout=1.0)
        except (TimeoutError, nats.errors.TimeoutError):
            # a consumer whose node restarted is gone without an error on fetch: ask for it
            if time.monotonic() - self.checked_at >= CONSUMER_CHECK_S and not await self.alive():
                await self._lost()
            return []
        except (nats.errors.Error, OSError):
            await self._lost()
            return []
        self.checked_at = time.monotonic()
        fresh = [m for m in msgs if self.next_seq is None
                 or m.metadata.sequence.stream >= self.next_seq]
        if len(fresh) < len(msgs):
            # a memory consumer its restarted node made again replays from its first sequence:
            # what was sent already is dropped, and the feed starts over after it
            await self._lost()
        if fresh:
            self.next_seq = fresh[-1].metadata.sequence.stream + 1
        return fresh

    async def alive(self) -> bool:
        """Whether the server still has the consumer (a slow answer counts as alive)."""
        self.checked_at = time.monotonic()
        try:
            await self.sub.consumer_info()
        except (nats.js.errors.NotFoundError, nats.js.errors.ServiceUnavailableError,
                nats.errors.NoRespondersError):
            return False
        except (nats.errors.Error, TimeoutError, OSError):
            return True
        return True

    async def _lost(self) -> None:
        self.broken_since = self.broken_since or time.monotonic()
        await self.close()
        await asyncio.sleep(0.5)

    async def pending(self) -> int | None:
        """Messages not yet fetched (None when unknown)."""
        if self.sub is None:
            return None
        try:
            info = await self.sub.consumer_info()
        except (nats.errors.Error, TimeoutError, OSError):
            return None
        return int(info.num_pending)


class RunEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of a run as a client is sent it: a sim or run event with its stream sequence,
    or the whole run record (``seq`` None) when the run ended without its final event in reach."""

    kind: Literal["sim", "run"]
    data: SimEventData | RunEventData | RunRecord
    seq: int | None = None


class RunFollower:
    """One run's events from a stream sequence (None: the first) until its final one.

    :meth:`open` before anything is sent (a consumer that cannot be made is the caller's error
    to answer); :meth:`next` returns the next events (none after about a second without any) or
    None once the run has ended, or its consumer stayed lost for :data:`FEED_LOST_S`; :meth:`close`
    always."""

    def __init__(self, bus: Any, run: RunRecord, start_seq: int | None) -> None:
        self.bus = bus
        self.run_id = run.id
        filters = [subjects.run_events(run.id), *(subjects.sim_events(s) for s in run.sim_ids)]
        self.feed = EventFeed(bus, filters, start_seq)
        self.runs_kv: Any = None
        self.last_run_check = 0.0
        self.ended = False

    async def open(self) -> None:
        await self.feed.open()

    async def close(self) -> None:
        await self.feed.close()

    async def next(self) -> list[RunEvent] | None:
        if self.ended:
            return None
        if self.runs_kv is None:
            self.runs_kv = await self.bus.kv(subjects.KV_RUNS)
        msgs = await self.feed.fetch()
        out: list[RunEvent] = []
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            try:
                if msg.subject.startswith(f"{subjects.PREFIX}.sim."):
                    sim = sim_event_data(msg.data)
                    if sim is not None:
                        out.append(RunEvent(kind="sim", data=sim, seq=seq))
                    continue
                run = run_event_data(msg.data)
            except ValidationError:
                continue
            if run is not None:
                out.append(RunEvent(kind="run", data=run, seq=seq))
                self.ended = self.ended or run.state in TERMINAL_RUN_STATES
        if self.ended:
            return out
        now = time.monotonic()
        if self.feed.broken_since is not None and now - self.feed.broken_since > FEED_LOST_S:
            self.ended = True
        elif not msgs and self.feed.sub is not None and now - self.last_run_check >= RUN_CHECK_S:
            self.last_run_check = now
            with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                entry = await self.runs_kv.get(self.run_id, RunRecord)
                if (entry is not None and entry.value.state in TERMINAL_RUN_STATES
                        and await self.feed.pending() == 0):
                    self.ended = True
                    return [RunEvent(kind="run", data=entry.value)]
        return out if out or not self.ended else None
