"""Consumers: the one consumer loop every service uses (work-queue jobs and durable or
ephemeral event subscriptions), and core-NATS listeners.

:class:`Consumer` acks after the handler returns, heartbeats while it runs, naks with backoff
on an exception and reports a message that failed for good through ``on_exhausted``; with
``limit`` it handles that many messages and sets :attr:`Consumer.done` (the simulator's
one-job mode), with ``idle_timeout_s`` it also gives up when nothing arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATSClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as jsapi

from cascade.errors import (
    BusConfigDriftError,
    JobTimeoutError,
    ValidationError,
)
from cascade.platform import subjects
from cascade.platform.log import get_logger
from cascade.platform.messages.base import codec

T = TypeVar("T")

Handler = Callable[[T, "Delivery"], Awaitable[None]]
ExhaustedCallback = Callable[[T, BaseException, int], Awaitable[None]]

log = get_logger("cascade.platform.bus")


class BusHandle(Protocol):
    """What a consumer needs of the connection (:class:`cascade.platform.bus.Bus`)."""

    nc: NATSClient
    js: JetStreamContext
    jsm: Any
    stats: BusStats




@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """Delivery details handed to every handler next to the decoded message."""

    subject: str
    attempt: int = 1
    """1 for the first delivery, 2 for the first redelivery..."""
    max_attempts: int = 1
    stream_seq: int | None = None
    msg_id: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class ConsumerStats:
    """Counters of one consumer (exported as metrics and micro stats)."""

    received: int = 0
    acked: int = 0
    retried: int = 0
    failed: int = 0
    """Terminated and reported through ``on_exhausted``."""
    malformed: int = 0
    in_flight: int = 0
    handler_seconds: float = 0.0


@dataclasses.dataclass(slots=True)
class BusStats:
    """Counters of one bus connection."""

    published: int = 0
    duplicates: int = 0
    publish_retries: int = 0
    """Publishes retried because the stream had no leader for a moment (a cluster node went away)."""
    consumers: dict[str, ConsumerStats] = dataclasses.field(default_factory=dict)
    jetstream_consumers_created: dict[str, int] = dataclasses.field(default_factory=dict)
    """JetStream consumers this connection created, by purpose (``kv-watch``, ``kv-scan``,
    ``events``, ``worker``...): each one is a server-side object, limited per account."""
    jetstream_consumers_open: dict[str, int] = dataclasses.field(default_factory=dict)
    """Those still open now, by purpose."""

    def consumer_opened(self, purpose: str) -> None:
        """Count a JetStream consumer created for ``purpose`` (and open until closed)."""
        self.jetstream_consumers_created[purpose] = self.jetstream_consumers_created.get(purpose, 0) + 1
        self.jetstream_consumers_open[purpose] = self.jetstream_consumers_open.get(purpose, 0) + 1

    def consumer_closed(self, purpose: str) -> None:
        """Count a JetStream consumer of ``purpose`` as gone."""
        self.jetstream_consumers_open[purpose] = max(0, self.jetstream_consumers_open.get(purpose, 0) - 1)

    @contextlib.contextmanager
    def consumer(self, purpose: str) -> Iterator[None]:
        """Count one JetStream consumer of ``purpose`` open for the block."""
        self.consumer_opened(purpose)
        try:
            yield
        finally:
            self.consumer_closed(purpose)


class Consumer(Generic[T]):
    """A pull consumer feeding a handler with typed messages, with bounded concurrency.

    Explicit ack after the handler returns; in-progress heartbeats while it runs;
    nak with backoff on an exception; after ``max_deliver`` attempts (or when the
    handler raises one of ``permanent``) the message is terminated and
    ``on_exhausted(message, error, attempts)`` is awaited, so nothing is dropped
    silently. A delivery that arrives after ``max_deliver`` attempts already
    happened (the previous holders crashed or timed out) is reported the same way
    without running the handler again.
    """

    def __init__(
        self,
        bus: BusHandle,
        *,
        stream: str,
        subject: str,
        durable: str | None,
        msg_type: Any,
        handler: Handler[T],
        concurrency: int,
        ack_wait: float,
        max_deliver: int,
        heartbeat_interval: float | None,
        backoff: Sequence[float],
        on_exhausted: ExhaustedCallback[T] | None,
        permanent: tuple[type[BaseException], ...],
        deliver_new: bool,
        drain_timeout: float,
        limit: int | None = None,
        idle_timeout_s: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValidationError("concurrency must be >= 1", field="concurrency")
        if max_deliver < 1:
            raise ValidationError("max_deliver must be >= 1", field="max_deliver")
        self.bus = bus
        self.stream = stream
        self.subject = subject
        self.durable = durable
        self.name = durable or f"eph-{bus.nc._nuid.next().decode()}"
        self.codec = codec(msg_type)
        self.handler = handler
        self.concurrency = concurrency
        self.ack_wait = ack_wait
        self.max_deliver = max_deliver
        self.heartbeat_interval = heartbeat_interval or max(0.05, ack_wait / 3)
        self.backoff = tuple(backoff) or (0.0,)
        self.on_exhausted = on_exhausted
        self.permanent = permanent
        self.deliver_new = deliver_new
        self.drain_timeout = drain_timeout
        self.limit = limit
        """Handle at most this many messages, then stop fetching (None: no limit)."""
        self.idle_timeout_s = idle_timeout_s
        """Give up (set :attr:`done`) after this long with nothing delivered (None: never)."""
        self.done = asyncio.Event()
        """Set when ``limit`` messages were handled, or ``idle_timeout_s`` passed idle."""
        self.taken = 0
        """Messages fetched so far."""
        self._active = 0
        self.stats = bus.stats.consumers.setdefault(self.name, ConsumerStats())
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._sub: JetStreamContext.PullSubscription | None = None
        self._log = log.bind(consumer=self.name, subject=subject)

    async def start(self) -> None:
        """Create or update the consumer on the server and start fetching."""
        config = jsapi.ConsumerConfig(
            name=self.name,
            durable_name=self.durable,
            ack_policy=jsapi.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            # Two spare deliveries so an exhausted message is still seen (and reported).
            max_deliver=self.max_deliver + 2,
            filter_subject=self.subject,
            max_ack_pending=max(1000, self.concurrency * 4),
            deliver_policy=jsapi.DeliverPolicy.NEW if self.deliver_new else jsapi.DeliverPolicy.ALL,
            inactive_threshold=None if self.durable else 60.0,
        )
        try:
            await self.bus.jsm.add_consumer(self.stream, config=config)
        except nats.js.errors.APIError as exc:
            raise BusConfigDriftError(
                f"cannot create consumer {self.name!r} on stream {self.stream} "
                f"for {self.subject}: {exc.description or exc}"
            ) from None
        self._sub = await self.bus.js.pull_subscribe_bind(
            durable=self.durable, stream=self.stream, name=self.name
        )
        self.bus.stats.consumer_opened("worker" if self.durable else "subscription")
        self._loop_task = asyncio.create_task(self._fetch_loop(), name=f"consumer:{self.name}")

    async def _fetch_loop(self) -> None:
        assert self._sub is not None
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            if self.limit is not None and self.taken >= self.limit:
                return
            if (self.idle_timeout_s is not None and not self._active
                    and time.monotonic() - idle_since >= self.idle_timeout_s):
                self.done.set()
                return
            await self._slots.acquire()
            free = 1
            want = self.concurrency if self.limit is None else min(self.concurrency,
                                                                   self.limit - self.taken)
            while free < want and not self._slots.locked():
                await self._slots.acquire()
                free += 1
            try:
                msgs = await self._sub.fetch(free, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                msgs = []
            except nats.errors.ConnectionClosedError:
                for _ in range(free):
                    self._slots.release()
                return
            except Exception as exc:  # noqa: BLE001 - reconnecting, server restarting: retry
                self._log.warning("fetch failed", error=str(exc) or type(exc).__name__)
                msgs = []
                await asyncio.sleep(0.5)
            for _ in range(free - len(msgs)):
                self._slots.release()
            if msgs:
                idle_since = time.monotonic()
            self.taken += len(msgs)
            self._active += len(msgs)
            for msg in msgs:
                task = asyncio.create_task(self._handle(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _heartbeat(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    async def _handle(self, msg: Msg) -> None:
        self.stats.received += 1
        self.stats.in_flight += 1
        try:
            await self._process(msg)
        finally:
            self.stats.in_flight -= 1
            self._active -= 1
            self._slots.release()
            if self.limit is not None and self.taken >= self.limit and not self._active:
                self.done.set()

    async def _process(self, msg: Msg) -> None:
        meta = msg.metadata
        attempt = meta.num_delivered
        headers = dict(msg.headers or {})
        delivery = Delivery(
            subject=msg.subject,
            attempt=attempt,
            max_attempts=self.max_deliver,
            stream_seq=meta.sequence.stream,
            msg_id=headers.get(subjects.HDR_MSG_ID),
            headers=headers,
        )
        try:
            message = self.codec.decode(msg.data, what=f"message on {msg.subject}")
        except ValidationError as exc:
            self.stats.malformed += 1
            self._log.error("malformed message terminated", seq=delivery.stream_seq, error=str(exc))
            await msg.term()
            return
        if attempt > self.max_deliver:
            error = JobTimeoutError(
                f"{msg.subject} seq {delivery.stream_seq}: no acknowledgement after "
                f"{self.max_deliver} deliveries (the workers crashed or stopped heartbeating)"
            )
            await self._exhaust(msg, message, error, attempt - 1)
            return
        heartbeat = asyncio.create_task(self._heartbeat(msg))
        started = time.perf_counter()
        try:
            await self.handler(message, delivery)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await msg.nak()
            self._log.info("in-flight message handed back", seq=delivery.stream_seq)
            raise
        except self.permanent as exc:
            await self._exhaust(msg, message, exc, attempt)
        except Exception as exc:  # noqa: BLE001 - any handler failure is retried or reported
            if attempt >= self.max_deliver:
                await self._exhaust(msg, message, exc, attempt)
            else:
                delay = self.backoff[min(attempt - 1, len(self.backoff) - 1)]
                self.stats.retried += 1
                self._log.warning(
                    "handler failed, will retry",
                    seq=delivery.stream_seq,
                    attempt=attempt,
                    retry_in_s=delay,
                    error=str(exc) or type(exc).__name__,
                )
                await msg.nak(delay=delay or None)
        else:
            await msg.ack()
            self.stats.acked += 1
        finally:
            heartbeat.cancel()
            self.stats.handler_seconds += time.perf_counter() - started

    async def _exhaust(self, msg: Msg, message: T, error: BaseException, attempts: int) -> None:
        self._log.error(
            "message failed for good",
            seq=msg.metadata.sequence.stream,
            attempts=attempts,
            error=str(error) or type(error).__name__,
        )
        if self.on_exhausted is not None:
            try:
                await self.on_exhausted(message, error, attempts)
            except Exception as exc:  # noqa: BLE001 - reported again on a later delivery
                # Leave it to a later delivery (two spare ones) to report again.
                self._log.error("on_exhausted failed", error=str(exc) or type(exc).__name__)
                await msg.nak(delay=self.backoff[-1] or None)
                return
        await msg.term()
        self.stats.failed += 1

    async def stop(self) -> None:
        """Stop fetching, let in-flight handlers finish (``drain_timeout``), hand back the rest.

        Idempotent.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._loop_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._loop_task), timeout=1.5)
            except Exception:  # noqa: BLE001 - a stuck or failed loop is cancelled either way
                self._loop_task.cancel()
                with contextlib.suppress(BaseException):
                    await self._loop_task
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self.drain_timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._sub is not None:
            self.bus.stats.consumer_closed("worker" if self.durable else "subscription")
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if self.durable is None:
            with contextlib.suppress(Exception):
                await self.bus.jsm.delete_consumer(self.stream, self.name)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class Listener:
    """A core-NATS subscription (no replay, no acks) decoded to typed messages."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub

    async def stop(self) -> None:
        """Unsubscribe (idempotent)."""
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()


