"""The service runtime shared by the five Cascade services.

:func:`serve` owns a service's lifecycle: logging, one ``AsyncExitStack`` in
dependency order (bus connection and streams, the NATS ``micro`` service with
health/status endpoints, whatever the service's ``setup`` adds, an optional
Prometheus ``/metrics`` site), SIGTERM/SIGINT -> an ``asyncio.Event``, and a
reverse-order drain on stop. :func:`main` is the body of every ``__main__``:
invalid settings exit 2, an unreachable bus exits 1, a clean stop exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import nats.micro
import structlog
from aiohttp import web
from nats.micro.request import Request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from cascade import __version__
from cascade.errors import BusUnavailableError, CascadeError, ConfigError, StorageError
from cascade.platform import subjects
from cascade.platform.bus import Bus, Consumer, connect
from cascade.platform.log import configure_logging
from cascade.platform.settings import Settings, load_settings
from cascade.platform.storage import Storage

StatsProvider = Callable[[], dict[str, Any]]
Setup = Callable[["ServiceContext"], Awaitable[None]]

#: Attempts of a service's S3 calls on transient errors (connection refused, 5xx, throttling;
#: botocore "standard" backoff): enough to ride through a restart of the S3 server.
SERVICE_S3_ATTEMPTS = 6


class BusCollector(Collector):
    """Prometheus view of a bus connection's counters, read at scrape time."""

    def __init__(self, bus: Bus | None, *, service: str, version: str, instance: str) -> None:
        self.bus = bus
        self.service = service
        self.version = version
        self.instance = instance

    def collect(self) -> Any:
        info = InfoMetricFamily("cascade_service", "Cascade service identity")
        info.add_metric([], {"service": self.service, "version": self.version, "instance": self.instance})
        yield info
        up = GaugeMetricFamily("cascade_bus_connected", "1 while the NATS connection is up")
        up.add_metric([], 1.0 if self.bus is not None and self.bus.is_connected else 0.0)
        yield up
        if self.bus is None:
            return
        stats = self.bus.stats
        published = CounterMetricFamily("cascade_bus_published", "Messages published with acks")
        published.add_metric([], stats.published)
        yield published
        duplicates = CounterMetricFamily(
            "cascade_bus_duplicates", "Publishes the stream dropped as duplicates (Nats-Msg-Id)"
        )
        duplicates.add_metric([], stats.duplicates)
        yield duplicates
        retries = CounterMetricFamily(
            "cascade_bus_publish_retries", "Publishes retried while their stream elected a leader"
        )
        retries.add_metric([], stats.publish_retries)
        yield retries
        outcomes = CounterMetricFamily(
            "cascade_consumer_messages", "Messages handled per consumer and outcome",
            labels=["consumer", "outcome"],
        )
        in_flight = GaugeMetricFamily(
            "cascade_consumer_in_flight", "Messages being handled now", labels=["consumer"]
        )
        seconds = CounterMetricFamily(
            "cascade_consumer_handler_seconds", "Time spent in handlers", labels=["consumer"]
        )
        for name, c in stats.consumers.items():
            for outcome, value in (
                ("acked", c.acked), ("retried", c.retried), ("failed", c.failed), ("malformed", c.malformed)
            ):
                outcomes.add_metric([name, outcome], value)
            in_flight.add_metric([name], c.in_flight)
            seconds.add_metric([name], c.handler_seconds)
        yield outcomes
        yield in_flight
        yield seconds
        created = CounterMetricFamily(
            "cascade_bus_jetstream_consumers_created",
            "JetStream consumers this process created, by purpose (KV watches and scans, event "
            "streams, workers)", labels=["purpose"])
        for purpose, count in sorted(stats.jetstream_consumers_created.items()):
            created.add_metric([purpose], count)
        yield created
        open_now = GaugeMetricFamily(
            "cascade_bus_jetstream_consumers_open",
            "JetStream consumers this process holds open now, by purpose", labels=["purpose"])
        for purpose, count in sorted(stats.jetstream_consumers_open.items()):
            open_now.add_metric([purpose], count)
        yield open_now


