"""The testbed: the embedded stack on free ports in a data directory of its own, for the tests
and the benchmarks.

Two flavours with one way of picking ports and building the environment
(:func:`~programs.embedded.layout.isolated_environment`) and one teardown (always, also when
the body raises):

- :class:`UpStack`: a real ``cascade up`` process (this interpreter, ``-m programs.cli up``)
  with its data in ``workdir/data``: :meth:`~UpStack.start` waits until ``/readyz`` answers
  200 and the banner is printed; it exposes the URL, the token, the settings reaching its NATS
  and S3 and its components' pids, kills a component (:meth:`~UpStack.kill`) or ``cascade up``
  itself (:meth:`~UpStack.crash`), and :meth:`~UpStack.stop` sends SIGTERM (SIGKILL after a
  bounded wait).
- :class:`InProcessStack`: services as tasks in the caller's event loop (their
  ``run(settings, stop=...)`` coroutines), over the NATS and S3 its settings name: a session's
  servers, a NATS of its own (``nats_dir``), or those :func:`embedded_servers` brings up with
  the production supervisor (:class:`~programs.embedded.stack.EmbeddedStack`, no services).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from cascade.errors import BusUnavailableError, CascadeError
from cascade.platform.bus import Bus, connect
from cascade.platform.log import configure_logging
from cascade.platform.settings import Settings, load_settings
from cascade.platform.storage import Storage
from programs.embedded.layout import (
    LOOPBACK,
    ComponentState,
    StackLayout,
    isolated_environment,
    load_state,
    read_credentials,
    stack_ports,
)
from programs.embedded.nats import NatsServer
from programs.embedded.stack import SERVICES, EmbeddedStack, child_environment

__all__ = [
    "InProcessStack", "StackNotUp", "UpStack", "embedded_servers", "http_status",
    "isolated_environment", "service_runner", "stack_pids", "stack_ports", "start_nats",
]

#: The checkout: the working directory of every process the testbed starts.
REPO = Path(__file__).resolve().parents[2]
#: What ``cascade up`` prints once it is up.
BANNER = "Cascade is up"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 120.0

#: A service's ``run(settings, *, stop=...)`` coroutine function.
ServiceRunner = Callable[..., Coroutine[Any, Any, None]]


class StackNotUp(CascadeError, RuntimeError):
    """The testbed's stack, or one of its services, did not come up (or stopped)."""

    code = "stack_not_up"


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status ``url`` answers with (None while nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError, http.client.HTTPException):
        # nothing listening yet; on a free port in the ephemeral range the kernel may even
        # connect the socket to itself and echo the request back (BadStatusLine)
        return None


def stack_pids(data_dir: Path) -> dict[str, int]:
    """Component name -> pid of the embedded stack in ``data_dir`` (from its ``state.json``)."""
    try:
        state = load_state(StackLayout(data_dir))
    except OSError:
        return {}
    return {c.name: c.pid for c in state.components if c.pid} if state is not None else {}


