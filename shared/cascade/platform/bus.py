"""The NATS JetStream bus: connect, streams, typed publish/subscribe, KV, work-queue workers.

Typical use inside a service::

    bus = await connect(settings, name="cascade-prepare")
    await bus.ensure_streams()
    await bus.publish(subjects.trace_event(tid, "created"), TraceCreated(...), msg_id=f"created:{tid}")
    worker = await bus.run_worker(subjects.JOB_PREPARE, subjects.DURABLE_PREPARE_JOBS,
                                  PrepareJob, handle_prepare, concurrency=2,
                                  on_exhausted=report_failure)
    ...
    await worker.stop()      # drains: in-flight jobs finish or are handed back
    await bus.close()

Every handler has the signature ``async def handler(message: T, delivery: Delivery) -> None``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, Self, TypeVar

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATSClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as jsapi
from nats.js.kv import KeyValue

from cascade.errors import (
    BusConfigDriftError,
    BusUnavailableError,
    ConflictError,
    JobTimeoutError,
    ValidationError,
)
from cascade.platform import subjects
from cascade.platform.log import get_logger
from cascade.platform.messages.base import codec, encode
from cascade.platform.settings import Settings

T = TypeVar("T")

Handler = Callable[[T, "Delivery"], Awaitable[None]]
ExhaustedCallback = Callable[[T, BaseException, int], Awaitable[None]]

log = get_logger("cascade.platform.bus")


# --------------------------------------------------------------------------- connect


async def connect(settings: Settings, *, name: str | None = None) -> Bus:
    """Connect to NATS with a bounded, fast failure.

    The first connection is tried for at most ``settings.nats_connect_timeout_s``
    seconds (a few attempts, 0.25 s apart); then :class:`BusUnavailableError` names
    the URL. Once connected, the client reconnects forever on its own.
    """
    servers = [u.strip() for u in settings.nats_url.split(",") if u.strip()]
    budget = settings.nats_connect_timeout_s
    wait = 0.25
    attempts = max(1, int(budget / wait))
    connected = asyncio.Event()
    closing = asyncio.Event()
    last_error: list[BaseException] = []

    async def error_cb(exc: Exception) -> None:
        if connected.is_set():
            log.warning("nats error", error=str(exc) or type(exc).__name__)
        else:
            last_error.append(exc)

    async def disconnected_cb() -> None:
        if connected.is_set() and not closing.is_set():
            log.warning("nats disconnected", url=settings.nats_url)

    async def reconnected_cb() -> None:
        log.info("nats reconnected", url=settings.nats_url)

    nc = NATSClient()
    try:
        await asyncio.wait_for(
            nc.connect(
                servers,
                name=name,
                connect_timeout=max(0.2, min(2.0, budget)),  # type: ignore[arg-type]
                reconnect_time_wait=wait,  # type: ignore[arg-type]
                max_reconnect_attempts=attempts,
                allow_reconnect=True,
                error_cb=error_cb,
                disconnected_cb=disconnected_cb,
                reconnected_cb=reconnected_cb,
            ),
            timeout=budget + 0.5,
        )
    except Exception as exc:  # noqa: BLE001 - every failure becomes BusUnavailableError
        with contextlib.suppress(Exception):
            await nc.close()
        cause = last_error[-1] if last_error else exc
        reason = str(cause) or type(cause).__name__
        raise BusUnavailableError(
            f"cannot connect to NATS at {settings.nats_url} within {budget:g}s ({reason}); "
            "start nats-server (`cascade up` does) or set CASCADE_NATS_URL"
        ) from None
    connected.set()
    nc.options["max_reconnect_attempts"] = -1
    nc.options["reconnect_time_wait"] = 1
    bus = Bus(nc, settings)
    bus._closing = closing
    return bus


# --------------------------------------------------------------------------- deliveries


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

    @property
    def last_attempt(self) -> bool:
        """True when a failure now will not be retried."""
        return self.attempt >= self.max_attempts


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
    consumers: dict[str, ConsumerStats] = dataclasses.field(default_factory=dict)


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
        bus: Bus,
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
        self._loop_task = asyncio.create_task(self._fetch_loop(), name=f"consumer:{self.name}")

    async def _fetch_loop(self) -> None:
        assert self._sub is not None
        while not self._stopping.is_set():
            await self._slots.acquire()
            free = 1
            while free < self.concurrency and not self._slots.locked():
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
            self._slots.release()

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


# --------------------------------------------------------------------------- KV


@dataclasses.dataclass(frozen=True, slots=True)
class KVEntry(Generic[T]):
    """A decoded KV value with its revision (for compare-and-set)."""

    key: str
    value: T
    revision: int


@dataclasses.dataclass(frozen=True, slots=True)
class KVChange(Generic[T]):
    """One update seen by :meth:`KV.watch`; ``value`` is None for a delete/purge."""

    key: str
    value: T | None
    revision: int


class KV:
    """Typed helpers over one JetStream KV bucket (values are msgspec JSON)."""

    def __init__(self, bucket: str, kv: KeyValue) -> None:
        self.bucket = bucket
        self.raw = kv

    async def get(self, key: str, type_: type[T]) -> KVEntry[T] | None:
        """The current value of ``key`` decoded as ``type_``, or None if absent/deleted."""
        try:
            entry = await self.raw.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return KVEntry(key, codec(type_).decode(entry.value or b"", what=f"{self.bucket}/{key}"),
                       entry.revision or 0)

    async def put(self, key: str, value: Any) -> int:
        """Write ``value`` (a Struct or JSON-able) unconditionally; returns the revision."""
        return await self.raw.put(key, _to_bytes(value))

    async def create(self, key: str, value: Any) -> int:
        """Write ``value`` only if ``key`` does not exist; :class:`ConflictError` otherwise."""
        try:
            return await self.raw.create(key, _to_bytes(value))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise ConflictError(f"{self.bucket}/{key} already exists") from None

    async def update(self, key: str, value: Any, *, revision: int) -> int:
        """Write ``value`` only if ``key`` is still at ``revision``; :class:`ConflictError` otherwise."""
        try:
            return await self.raw.update(key, _to_bytes(value), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise ConflictError(f"{self.bucket}/{key} changed since revision {revision}") from None

    async def mutate(
        self,
        key: str,
        type_: type[T],
        change: Callable[[T | None], T | None],
        *,
        retries: int = 50,
    ) -> T | None:
        """Compare-and-set loop: ``change(current or None)`` -> new value (None: leave as is).

        Retried on a concurrent write (revision mismatch) up to ``retries`` times;
        ``change`` must be a pure function of its input. Returns the stored value.
        """
        for _ in range(retries):
            current = await self.get(key, type_)
            new = change(current.value if current else None)
            if new is None:
                return current.value if current else None
            try:
                if current is None:
                    await self.create(key, new)
                else:
                    await self.update(key, new, revision=current.revision)
                return new
            except ConflictError:
                await asyncio.sleep(0.001)
        raise ConflictError(f"{self.bucket}/{key}: gave up after {retries} concurrent updates")

    async def delete(self, key: str) -> None:
        """Delete ``key`` (a no-op if absent)."""
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await self.raw.delete(key)

    async def scan_raw(self, pattern: str = ">", *, meta_only: bool = False) -> dict[str, bytes]:
        """Current raw values of every live key matching ``pattern``, in one ordered pass.

        nats-py's watcher may signal "initial values done" before it has handed
        over entries the server already delivered (its check races with the
        delivery callback under load). An early end marker with nothing
        received is therefore confirmed against the stream's subject index
        before an empty answer is believed.
        """
        watcher = await self.raw.watch(pattern, ignore_deletes=True, meta_only=meta_only)
        out: dict[str, bytes] = {}
        timeout = 5.0
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=timeout)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                if entry is None:
                    if out or not await self._has_keys(pattern):
                        break
                    timeout = 1.0  # entries are on their way; a deleted-only set ends here
                    continue
                out[entry.key] = entry.value or b""
                if not entry.delta:
                    break
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()
        return out

    async def _has_keys(self, pattern: str) -> bool:
        """Whether the bucket's stream holds any message on a key matching ``pattern``."""
        raw: Any = self.raw
        info = await raw._js.stream_info(raw._stream, subjects_filter=f"{raw._pre}{pattern}")
        return bool(info.state.subjects)

    async def keys(self, pattern: str = ">") -> list[str]:
        """Keys matching a subject-style ``pattern`` (``>`` all, ``trace1.>``, ``*.state``)."""
        return sorted(await self.scan_raw(pattern, meta_only=True))

    async def values(self, type_: type[T], pattern: str = ">") -> dict[str, T]:
        """Every current value matching ``pattern``, decoded."""
        dec = codec(type_)
        found = await self.scan_raw(pattern)
        return {
            key: dec.decode(value, what=f"{self.bucket}/{key}")
            for key, value in sorted(found.items())
            if value
        }

    async def watch(
        self, type_: type[T], pattern: str = ">", *, initial: bool = True
    ) -> AsyncIterator[KVChange[T]]:
        """Yield changes to keys matching ``pattern`` (current values first when ``initial``)."""
        watcher = await self.raw.watch(pattern)
        dec = codec(type_)
        seen_initial = False
        try:
            async for entry in watcher:
                if entry is None:
                    seen_initial = True
                    continue
                if not initial and not seen_initial:
                    if not entry.delta:
                        seen_initial = True
                    continue
                if entry.operation in ("DEL", "PURGE"):
                    yield KVChange(entry.key, None, entry.revision or 0)
                else:
                    value = dec.decode(entry.value or b"", what=f"{self.bucket}/{entry.key}")
                    yield KVChange(entry.key, value, entry.revision or 0)
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return encode(value)