def new_registry(bus: Bus | None, *, service: str, version: str = __version__,
                 instance: str | None = None) -> CollectorRegistry:
    """A Prometheus registry with the bus and process collectors of one service."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(BusCollector(
        bus, service=service, version=version,
        instance=instance or f"{socket.gethostname()}:{os.getpid()}",
    ))
    ProcessCollector(registry=registry)
    return registry


@dataclass
class ServiceContext:
    """What a running service gets: settings, bus, storage, stop event, exit stack, metrics."""

    name: str
    settings: Settings
    bus: Bus
    stop: asyncio.Event
    stack: contextlib.AsyncExitStack
    log: structlog.stdlib.BoundLogger
    storage: Storage | None = None
    """Object storage (None for services that do not use it, e.g. the orchestrator)."""
    version: str = __version__
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    started_at: float = field(default_factory=time.time)
    registry: CollectorRegistry | None = None
    micro: Any = None
    _stats: list[StatsProvider] = field(default_factory=list)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def require_storage(self) -> Storage:
        """The storage of a service that needs it (StorageError when it was started without)."""
        if self.storage is None:
            raise StorageError(f"service {self.name} needs object storage but was started without it")
        return self.storage

    def add_stats(self, provider: StatsProvider) -> None:
        """Add a provider whose dict is merged into this service's status/stats answers."""
        self._stats.append(provider)

    def status(self) -> dict[str, Any]:
        """Health and basic stats of this instance (the micro ``status`` endpoint's answer)."""
        consumers = {
            name: {
                "received": c.received, "acked": c.acked, "retried": c.retried,
                "failed": c.failed, "malformed": c.malformed, "in_flight": c.in_flight,
            }
            for name, c in self.bus.stats.consumers.items()
        }
        out: dict[str, Any] = {
            "service": self.name,
            "version": self.version,
            "instance": self.instance,
            "healthy": self.bus.is_connected and not self.stop.is_set(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "published": self.bus.stats.published,
            "consumers": consumers,
        }
        for provider in self._stats:
            out.update(provider())
        return out

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run a background task for the service's lifetime; cancelled on stop, errors logged."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.log.error("background task failed", task=name, error=str(t.exception()))

        task.add_done_callback(done)
        return task

    async def cancel_tasks(self) -> None:
        """Cancel the background tasks started with :meth:`spawn` and wait for them."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def add_endpoint(
        self, endpoint: str, handler: Callable[[Request], Awaitable[None]]
    ) -> str:
        """Add a request/reply endpoint ``cascade.svc.{service}.{endpoint}`` to the micro service."""
        subject = subjects.svc_endpoint(self.name, endpoint)
        await self.micro.add_endpoint(name=endpoint, subject=subject, handler=handler)
        return subject

    async def run_worker(self, *args: Any, **kwargs: Any) -> Consumer[Any]:
        """:meth:`Bus.run_worker` whose drain runs when the service stops (same arguments)."""
        consumer = await self.bus.run_worker(*args, **kwargs)
        self.stack.push_async_callback(consumer.stop)
        return consumer

    async def subscribe(self, *args: Any, **kwargs: Any) -> Consumer[Any]:
        """:meth:`Bus.subscribe` whose drain runs when the service stops (same arguments)."""
        consumer = await self.bus.subscribe(*args, **kwargs)
        self.stack.push_async_callback(consumer.stop)
        return consumer

    def metrics_text(self) -> tuple[bytes, str]:
        """Prometheus exposition of this service's registry: ``(body, content type)``."""
        assert self.registry is not None
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


async def _start_micro(ctx: ServiceContext) -> None:
    async def status(req: Request) -> None:
        await req.respond(json.dumps(ctx.status()).encode())

    ctx.micro = await nats.micro.add_service(
        ctx.bus.nc,
        name=subjects.micro_name(ctx.name),
        version=ctx.version,
        description=f"Cascade {ctx.name} service",
        metadata={"service": ctx.name, "instance": ctx.instance},
        stats_handler=lambda _endpoint: ctx.status(),
    )
    ctx.stack.push_async_callback(ctx.micro.stop)
    await ctx.add_endpoint("status", status)


async def start_metrics_site(ctx: ServiceContext, host: str, port: int) -> web.AppRunner:
    """Serve ``GET /metrics`` for ``ctx`` on ``host:port`` until the stack closes."""

    async def metrics(_request: web.Request) -> web.Response:
        body, content_type = ctx.metrics_text()
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ctx.stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve(
    name: str,
    settings: Settings,
    setup: Setup | None = None,
    *,
    bus: Bus | None = None,
    storage: Storage | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    use_storage: bool = False,
) -> None:
    """Run service ``name`` until ``stop`` is set (or SIGTERM/SIGINT), then drain and return.

    Order: logging, bus (``connect`` unless one is given; closed on exit only if
    created here), ``ensure_streams``, micro service (``cascade-{name}``, with a
    ``status`` endpoint), Prometheus registry (``/metrics`` on ``metrics_port`` if
    set), storage (``Storage.from_settings`` when ``use_storage`` and none is
    given; closed on exit only if opened here), then ``setup(ctx)``, which registers workers/subscriptions/sites on
    ``ctx.stack``. Shutdown closes the stack in reverse.
    """
    service = settings.service_name or name
    log = configure_logging(settings, service)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
    try:
        async with contextlib.AsyncExitStack() as stack:
            if bus is None:
                bus = await connect(settings, name=subjects.micro_name(name))
                stack.push_async_callback(bus.close)
            await bus.ensure_streams()
            if storage is None and use_storage:
                storage = Storage.from_settings(settings, max_attempts=SERVICE_S3_ATTEMPTS)
                await storage.open()
                stack.push_async_callback(storage.close)
            ctx = ServiceContext(
                name=name, settings=settings, bus=bus, stop=stop, stack=stack, log=log, storage=storage
            )
            ctx.registry = new_registry(bus, service=name, version=ctx.version, instance=ctx.instance)
            stack.push_async_callback(ctx.cancel_tasks)
            await _start_micro(ctx)
            if settings.metrics_port and name != "api":
                await start_metrics_site(ctx, settings.http_host, settings.metrics_port)
            if setup is None or await _set_up_unless_stopped(setup(ctx), stop):
                log.info("service started", version=ctx.version, nats=settings.nats_url)
                await stop.wait()
            log.info("service stopping")
        log.info("service stopped")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _set_up_unless_stopped(setup: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run ``setup``; a stop (SIGTERM) while it is still running (e.g. retrying an unreachable
    S3) cancels it. True when it finished, False when it was stopped; its errors propagate."""
    task = asyncio.ensure_future(setup)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


def main(name: str, run: Callable[[Settings], Coroutine[Any, Any, None]]) -> int:
    """Body of ``python -m services.<name>``: settings -> ``asyncio.run(run(settings))``.

    Exit codes: 0 after a clean stop, 2 for invalid settings (message names the
    variable), 1 when the bus or another dependency is unavailable.
    """
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"cascade {name}: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(settings))
    except ConfigError as exc:
        print(f"cascade {name}: {exc}", file=sys.stderr)
        return 2
    except (BusUnavailableError, CascadeError) as exc:
        print(f"cascade {name}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


@dataclass(frozen=True)
class Service:
    """One service: its name, whether it needs object storage, and its wiring function.

    ``start(ctx, **options)`` lists the service's subscriptions and workers (through
    ``ctx.run_worker`` / ``ctx.subscribe``, drained on stop) and anything else it runs.
    :meth:`run` is the service's ``run(settings, *, bus, storage, stop, **options)``;
    :func:`service_main` its ``python -m services.<name>``.
    """

    name: str
    start: Callable[..., Awaitable[None]]
    uses_storage: bool = True

    async def run(
        self,
        settings: Settings,
        *,
        bus: Bus | None = None,
        storage: Storage | None = None,
        stop: asyncio.Event | None = None,
        **options: Any,
    ) -> None:
        """Run until ``stop`` is set (or SIGTERM/SIGINT when no ``stop`` is given)."""

        async def setup(ctx: ServiceContext) -> None:
            await self.start(ctx, **options)

        await serve(self.name, settings, setup, bus=bus, storage=storage, stop=stop,
                    use_storage=self.uses_storage, install_signals=stop is None)


def service_main(service: Service, **options: Any) -> int:
    """Body of ``python -m services.<name>`` (see :func:`main` for the exit codes)."""
    return main(service.name, functools.partial(service.run, **options))