class UpStack:
    """One ``cascade up`` process in ``workdir``: data in ``workdir/data`` on free ports, the
    output of its n-th start in ``workdir/up-<n>.log``. ``settings`` become ``CASCADE_*``
    variables of its environment (:attr:`env`, which a test may still change before the
    start). As a context manager it is stopped on exit (it starts with :meth:`start`)."""

    def __init__(self, workdir: Path, **settings: str) -> None:
        self.workdir = Path(workdir)
        self.env = isolated_environment(self.workdir / "data", None, **settings)
        self.layout = StackLayout(self.workdir / "data")
        #: Base URL of the api and web UI.
        self.base = f"http://{LOOPBACK}:{self.env['CASCADE_HTTP_PORT']}"
        self.proc: subprocess.Popen[bytes] | None = None
        #: How many times it was started.
        self.starts = 0
        #: The stack's api token (known after the first start).
        self.token = ""

    @property
    def log(self) -> Path:
        """Output of the latest start."""
        return self.workdir / f"up-{max(self.starts, 1)}.log"

    def output(self, chars: int = 4000) -> str:
        """The last ``chars`` characters of :attr:`log` (0: all of it)."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:] if chars else text

    def start(self, timeout: float = START_TIMEOUT_S) -> float:
        """Start ``cascade up``; seconds until ``/readyz`` answered 200 and the banner was
        printed. Raises :class:`StackNotUp` (after stopping it) when it exits or is not up in
        ``timeout`` seconds."""
        t0 = time.monotonic()
        self.starts += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "programs.cli", "up"], env=self.env,
                                         cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        try:
            while not (self.ready() and BANNER in self.output(chars=0)):
                if self.proc.poll() is not None:
                    raise StackNotUp(f"cascade up exited with {self.proc.returncode}; see "
                                     f"{self.log}:\n{self.output()}")
                if time.monotonic() - t0 > timeout:
                    raise StackNotUp(f"{self.base}/readyz did not answer 200 within {timeout:g} s;"
                                     f" see {self.log}:\n{self.output()}")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        creds = read_credentials(self.layout)
        self.token = creds.api_token if creds is not None else ""
        return time.monotonic() - t0

    def ready(self, timeout: float = 1.0) -> bool:
        """True when ``/readyz`` answers 200."""
        return http_status(f"{self.base}/readyz", timeout) == 200

    def components(self) -> dict[str, ComponentState]:
        """``state.json``'s components by name (empty while it is being replaced)."""
        state = load_state(self.layout)
        return {c.name: c for c in state.components} if state is not None else {}

    def pids(self) -> dict[str, int]:
        """Component name -> pid of what runs now."""
        return stack_pids(self.layout.root)

    def kill(self, component: str, sig: signal.Signals = signal.SIGKILL) -> ComponentState | None:
        """Send ``sig`` to ``component``; the component as recorded when it got the signal
        (None when it had no live pid)."""
        comp = self.components().get(component)
        if comp is None or not comp.pid or not _signal(comp.pid, sig):
            return None
        return comp

    def crash(self, *, children: bool = False, extra: Sequence[int] = ()) -> list[int]:
        """SIGKILL ``cascade up`` (with ``children`` its components too, then ``extra``) and
        wait for it; the pids killed. Its children get SIGTERM as it dies; a next start reaps
        what is left."""
        if self.proc is None:
            return []
        pids = [self.proc.pid]
        if children:
            pids += [c.pid for c in self.components().values() if c.pid]
        killed = [p for p in [*pids, *extra] if _signal(p, signal.SIGKILL)]
        self.proc.wait()
        return killed

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM ``cascade up`` (it stops its children in order), wait up to ``timeout``
        seconds, then SIGKILL; its exit code (None when it never started)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def settings(self) -> Settings:
        """Settings reaching this stack's NATS and S3 (with its S3 credentials)."""
        creds = read_credentials(self.layout)
        if creds is None:
            raise StackNotUp(f"no credentials under {self.layout.root}: it never started")
        return load_settings({}, nats_url=self.env["CASCADE_NATS_URL"],
                             s3_endpoint=self.env["CASCADE_S3_ENDPOINT"],
                             s3_access_key=creds.s3_access_key, s3_secret_key=creds.s3_secret_key)

    def api(self, method: str, path: str, body: object = None, *, timeout: float = 10.0) -> Any:
        """One api call with the stack's token; its JSON answer (raises on errors)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    def try_api(self, method: str, path: str, body: object = None, *, timeout: float = 10.0) -> Any:
        """:meth:`api`, or None while the api (or what it needs) is down."""
        try:
            return self.api(method, path, body, timeout=timeout)
        except Exception:  # noqa: BLE001 - the api or a dependency is restarting
            return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# ---- in-process ---------------------------------------------------------------------------------

def service_runner(name: str) -> ServiceRunner:
    """The ``run`` coroutine function of the service ``name`` names: its part before a colon,
    one of :data:`~programs.embedded.stack.SERVICES` or ``sim`` ("sim:2": a simulator)."""
    from services import api, ingest, orchestrator, prepare, simulator

    runners: dict[str, ServiceRunner] = {
        "api": api.run, "ingest": ingest.run, "prepare": prepare.run,
        "orchestrator": orchestrator.run, "simulator": simulator.run, "sim": simulator.run}
    kind = name.split(":")[0]
    if kind not in runners:
        raise ValueError(f"no service {kind!r}: expected one of {', '.join(SERVICES)} or sim")
    return runners[kind]


def start_nats(workdir: Path, attempts: int = 3) -> NatsServer:
    """A nats-server (JetStream) of its own under ``workdir``, on a port picked like every
    testbed port (picked again when another process took it before the server bound it)."""
    for attempt in range(1, attempts + 1):
        server = NatsServer(workdir, port=stack_ports().nats)
        try:
            server.start()
        except BusUnavailableError:
            if attempt == attempts:
                raise
            continue
        return server
    raise AssertionError("unreachable")


class InProcessStack:
    """Services as tasks of the caller's event loop over the NATS and S3 ``settings`` name;
    :attr:`bus` and :attr:`storage` are the stack's own connections, open while
    :meth:`running` is. Services start and stop one by one; an ``api`` started is waited for
    until it answers :attr:`probe` with 200."""

    def __init__(self, settings: Settings, bus: Bus, storage: Storage, *,
                 probe: str = "/readyz") -> None:
        self.settings = settings
        self.bus = bus
        self.storage = storage
        self.probe = probe
        #: Base URL of the api.
        self.base = f"http://{LOOPBACK}:{settings.http_port}"
        self.tasks: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self.procs: list[subprocess.Popen[bytes]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, settings: Settings, *services: str, nats_dir: Path | None = None,
                      probe: str = "/readyz", quiet: bool = False,
                      name: str = "testbed") -> AsyncIterator[Self]:
        """The bucket, the streams and ``services`` started in order over ``settings``' NATS
        (or one of its own under ``nats_dir``) and S3; once they are up (the api answers
        ``probe``) the stack is yielded. Everything is stopped on exit, also on an exception;
        with ``quiet`` a service that fails while stopping is no error."""
        async with contextlib.AsyncExitStack() as exits:
            if nats_dir is not None:
                nats = await asyncio.to_thread(start_nats, nats_dir)
                exits.callback(nats.stop)
                settings = settings.replace(nats_url=nats.url)
            storage = await exits.enter_async_context(Storage.from_settings(settings))
            await storage.ensure_bucket()
            bus = await connect(settings, name=name)
            exits.push_async_callback(bus.close)
            await bus.ensure_streams()
            stack = cls(settings, bus, storage, probe=probe)
            exits.push_async_callback(stack.close, quiet=quiet)
            for service in services:
                await stack.start(service)
            if "api" in stack.tasks:
                await stack.wait_http()
            yield stack

    @property
    def env(self) -> dict[str, str]:
        """Environment of a service run as a process of its own with these settings."""
        return child_environment(self.settings)

    async def start(self, name: str, runner: ServiceRunner | None = None, **overrides: Any) -> None:
        """Run service ``name`` as a task (``runner``, else the one its name names), its
        settings with ``service_name=name`` and ``overrides``."""
        run = runner if runner is not None else service_runner(name)
        settings = self.settings.replace(service_name=name, **overrides)
        stop = asyncio.Event()
        self.tasks[name] = (asyncio.create_task(run(settings, stop=stop), name=name), stop)
        if name == "api":
            await self.wait_http(port=settings.http_port)

    async def stop(self, name: str, timeout: float = 30.0) -> None:
        """Stop service ``name`` and wait for it to drain (its error, if it failed, raises)."""
        task, stop = self.tasks.pop(name)
        stop.set()
        await asyncio.wait_for(task, timeout)

    def check_services(self) -> None:
        """Raise :class:`StackNotUp` naming a service whose task has ended."""
        for name, (task, _stop) in self.tasks.items():
            if task.done():
                exc = None if task.cancelled() else task.exception()
                raise StackNotUp(f"service {name} stopped: {exc!r}") from exc

    async def wait_http(self, path: str | None = None, timeout: float = 30.0, *,
                        port: int | None = None) -> None:
        """Wait until the api answers ``path`` (:attr:`probe`) with 200; a service that ended
        meanwhile raises here."""
        url = f"http://{LOOPBACK}:{port or self.settings.http_port}{path or self.probe}"
        deadline = time.monotonic() + timeout
        last: object = "no answer"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as session:
            while True:
                self.check_services()
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                        last = resp.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last = exc
                if time.monotonic() >= deadline:
                    raise StackNotUp(f"{url} did not answer 200 within {timeout:g} s; last: {last!r}")
                await asyncio.sleep(0.1)

    def spawn(self, service: str, log: Path) -> subprocess.Popen[bytes]:
        """``python -m services.<service>`` as a process of its own with these settings
        (killed on :meth:`close`), its output in ``log``."""
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", f"services.{service}"], cwd=REPO,
                                    env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    async def close(self, *, quiet: bool = False) -> None:
        """Kill the spawned processes, then stop every service in start order; the first
        service that fails to stop raises once all are stopped (unless ``quiet``)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        failed: BaseException | None = None
        for name in list(self.tasks):
            try:
                await self.stop(name)
            except Exception as exc:  # noqa: BLE001 - the others are stopped before it raises
                failed = failed or exc
        if failed is not None and not quiet:
            raise failed


@contextlib.asynccontextmanager
async def embedded_servers(data_dir: Path, **settings: str) -> AsyncIterator[Settings]:
    """NATS and S3 of a stack of its own in ``data_dir`` (free ports, ``settings`` as for
    :func:`isolated_environment`), brought up in this event loop by the production supervisor
    with no services: the settings reaching them (its ``api_tokens`` end with the stack's own
    token, its ``http_port`` is free for an api). Stopped on exit, also on an exception. The
    supervisor logs to stderr at the settings' level."""
    config = load_settings(isolated_environment(data_dir, None, **settings))
    configure_logging(config, "testbed")
    up = EmbeddedStack(config, services=())
    try:
        await up.start()
        assert up.child_settings is not None
        yield up.child_settings
    finally:
        await up.stop()
