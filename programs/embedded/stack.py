"""``cascade up``: NATS, SeaweedFS and the five services on this machine.

Layout of ``data_dir`` (``.cascade`` by default)::

    credentials.json     S3 keys and the API token (0600), generated once, reused after
    state.json           pids, ports and state of every component (read by `cascade status`)
    nats.conf            generated nats-server config (JetStream caps, loopback only)
    nats/                JetStream store
    s3/                  SeaweedFS data (master, volumes, filer)
    s3-identities.json   SeaweedFS S3 credentials (0600); signature checks on
    s3-ports.json        ports of the SeaweedFS components (kept stable across restarts)
    logs/<component>.log output of each child, appended

(paths, credentials and state file in :mod:`.layout`; a stack of its own for tests and
benchmarks is :mod:`.testbed`'s).

Start order: NATS and S3 (in parallel), bucket + streams + KV bootstrap, then
the services ``ingest, prepare, orchestrator, simulator, api``. Stop order: the
api, then the other services together, then S3 and NATS together, each with a
bounded wait before SIGKILL. Children get their settings as ``CASCADE_*``
environment variables (see :func:`child_environment`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

import aiohttp
import msgspec

from cascade.errors import CascadeError, ConfigError, NotFoundError, StorageError
from cascade.platform.log import get_logger
from cascade.platform.settings import Settings, env_var
from cascade.platform.storage import Storage
from programs.embedded import nats as nats_conf
from programs.embedded.binaries import nats_server_binary, weed_binary
from programs.embedded.console import ConsoleMode, LogFollower
from programs.embedded.layout import (
    LOOPBACK,
    ComponentState,
    Credentials,
    StackLayout,
    StackState,
    atomic_write,
    ensure_credentials,
    isolated_environment,
    load_state,
    read_credentials,
)
from programs.embedded.locate import remember_stack
from programs.embedded.ports import GRPC_OFFSET, port_is_free, wait_port
from programs.embedded.procs import group_members, pid_alive, tail
from programs.embedded.seaweed import (
    SeaweedPorts,
    pick_ports,
    port_was_taken,
    weed_mini_argv,
    write_s3_config,
)
from programs.embedded.supervisor import SupervisedProcess

__all__ = [  # with the layout names other modules have always imported from here
    "SERVICES", "AlreadyRunningError", "ComponentStartError", "ComponentState", "Credentials",
    "EmbeddedStack", "PortBusyError", "StackLayout", "StackState", "bootstrap",
    "child_environment", "ensure_credentials", "go_environment", "isolated_environment",
    "load_state", "read_credentials", "status_report",
]

#: Services in start order (stopped in reverse).
SERVICES: tuple[str, ...] = ("ingest", "prepare", "orchestrator", "simulator", "api")

StackStatus = Literal["starting", "up", "stopping", "stopped", "failed"]


class ComponentStartError(CascadeError, RuntimeError):
    """A component of the embedded stack did not come up; names its log file."""

    code = "component_start"

    def __init__(self, component: str, reason: str, log_path: Path | None = None) -> None:
        self.component = component
        self.reason = reason
        self.log_path = log_path
        msg = f"{component} did not start: {reason}"
        if log_path is not None:
            msg += f"; see {log_path}"
            last = tail(log_path, 8)
            if last:
                msg += "\n--- last lines of the log ---\n" + last
        super().__init__(msg)


class PortBusyError(CascadeError, OSError):
    """A port the embedded stack needs is already taken."""

    code = "port_busy"


class AlreadyRunningError(CascadeError, RuntimeError):
    """Another ``cascade up`` already runs on this data directory."""

    code = "already_running"


def _is_cascade(pid: int) -> bool:
    """True when ``pid`` is alive and looks like a Cascade process (not a reused pid)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"cascade" in cmdline


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def go_environment(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the Go servers (nats-server, SeaweedFS): ``base`` with the memory
    settings as GOMEMLIMIT / GOGC, so an idle or lightly used stack gives memory back
    (SeaweedFS otherwise keeps about 400 MiB after a few imports). The limit stays above
    SeaweedFS's working heap: at 128 MiB its garbage collector ran without pause, 10-19% of a
    core on an idle stack and 3.6x the CPU of an upload (`cascade bench platform` prints both)."""
    env = dict(base if base is not None else os.environ)
    if settings.embedded_go_memory_mib:
        env["GOMEMLIMIT"] = f"{settings.embedded_go_memory_mib}MiB"
    if settings.embedded_go_gc:
        env["GOGC"] = str(settings.embedded_go_gc)
    return env


def child_environment(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a child service: ``base`` without ``CASCADE_*``, plus every setting.

    Each field ``x`` of ``settings`` becomes ``CASCADE_X`` in the form
    :func:`cascade.platform.settings.load_settings` parses back, so the child sees
    exactly these settings (a ``CASCADE_CONFIG`` file is not re-read).
    """
    env = {k: v for k, v in (base if base is not None else os.environ).items()
           if not k.startswith("CASCADE_")}
    for name in settings.__struct_fields__:
        env[env_var(name)] = _env_text(getattr(settings, name))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _url_port(url: str, default: int) -> int:
    return urlsplit(url).port or default


class SupervisedServer(SupervisedProcess):
    """A server child (nats-server or weed): supervised like a service once the stack is up,
    restarted with the same command line, hence on the same ports and data directory."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, port: int,
                 env: Mapping[str, str], *, logger: Any, on_change: Callable[[], None],
                 base_backoff_s: float = 0.25, max_backoff_s: float = 10.0) -> None:
        super().__init__(name, argv, env=env, log_path=log_path, logger=logger,
                         on_change=on_change, base_backoff_s=base_backoff_s,
                         max_backoff_s=max_backoff_s, kind="server", port=port)

    async def wait_port(self, deadline: float) -> None:
        """Wait for the port to accept connections; fail fast if the process exits."""
        proc = self.process
        assert proc is not None and self.port is not None
        exited = asyncio.create_task(proc.wait())
        listening = asyncio.create_task(wait_port(LOOPBACK, self.port, deadline))
        try:
            done, _ = await asyncio.wait({exited, listening}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (exited, listening):
                if not task.done():
                    task.cancel()
        if exited in done:
            raise ComponentStartError(
                self.name, f"process exited with code {proc.returncode}", self.log_path
            )
        if not listening.result():
            raise ComponentStartError(
                self.name, f"port {self.port} did not open in time", self.log_path
            )


class EmbeddedStack:
    """The whole local stack: start, supervise, stop."""

    def __init__(
        self,
        settings: Settings,
        *,
        out: TextIO | None = None,
        python: str = sys.executable,
        services: Sequence[str] = SERVICES,
        start_timeout_s: float = 30.0,
        ready_timeout_s: float = 60.0,
        stop_grace_s: float = 10.0,
        console: ConsoleMode = "off",
        console_out: TextIO | None = None,
        open_browser: bool = False,
    ) -> None:
        self.settings = settings
        self.layout = StackLayout(settings.data_dir)
        self.out = out if out is not None else sys.stdout
        self.python = python
        self.service_names = tuple(services)
        self.start_timeout_s = start_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.stop_grace_s = stop_grace_s
        self.log = get_logger("cascade.up")
        self.status: StackStatus = "starting"
        self.credentials: Credentials | None = None
        self.child_settings: Settings | None = None
        self.nats: SupervisedServer | None = None
        self.s3: SupervisedServer | None = None
        self.services: list[SupervisedProcess] = []
        self.started_at = time.time()
        self.ready = False
        #: Seconds from the start to the api answering /readyz (None until then).
        self.ready_after_s: float | None = None
        #: The one-time sign-in code of this start (None without a token or before the bus).
        self.signin_code: str | None = None
        self.open_browser = open_browser
        self.console = LogFollower(
            [(name, self.layout.log(name)) for name in self.service_names],
            console_out if console_out is not None else sys.stderr, mode=console,
            min_level=settings.log_level)

    # -- preparation ---------------------------------------------------------------

    async def _check_not_running(self) -> bool:
        """Refuse a second ``cascade up``; stop what a killed one left. True if it stopped any."""
        state = load_state(self.layout)
        if state is None or state.supervisor_pid == os.getpid():
            return False
        if state.status in ("starting", "up", "stopping") and _is_cascade(state.supervisor_pid):
            raise AlreadyRunningError(
                f"cascade up is already running on {self.layout.root} (pid "
                f"{state.supervisor_pid}); stop it first (Ctrl-C there, or kill "
                f"{state.supervisor_pid})"
            )
        return await self._reap_stale(state)

    async def _reap_stale(self, state: StackState) -> bool:
        """Stop children left behind by a ``cascade up`` that was killed: every process of
        each recorded component's process group (its own session) whose command line is that
        component's, even when the recorded leader itself is already gone."""
        markers = {"nats": b"nats-server", "s3": b"weed"}
        groups: dict[int, list[int]] = {}
        for comp in state.components:
            if comp.pid is None:
                continue
            members = group_members(comp.pid, markers.get(comp.name, f"services.{comp.name}".encode()))
            if members:
                groups[comp.pid] = members
        if not groups:
            return False
        stale = [p for members in groups.values() for p in members]
        self.log.warning("stopping processes left by a previous cascade up", pids=stale)
        for sig, wait_s in ((signal.SIGTERM, self.stop_grace_s), (signal.SIGKILL, 10.0)):
            for pgid in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
            # a killed process frees its ports only once it has exited: wait for that before
            # the port check, or a slow-to-die NATS / SeaweedFS reads as "port already in use"
            deadline = time.monotonic() + wait_s
            while any(pid_alive(p) for p in stale) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if not any(pid_alive(p) for p in stale):
                break
        return True

    def _seaweed_ports(self, s3_port: int) -> SeaweedPorts:
        if self.layout.s3_ports.exists():
            try:
                ports = msgspec.json.decode(self.layout.s3_ports.read_bytes(), type=SeaweedPorts)
            except msgspec.DecodeError as exc:
                raise ConfigError(str(self.layout.s3_ports), "<file>",
                                  f"SeaweedFS ports written by `cascade up` ({exc})") from None
            if ports.s3 != s3_port:
                ports = msgspec.structs.replace(ports, s3=s3_port)
        else:
            ports = pick_ports(s3_port)
        atomic_write(self.layout.s3_ports, msgspec.json.encode(ports))
        return ports

    async def _check_ports(self, nats_port: int, seaweed: SeaweedPorts, http_port: int,
                           settle_s: float = 0.0) -> None:
        """Raise :class:`PortBusyError` naming every port the stack needs that is taken;
        ``settle_s``: how long to let ports of just-stopped processes come free first."""
        deadline = time.monotonic() + settle_s
        while True:
            busy = self._busy_ports(nats_port, seaweed, http_port)
            if not busy or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
        if busy:
            raise PortBusyError(
                "cannot start the embedded stack: " + "; ".join(busy)
                + ". Stop whatever holds them or choose other ports."
            )

    def _busy_ports(self, nats_port: int, seaweed: SeaweedPorts, http_port: int) -> list[str]:
        wanted: list[tuple[int, str]] = [
            (nats_port, f"NATS (from {env_var('nats_url')})"),
            (seaweed.s3, f"S3 (from {env_var('s3_endpoint')})"),
            (seaweed.s3 + GRPC_OFFSET, "SeaweedFS S3 gRPC (S3 port + 10000)"),
            (http_port, f"the api (from {env_var('http_port')})"),
        ]
        for label, port in (("master", seaweed.master), ("volume", seaweed.volume),
                            ("filer", seaweed.filer), ("admin", seaweed.admin)):
            wanted.append((port, f"SeaweedFS {label} (recorded in {self.layout.s3_ports})"))
            wanted.append((port + GRPC_OFFSET, f"SeaweedFS {label} gRPC"))
        seen: dict[int, str] = {}
        busy: list[str] = []
        for port, what in wanted:
            if port in seen:
                busy.append(f"port {port} is wanted by both {seen[port]} and {what}")
                continue
            seen[port] = what
            if not port_is_free(port, LOOPBACK):
                busy.append(f"port {port} needed by {what} is already in use")
        return busy

    # -- state ---------------------------------------------------------------------

    def _components(self) -> list[ComponentState]:
        comps: list[ComponentState] = []
        for server in (self.nats, self.s3):
            if server is None:
                continue
            comps.append(ComponentState(
                name=server.name, kind="server", pid=server.pid, state=server.state,
                restarts=server.restarts, port=server.port, log=str(server.log_path),
            ))
        for svc in self.services:
            comps.append(ComponentState(
                name=svc.name, kind="service", pid=svc.pid, state=svc.state,
                restarts=svc.restarts,
                port=self.settings.http_port if svc.name == "api" else None,
                log=str(svc.log_path),
            ))
        return comps

    def write_state(self) -> None:
        """Record the current pids, ports and states in ``state.json``."""
        child = self.child_settings or self.settings
        state = StackState(
            supervisor_pid=os.getpid(),
            status=self.status,
            data_dir=str(self.layout.root),
            http_url=self.http_url,
            nats_url=child.nats_url,
            s3_endpoint=child.s3_endpoint,
            bucket=child.bucket,
            started_at=self.started_at,
            updated_at=time.time(),
            components=self._components(),
        )
        with contextlib.suppress(OSError):
            atomic_write(self.layout.state, msgspec.json.format(msgspec.json.encode(state)))

    @property
    def http_url(self) -> str:
        """Base URL of the api and web UI."""
        host = self.settings.http_host
        if host in ("0.0.0.0", "::", ""):
            host = LOOPBACK
        return f"http://{host}:{self.settings.http_port}"

    # -- start ---------------------------------------------------------------------

    async def start(self) -> None:
        """Bring up NATS, S3, the bootstrap and the services; raise naming what failed."""
        reaped = await self._check_not_running()
        self.layout.create()
        self.status = "starting"
        creds, created = ensure_credentials(self.layout)
        self.credentials = creds
        _, nats_port = nats_conf.nats_host_port(self.settings.nats_url)
        s3_port = _url_port(self.settings.s3_endpoint, 8333)
        picked = not self.layout.s3_ports.exists()
        seaweed = self._seaweed_ports(s3_port)
        await self._check_ports(nats_port, seaweed, self.settings.http_port,
                                settle_s=10.0 if reaped else 0.0)

        tokens = list(dict.fromkeys([*self.settings.api_tokens, creds.api_token]))
        self.child_settings = self.settings.replace(
            nats_url=f"nats://{LOOPBACK}:{nats_port}",
            s3_endpoint=f"http://{LOOPBACK}:{s3_port}",
            s3_access_key=creds.s3_access_key,
            s3_secret_key=creds.s3_secret_key,
            api_tokens=tokens,
            data_dir=str(self.layout.root),
            log_format="json",  # the log files stay JSON; the console renders them
        )
        self.log.info("starting embedded stack", data_dir=str(self.layout.root),
                      new_credentials=created)

        nats_conf.write_config(self.layout.nats_conf, host=LOOPBACK, port=nats_port,
                               store_dir=self.layout.nats_store)
        write_s3_config(self.layout.s3_config, creds.s3_access_key, creds.s3_secret_key)
        go_env = go_environment(self.settings)
        self.nats = SupervisedServer(
            "nats", nats_conf.nats_argv(nats_server_binary(), self.layout.nats_conf),
            self.layout.log("nats"), nats_port, go_env, logger=self.log, on_change=self.write_state)
        self.s3 = self._s3_server(seaweed, s3_port, go_env)
        await self.nats.start(supervise=False)
        await self.s3.start(supervise=False)
        self.write_state()
        remember_stack(self.layout.root, self.http_url)  # `cascade status` from any folder

        deadline = time.monotonic() + self.start_timeout_s
        bus_done, s3_done = await asyncio.gather(self._bootstrap_bus(deadline),
                                                 self._bootstrap_s3(deadline), return_exceptions=True)
        if isinstance(bus_done, BaseException):
            raise bus_done
        if isinstance(s3_done, BaseException):
            if not (picked and isinstance(s3_done, ComponentStartError)
                    and port_was_taken(tail(self.layout.log("s3"), 40))):
                raise s3_done
            # a port picked for SeaweedFS was taken between the pick and its start (another
            # process's connection, say): once more, on newly picked ports
            self.log.warning("a SeaweedFS port was taken; starting it on other ports")
            self.layout.s3_ports.unlink(missing_ok=True)
            seaweed = self._seaweed_ports(s3_port)
            self.s3 = self._s3_server(seaweed, s3_port, go_env)
            await self.s3.start(supervise=False)
            await self._bootstrap_s3(time.monotonic() + self.start_timeout_s)
        # from here on a server that dies is restarted (same ports, same data) like a service
        self.nats.supervise()
        self.s3.supervise()
        await self._start_services()
        self.write_state()
        self.ready = await self._wait_ready(time.monotonic() + self.ready_timeout_s)
        if self.ready:
            self.ready_after_s = time.time() - self.started_at
        self.status = "up"
        self.write_state()

    def _s3_server(self, seaweed: SeaweedPorts, s3_port: int, env: Mapping[str, str]) -> SupervisedServer:
        return SupervisedServer(
            "s3", weed_mini_argv(weed_binary(), self.layout.s3_data, seaweed, self.layout.s3_config),
            self.layout.log("s3"), s3_port, env, logger=self.log, on_change=self.write_state)

    async def _bootstrap_bus(self, deadline: float) -> None:
        from cascade.platform.bus import connect

        assert self.nats is not None and self.child_settings is not None
        await self.nats.wait_port(deadline)
        try:
            bus = await connect(self.child_settings, name="cascade-up")
        except CascadeError as exc:
            raise ComponentStartError("nats", str(exc), self.nats.log_path) from exc
        try:
            outcome = await bus.ensure_streams()
            if self.credentials is not None:
                from cascade.platform.signin import issue_code

                self.signin_code = await issue_code(bus, self.credentials.api_token)
        except CascadeError as exc:
            raise ComponentStartError("nats", f"stream bootstrap failed: {exc}",
                                      self.nats.log_path) from exc
        finally:
            await bus.close()
        self.log.info("nats ready", url=self.child_settings.nats_url, streams=outcome)

    async def _bootstrap_s3(self, deadline: float) -> None:
        assert self.s3 is not None and self.child_settings is not None
        await self.s3.wait_port(deadline)
        last: Exception | None = None
        async with Storage.from_settings(self.child_settings, max_attempts=1,
                                         connect_timeout=2.0, read_timeout=5.0) as storage:
            while time.monotonic() < deadline:
                if self.s3.pid is None:
                    raise ComponentStartError("s3", "process exited", self.s3.log_path)
                try:
                    created = await storage.ensure_bucket()
                    await storage.ping()
                except (StorageError, NotFoundError) as exc:
                    last = exc
                    await asyncio.sleep(0.1)
                    continue
                self.log.info("s3 ready", endpoint=self.child_settings.s3_endpoint,
                              bucket=storage.bucket, bucket_created=created)
                return
        raise ComponentStartError("s3", f"bucket bootstrap failed: {last}", self.s3.log_path)

    async def _start_services(self) -> None:
        assert self.child_settings is not None
        env = child_environment(self.child_settings)
        for name in self.service_names:
            svc = SupervisedProcess(
                name,
                [self.python, "-m", f"services.{name}"],
                env=env,
                log_path=self.layout.log(name),
                logger=self.log,
                on_change=self.write_state,
            )
            self.services.append(svc)
            await svc.start()

    async def _wait_ready(self, deadline: float) -> bool:
        if "api" not in self.service_names:
            return True
        url = f"{self.http_url}/readyz"
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url) as resp:
                        if resp.status == 200:
                            return True
                await asyncio.sleep(0.1)
        self.log.warning("api not ready in time", url=url, log=str(self.layout.log("api")))
        return False

    # -- stop ----------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the api, then the other services together, then S3 and NATS; idempotent."""
        if self.status == "stopped":
            return
        self.status = "stopping"
        self.write_state()
        # the api first (no new work comes in), then the other services together: each hands
        # back its own in-flight work and none waits on another
        api = [svc for svc in self.services if svc.name == "api"]
        for svc in api:
            await svc.stop(self.stop_grace_s)
        await asyncio.gather(*(svc.stop(self.stop_grace_s) for svc in reversed(self.services)
                               if svc not in api))
        # the servers together: nothing uses either any more
        await asyncio.gather(*(server.stop(self.stop_grace_s) for server in (self.s3, self.nats)
                               if server is not None))
        self.write_state()
        self.status = "stopped"
        self.write_state()

    # -- foreground run ------------------------------------------------------------

    @property
    def signin_link(self) -> str | None:
        """The one-time sign-in link of this start (None when there is no code)."""
        from cascade.platform.signin import signin_url

        return signin_url(self.http_url, self.signin_code) if self.signin_code else None

    def banner(self) -> str:
        """What ``cascade up`` prints once everything is started."""
        child = self.child_settings or self.settings
        token = self.credentials.api_token if self.credentials else "(none)"
        after = f" in {self.ready_after_s:.1f} s" if self.ready_after_s is not None else ""
        lines = [
            f"Cascade is up{after}: {self.http_url}" + (
                "" if self.ready else f"  (api not ready yet; see {self.layout.log('api')})"),
        ]
        if self.signin_link:
            lines.append(f"  Sign in   : {self.signin_link}   (opens the UI signed in; works once)")
        if child.samples:
            lines.append("  Sample    : opt125m-h100-e2e, answering in the Request simulator and /v1")
        lines += [
            f"  API token : {token}   (kept in {self.layout.credentials})",
            f"  NATS      : {child.nats_url}",
            f"  S3        : {child.s3_endpoint}  bucket {child.bucket}",
            f"  Data      : {self.layout.root}   logs in {self.layout.logs}",
            "  Stop with Ctrl-C (everything is kept for the next `cascade up`).",
        ]
        return "\n".join(lines)

    def _open_browser(self) -> None:
        import webbrowser

        url = self.signin_link or self.http_url
        # without a display Python would try a console browser (lynx, w3m) on this terminal
        graphical = sys.platform in ("darwin", "win32") or bool(
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("BROWSER"))
        if not graphical or not webbrowser.open(url):
            print("  (no browser to open here: open the sign-in link above)", file=self.out, flush=True)

    async def run(self, stop: asyncio.Event) -> int:
        """Start, print the banner, supervise until ``stop`` is set, then stop everything."""
        self.console.start()
        start = asyncio.create_task(self.start(), name="cascade-up-start")
        stopped = asyncio.create_task(stop.wait(), name="cascade-up-stop-signal")
        try:
            done, _ = await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if start in done:
                start.result()
                self.console.poll()  # the start's lines before the banner
                print(self.banner(), file=self.out, flush=True)
                if self.open_browser:
                    await asyncio.to_thread(self._open_browser)
                await stopped
            else:
                start.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await start
        except BaseException:
            self.status = "failed"
            raise
        finally:
            stopped.cancel()
            failed = self.status == "failed"
            await self.stop()
            await self.console.stop()
            if failed:
                self.status = "failed"
                self.write_state()
        return 0