# --------------------------------------------------------------------------- the bus


class Bus:
    """A connected NATS client with Cascade's streams, typed messages and helpers."""

    def __init__(self, nc: NATSClient, settings: Settings) -> None:
        self.nc = nc
        self.settings = settings
        self.js: JetStreamContext = nc.jetstream(timeout=5.0)
        self.jsm = nc.jsm(timeout=5.0)
        self.stats = BusStats()
        self._consumers: list[Consumer[Any]] = []
        self._listeners: list[Listener] = []
        self._kv: dict[str, KV] = {}
        self._closing = asyncio.Event()

    # -- lifecycle --------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True while the client holds a live connection."""
        return bool(self.nc.is_connected)

    async def ping(self, timeout: float = 2.0) -> float:
        """Round-trip to the server and the JetStream API; returns seconds. Raises when down."""
        started = time.perf_counter()
        try:
            await asyncio.wait_for(self.jsm.account_info(), timeout)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            raise BusUnavailableError(
                f"NATS JetStream at {self.settings.nats_url} did not answer: {exc or type(exc).__name__}"
            ) from None
        return time.perf_counter() - started

    async def close(self) -> None:
        """Stop every consumer (draining in-flight work), then drain and close. Idempotent."""
        self._closing.set()
        for consumer in reversed(self._consumers):
            await consumer.stop()
        for listener in self._listeners:
            await listener.stop()
        if not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.drain(), timeout=5.0)
            with contextlib.suppress(Exception):
                await self.nc.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- streams and buckets ---------------------------------------------

    def stream_configs(self) -> list[jsapi.StreamConfig]:
        """The stream configurations Cascade expects (events log, jobs work queue)."""
        s = self.settings
        return [
            jsapi.StreamConfig(
                name=subjects.EVENTS_STREAM,
                description="Cascade event log (traces, runs, sims, S3 notifications)",
                subjects=list(subjects.EVENTS_SUBJECTS),
                retention=jsapi.RetentionPolicy.LIMITS,
                storage=jsapi.StorageType.FILE,
                discard=jsapi.DiscardPolicy.OLD,
                duplicate_window=s.duplicate_window_s,
                max_age=s.events_max_age_s or None,
                num_replicas=s.stream_replicas,
            ),
            jsapi.StreamConfig(
                name=subjects.JOBS_STREAM,
                description="Cascade work queue (prepare and simulation jobs)",
                subjects=list(subjects.JOBS_SUBJECTS),
                retention=jsapi.RetentionPolicy.WORK_QUEUE,
                storage=jsapi.StorageType.FILE,
                discard=jsapi.DiscardPolicy.OLD,
                duplicate_window=s.duplicate_window_s,
                num_replicas=s.stream_replicas,
            ),
        ]

    async def ensure_streams(self) -> dict[str, str]:
        """Create the streams and KV buckets if missing; update safe differences.

        Returns ``{name: "created" | "updated" | "ok"}``. Raises
        :class:`BusConfigDriftError` when an existing stream differs in a way that
        cannot be updated in place (retention or storage type) or collides with
        another stream's subjects.
        """
        outcome: dict[str, str] = {}
        for config in self.stream_configs():
            assert config.name is not None
            outcome[config.name] = await self._ensure_stream(config)
        for bucket in subjects.KV_BUCKETS:
            outcome[bucket] = await self._ensure_kv(bucket)
        return outcome

    async def _ensure_stream(self, want: jsapi.StreamConfig) -> str:
        name = want.name or ""
        try:
            info = await self.jsm.stream_info(name)
        except nats.js.errors.NotFoundError:
            try:
                await self.jsm.add_stream(want)
            except nats.js.errors.APIError as exc:
                raise BusConfigDriftError(
                    f"cannot create stream {name} on {want.subjects}: {exc.description or exc}"
                ) from None
            log.info("stream created", stream=name)
            return "created"
        have = info.config
        for attr in ("retention", "storage"):
            if getattr(have, attr) != getattr(want, attr):
                raise BusConfigDriftError(
                    f"stream {name} exists with {attr}={_enum_value(getattr(have, attr))}, "
                    f"expected {_enum_value(getattr(want, attr))}; it cannot be changed in place: "
                    f"back it up and delete it (nats stream rm {name}) or point CASCADE_NATS_URL "
                    "at another server"
                )
        changes: dict[str, Any] = {}
        if sorted(have.subjects or []) != sorted(want.subjects or []):
            changes["subjects"] = want.subjects
        if abs((have.duplicate_window or 0) - want.duplicate_window) > 1e-6:
            changes["duplicate_window"] = want.duplicate_window
        if (have.max_age or 0) != (want.max_age or 0):
            changes["max_age"] = want.max_age or 0
        if not changes:
            return "ok"
        try:
            await self.jsm.update_stream(dataclasses.replace(have, **changes))
        except nats.js.errors.APIError as exc:
            raise BusConfigDriftError(
                f"stream {name} differs from the expected configuration ({sorted(changes)}) "
                f"and could not be updated: {exc.description or exc}"
            ) from None
        log.warning("stream configuration updated", stream=name, changed=sorted(changes))
        return "updated"

    async def _ensure_kv(self, bucket: str) -> str:
        try:
            await self.js.key_value(bucket)
            return "ok"
        except nats.js.errors.BucketNotFoundError:
            pass
        await self.js.create_key_value(
            jsapi.KeyValueConfig(
                bucket=bucket,
                history=5,
                storage=jsapi.StorageType.FILE,
                replicas=self.settings.stream_replicas,
            )
        )
        log.info("kv bucket created", bucket=bucket)
        return "created"

    async def kv(self, bucket: str) -> KV:
        """Typed access to one KV bucket (must exist: see :meth:`ensure_streams`)."""
        if bucket not in self._kv:
            try:
                raw = await self.js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                raise BusConfigDriftError(
                    f"KV bucket {bucket!r} does not exist; run ensure_streams() first"
                ) from None
            self._kv[bucket] = KV(bucket, raw)
        return self._kv[bucket]

    # -- publish ----------------------------------------------------------

    def _headers(self, message: Any, msg_id: str | None, headers: dict[str, str] | None) -> dict[str, str]:
        out = dict(headers or {})
        if msg_id:
            out[subjects.HDR_MSG_ID] = msg_id
        tag = getattr(type(message), "__struct_config__", None)
        if tag is not None and tag.tag is not None:
            out[subjects.HDR_MSG_TYPE] = str(tag.tag)
        return out

    async def publish(
        self,
        subject: str,
        message: msgspec.Struct | bytes,
        *,
        msg_id: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 5.0,
    ) -> jsapi.PubAck:
        """Publish to JetStream and wait for the stream's ack.

        ``msg_id`` becomes ``Nats-Msg-Id``: a second publish with the same id inside
        the duplicate window is stored once (the returned ack has ``duplicate=True``).
        """
        payload = message if isinstance(message, bytes) else encode(message)
        try:
            ack = await self.js.publish(
                subject, payload, timeout=timeout, headers=self._headers(message, msg_id, headers) or None
            )
        except nats.js.errors.NoStreamResponseError:
            raise BusConfigDriftError(
                f"no stream stores {subject}; run ensure_streams() first"
            ) from None
        except (TimeoutError, nats.errors.TimeoutError):
            raise BusUnavailableError(
                f"NATS at {self.settings.nats_url} did not acknowledge {subject} within {timeout:g}s"
            ) from None
        self.stats.published += 1
        if ack.duplicate:
            self.stats.duplicates += 1
        return ack

    async def publish_many(
        self,
        items: Iterable[tuple[str, msgspec.Struct | bytes, str | None]],
        *,
        timeout: float = 10.0,
    ) -> list[jsapi.PubAck]:
        """Publish ``(subject, message, msg_id)`` items with pipelined (async) acks.

        Returns the acks in order; raises if any publish failed or timed out.
        """
        futures: list[asyncio.Future[jsapi.PubAck]] = []
        for subject, message, msg_id in items:
            payload = message if isinstance(message, bytes) else encode(message)
            futures.append(
                await self.js.publish_async(
                    subject, payload, wait_stall=timeout, headers=self._headers(message, msg_id, None) or None
                )
            )
        try:
            acks = await asyncio.wait_for(asyncio.gather(*futures), timeout=timeout)
        except TimeoutError:
            for f in futures:
                f.cancel()
            raise BusUnavailableError(
                f"NATS at {self.settings.nats_url} did not acknowledge {len(futures)} messages "
                f"within {timeout:g}s"
            ) from None
        except nats.js.errors.NoStreamResponseError:
            raise BusConfigDriftError("no stream stores one of the subjects; run ensure_streams()") from None
        self.stats.published += len(acks)
        self.stats.duplicates += sum(1 for a in acks if a.duplicate)
        return list(acks)

    # -- consume ----------------------------------------------------------

    async def subscribe(
        self,
        subject: str,
        msg_type: Any,
        handler: Handler[Any],
        *,
        durable: str | None = None,
        deliver_new: bool | None = None,
        concurrency: int = 1,
        ack_wait: float = 30.0,
        max_deliver: int = 5,
        backoff: Sequence[float] = (0.5, 2.0, 5.0),
        on_exhausted: ExhaustedCallback[Any] | None = None,
        stream: str = subjects.EVENTS_STREAM,
    ) -> Consumer[Any]:
        """Consume events from the ``CASCADE`` stream with a typed handler.

        ``durable`` names a consumer that survives restarts (and is shared by
        replicas: each event goes to one of them); without it an ephemeral consumer
        sees new events only (``deliver_new`` default) and is removed on stop.
        Messages that fail to decode are logged and terminated.
        """
        consumer: Consumer[Any] = Consumer(
            self,
            stream=stream,
            subject=subject,
            durable=durable,
            msg_type=msg_type,
            handler=handler,
            concurrency=concurrency,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            heartbeat_interval=None,
            backoff=backoff,
            on_exhausted=on_exhausted,
            permanent=(ValidationError,),
            deliver_new=(durable is None) if deliver_new is None else deliver_new,
            drain_timeout=self.settings.drain_timeout_s,
        )
        await consumer.start()
        self._consumers.append(consumer)
        return consumer

    async def run_worker(
        self,
        subject: str,
        durable: str,
        job_type: Any,
        handler: Handler[Any],
        *,
        concurrency: int = 1,
        ack_wait: float | None = None,
        max_deliver: int | None = None,
        heartbeat_interval: float | None = None,
        backoff: Sequence[float] = (1.0, 5.0, 30.0),
        on_exhausted: ExhaustedCallback[Any] | None = None,
        permanent: tuple[type[BaseException], ...] = (ValidationError,),
    ) -> Consumer[Any]:
        """Start a work-queue worker on ``CASCADE_JOBS`` (durable pull consumer).

        ``ack_wait``/``max_deliver`` default to ``job_ack_wait_s``/``job_max_deliver``;
        heartbeats (``in_progress``) go out every ``heartbeat_interval`` (default
        ack_wait/3) while the handler runs. A failing handler is retried after
        ``backoff[attempt-1]`` seconds; once attempts are exhausted (or it raised
        one of ``permanent``) the job is terminated and ``on_exhausted(job, error,
        attempts)`` publishes the failure event.
        """
        consumer: Consumer[Any] = Consumer(
            self,
            stream=subjects.JOBS_STREAM,
            subject=subject,
            durable=durable,
            msg_type=job_type,
            handler=handler,
            concurrency=concurrency,
            ack_wait=ack_wait if ack_wait is not None else self.settings.job_ack_wait_s,
            max_deliver=max_deliver if max_deliver is not None else self.settings.job_max_deliver,
            heartbeat_interval=heartbeat_interval,
            backoff=backoff,
            on_exhausted=on_exhausted,
            permanent=permanent,
            deliver_new=False,
            drain_timeout=self.settings.drain_timeout_s,
        )
        await consumer.start()
        self._consumers.append(consumer)
        return consumer

    async def listen(
        self, subject: str, msg_type: Any, handler: Handler[Any], *, queue: str = ""
    ) -> Listener:
        """Core-NATS subscription (live fan-out, no replay, no ack), typed.

        Good for progress streams to browsers. Malformed messages are logged and skipped.
        """
        dec = codec(msg_type)

        async def on_msg(msg: Msg) -> None:
            try:
                message = dec.decode(msg.data, what=f"message on {msg.subject}")
            except ValidationError as exc:
                log.warning("malformed message skipped", subject=msg.subject, error=str(exc))
                return
            headers = dict(msg.headers or {})
            try:
                await handler(message, Delivery(subject=msg.subject, headers=headers,
                                                msg_id=headers.get(subjects.HDR_MSG_ID)))
            except Exception:
                log.exception("listener handler failed", subject=msg.subject)

        listener = Listener(await self.nc.subscribe(subject, queue=queue, cb=on_msg))
        self._listeners.append(listener)
        return listener

    # -- introspection ----------------------------------------------------

    async def queue_depths(self) -> dict[str, dict[str, int]]:
        """Per work-queue consumer: pending (not yet delivered), in flight, redelivered, waiting."""
        out: dict[str, dict[str, int]] = {}
        try:
            infos = await self.jsm.consumers_info(subjects.JOBS_STREAM)
        except nats.js.errors.NotFoundError:
            return out
        for info in infos:
            out[info.name] = {
                "pending": int(info.num_pending or 0),
                "in_flight": int(info.num_ack_pending or 0),
                "redelivered": int(info.num_redelivered or 0),
                "waiting_pulls": int(info.num_waiting or 0),
            }
        return out

    async def stream_sizes(self) -> dict[str, dict[str, int]]:
        """Messages and bytes stored per Cascade stream."""
        out: dict[str, dict[str, int]] = {}
        for name in (subjects.EVENTS_STREAM, subjects.JOBS_STREAM):
            try:
                info = await self.jsm.stream_info(name)
            except nats.js.errors.NotFoundError:
                continue
            out[name] = {"messages": int(info.state.messages), "bytes": int(info.state.bytes)}
        return out

    async def discover_services(self, verb: str = "STATS", *, timeout: float = 0.5) -> list[dict[str, Any]]:
        """Every NATS micro service instance answering ``$SRV.{verb}`` within ``timeout``."""
        if verb not in ("PING", "INFO", "STATS"):
            raise ValidationError(f"unknown micro verb {verb!r}; known: INFO, PING, STATS", field="verb")
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        replies: list[dict[str, Any]] = []
        try:
            await self.nc.publish(f"$SRV.{verb}", b"", reply=inbox)
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                try:
                    msg = await sub.next_msg(timeout=left)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                with contextlib.suppress(ValueError):
                    replies.append(json.loads(msg.data))
        finally:
            await sub.unsubscribe()
        return replies


def _enum_value(value: Any) -> Any:
    return getattr(value, "value", value)
