"""The connection: connect with a bounded first attempt, then :class:`Bus` (streams, KV
buckets, typed publish, consumers and listeners started through it, introspection)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any, Self

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATSClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as jsapi

from cascade.errors import (
    BusConfigDriftError,
    BusUnavailableError,
    ValidationError,
)
from cascade.platform import subjects
from cascade.platform.bus.consumer import (
    BusStats,
    Consumer,
    Delivery,
    ExhaustedCallback,
    Handler,
    Listener,
)
from cascade.platform.bus.kv import KV
from cascade.platform.log import get_logger
from cascade.platform.messages.base import codec, encode
from cascade.platform.settings import Settings

log = get_logger("cascade.platform.bus")




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
            self._kv[bucket] = KV(bucket, raw, self.stats)
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
        hdrs = self._headers(message, msg_id, headers) or None
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            left = deadline - time.monotonic()
            try:
                ack = await self.js.publish(subject, payload, timeout=max(0.1, left), headers=hdrs)
                break
            except nats.js.errors.NoStreamResponseError:
                # No responder: either no stream stores the subject (drift), or a clustered
                # stream is electing a new leader (a node just went away): the latter answers
                # again within seconds, and the same msg_id keeps a retry from storing twice.
                if await self._stream_for(subject) is None:
                    raise BusConfigDriftError(
                        f"no stream stores {subject}; run ensure_streams() first"
                    ) from None
                if time.monotonic() + pause >= deadline:
                    raise BusUnavailableError(
                        f"NATS at {self.settings.nats_url}: the stream storing {subject} had no leader "
                        f"for {timeout:g}s (a cluster node down?)"
                    ) from None
                self.stats.publish_retries += 1
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                raise BusUnavailableError(
                    f"NATS at {self.settings.nats_url} did not acknowledge {subject} within {timeout:g}s"
                ) from None
        self.stats.published += 1
        if ack.duplicate:
            self.stats.duplicates += 1
        return ack

    async def _stream_for(self, subject: str) -> str | None:
        """The stream storing ``subject``; None only when the server says none does (an
        unanswered lookup, a meta-leader election, counts as 'there may be one')."""
        try:
            name: str = await self.jsm.find_stream_name_by_subject(subject)
            return name
        except nats.js.errors.NotFoundError:
            return None
        except Exception:  # noqa: BLE001 - no answer is no evidence of drift
            return "?"

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
        items_list = list(items)
        for subject, message, msg_id in items_list:
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
            for f in futures:
                f.cancel()
            subjects_sent = sorted({s for s, _, _ in items_list})
            missing = [s for s in subjects_sent if await self._stream_for(s) is None]
            if missing:
                raise BusConfigDriftError(
                    f"no stream stores {', '.join(missing[:3])}; run ensure_streams()"
                ) from None
            raise BusUnavailableError(
                f"NATS at {self.settings.nats_url}: a stream had no leader for {len(futures)} messages "
                "(a cluster node down?); publish them again (their msg ids keep them stored once)"
            ) from None
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
        limit: int | None = None,
        idle_timeout_s: float | None = None,
    ) -> Consumer[Any]:
        """Start a work-queue worker on ``CASCADE_JOBS`` (durable pull consumer).

        ``ack_wait``/``max_deliver`` default to ``job_ack_wait_s``/``job_max_deliver``;
        heartbeats (``in_progress``) go out every ``heartbeat_interval`` (default
        ack_wait/3) while the handler runs. A failing handler is retried after
        ``backoff[attempt-1]`` seconds; once attempts are exhausted (or it raised
        one of ``permanent``) the job is terminated and ``on_exhausted(job, error,
        attempts)`` publishes the failure event. With ``limit`` the worker takes that many
        jobs and then sets :attr:`Consumer.done` (also after ``idle_timeout_s`` with none).
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
            limit=limit,
            idle_timeout_s=idle_timeout_s,
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