async def bootstrap(settings: Settings, *, wait_s: float = 60.0) -> dict[str, Any]:
    """Create the bucket, streams and KV buckets (idempotent), retrying for ``wait_s`` seconds.

    Returns ``{"bucket": "created" | "ok", <stream or KV name>: "created" | "updated" | "ok"}``.
    Raises the last :class:`BusUnavailableError` / :class:`StorageError` when time runs out.
    """
    from cascade.errors import BusUnavailableError
    from cascade.platform.bus import connect

    log = get_logger("cascade.bootstrap")
    deadline = time.monotonic() + wait_s
    delay = 0.25
    while True:
        try:
            async with Storage.from_settings(settings, max_attempts=1) as storage:
                created = await storage.ensure_bucket()
            bus = await connect(settings, name="cascade-bootstrap")
            try:
                outcome: dict[str, Any] = {"bucket": "created" if created else "ok"}
                outcome.update(await bus.ensure_streams())
            finally:
                await bus.close()
            return outcome
        except (BusUnavailableError, StorageError) as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.info("bootstrap waiting for dependencies", error=str(exc), retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def status_report(settings: Settings, *, timeout: float = 2.0) -> dict[str, Any]:
    """What ``cascade status`` shows: recorded state, live pids and the api's /api/status."""
    layout = StackLayout(settings.data_dir)
    state = load_state(layout)
    report: dict[str, Any] = {"data_dir": str(layout.root), "running": False, "components": []}
    if state is None:
        report["status"] = "never started"
        return report
    supervisor_alive = pid_alive(state.supervisor_pid)
    report.update(
        status=state.status if supervisor_alive else "stopped",
        supervisor_pid=state.supervisor_pid if supervisor_alive else None,
        http_url=state.http_url,
        nats_url=state.nats_url,
        s3_endpoint=state.s3_endpoint,
    )
    comps = []
    for comp in state.components:
        alive = supervisor_alive and comp.pid is not None and pid_alive(comp.pid)
        comps.append({
            "name": comp.name, "kind": comp.kind, "up": alive,
            "pid": comp.pid if alive else None,
            "state": comp.state if supervisor_alive else "stopped",
            "restarts": comp.restarts, "port": comp.port, "log": comp.log,
        })
    report["components"] = comps
    report["running"] = supervisor_alive and bool(comps) and all(c["up"] for c in comps)
    if supervisor_alive:
        report["api"] = _fetch_json(f"{state.http_url}/api/status", timeout)
    return report


def _fetch_json(url: str, timeout: float) -> Any:
    import http.client
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        return {"error": f"{url} unreachable: {exc}"}
