"""A real api + ingest + prepare stack for the traces integration tests.

Each test module that imports :func:`traces_stack` gets its own ``nats-server``
(so the durable ingest/prepare consumers see only this module's traces), a
fresh bucket on the session's SeaweedFS server, and the three services running
in-process through their ``run(settings, bus=..., stop=...)`` coroutines.
Prepare workers can be stopped and started again (or run as subprocesses).
"""

from __future__ import annotations

import asyncio
import contextlib
import lzma
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cascade.platform.bus import Bus, connect
from cascade.platform.client import CascadeClient
from cascade.platform.settings import Settings, load_settings
from cascade.platform.storage import Storage
from cascade.platform.tracestore import TraceStore
from cascade.traces.generate import TraceSpec, header_text, write_kernel
from programs.embedded.nats import NatsServer
from programs.embedded.ports import free_port
from tests.support.paths import REPO
from tests.support.wait import wait_until

SHARED_DATA = REPO.parent / "shared" / "data"
REAL_TRACE = SHARED_DATA / "traces" / "matrixmul-32x32-sm61"
TOKEN = "test-token-" + "f" * 16


@dataclass
class TracesStack:
    """Handles on the running stack."""

    settings: Settings
    base_url: str
    bus: Bus
    storage: Storage
    store: TraceStore
    env: dict[str, str]
    tasks: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client(self, token: str | None = TOKEN) -> CascadeClient:
        """An api client (with the write token unless told otherwise)."""
        return CascadeClient(self.base_url, token)

    async def start(self, name: str, runner: Any, **settings: Any) -> None:
        """Run one service in-process under ``name`` (its own bus connection)."""
        stop = asyncio.Event()
        cfg = self.settings.replace(service_name=name, **settings) if settings else \
            self.settings.replace(service_name=name)
        task = asyncio.create_task(runner(cfg, stop=stop), name=name)
        self.tasks[name] = (task, stop)

    async def stop(self, name: str) -> None:
        """Stop one in-process service and wait for it to drain."""
        task, stop = self.tasks.pop(name)
        stop.set()
        await asyncio.wait_for(task, timeout=30)

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for /readyz; a service task that died raises its error here."""
        async with self.client() as api:

            async def ready() -> bool:
                for name, (task, _stop) in self.tasks.items():
                    if task.done():
                        raise RuntimeError(f"service {name} stopped: {task.exception()!r}")
                try:
                    return bool((await api.request("GET", "/readyz"))["ready"])
                except Exception:  # not listening yet, or not ready (503)
                    return False

            await wait_until(ready, timeout, what=f"the api at {self.base_url} to be ready (/readyz)")

    def spawn_prepare(self, log: Path) -> subprocess.Popen[bytes]:
        """A prepare worker as a separate process (``python -m services.prepare``)."""
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "services.prepare"], cwd=REPO, env=self.env,
                stdout=out, stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc


def stack_env(settings: Settings) -> dict[str, str]:
    """Environment that reproduces ``settings`` for a subprocess service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    for name in ("nats_url", "s3_endpoint", "s3_access_key", "s3_secret_key", "s3_region",
                 "bucket", "data_dir", "job_ack_wait_s", "job_max_deliver",
                 "reconcile_interval_s", "drain_timeout_s"):
        env[f"CASCADE_{name.upper()}"] = str(getattr(settings, name))
    env["CASCADE_LOG_FORMAT"] = "json"
    env["CASCADE_API_TOKENS"] = TOKEN
    return env


@contextlib.asynccontextmanager
async def running_stack(s3_server: Any, base: Path, *, prepare: bool = True,
                        **overrides: Any) -> AsyncIterator[TracesStack]:
    """Start NATS + the three services; stop everything on exit."""
    from services.api import run as run_api
    from services.ingest import run as run_ingest
    from services.prepare import run as run_prepare

    nats = NatsServer(base / "nats")
    nats.start()
    port = free_port()
    values: dict[str, Any] = {
        "nats_url": nats.url, "s3_endpoint": s3_server.endpoint,
        "s3_access_key": s3_server.access_key, "s3_secret_key": s3_server.secret_key,
        "s3_region": s3_server.region, "bucket": f"tr-{secrets.token_hex(5)}",
        "http_port": port, "api_tokens": [TOKEN], "data_dir": str(base / "data"),
        "reconcile_interval_s": 1.0, "job_ack_wait_s": 3.0, "drain_timeout_s": 2.0,
        "log_format": "json", "log_level": "warning", "samples": False,
        "multipart_threshold_bytes": 5 * 1024 * 1024,
    }
    values.update(overrides)
    settings = load_settings({}, **values)
    storage = Storage.from_settings(settings)
    await storage.open()
    await storage.ensure_bucket()
    bus = await connect(settings, name="traces-test")
    await bus.ensure_streams()
    stack = TracesStack(
        settings=settings, base_url=f"http://127.0.0.1:{port}", bus=bus, storage=storage,
        store=await TraceStore.open(bus), env=stack_env(settings),
    )
    try:
        await stack.start("api", run_api)
        await stack.start("ingest", run_ingest)
        if prepare:
            await stack.start("prepare", run_prepare)
        await stack.wait_ready()
        yield stack
    finally:
        for proc in stack.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for name in list(stack.tasks):
            with contextlib.suppress(Exception):
                await stack.stop(name)
        await bus.close()
        await storage.close()
        nats.stop()


@pytest.fixture(scope="module")
async def traces_stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    """api + ingest + prepare on a private NATS server and bucket (one per test module)."""
    async with running_stack(s3_server, tmp_path_factory.mktemp("traces-stack")) as stack:
        yield stack


def write_kernels(folder: Path, count: int, *, blocks: int = 8, iterations: int = 4,
                  xz: bool = True, first: int = 1, repeat: int = 1) -> list[Path]:
    """A trace folder of ``count`` generated kernels (kernel-N.traceg[.xz]) + kernelslist.g.

    One kernel body is generated (``repeat`` times over, with renumbered blocks) and
    re-headed per kernel id, so big traces are cheap; xz files are two concatenated
    xz streams (header, shared body), which the parser reads as one.
    """
    import io
    import re

    folder.mkdir(parents=True, exist_ok=True)
    spec = TraceSpec(grid=(blocks, 1, 1), block=(128, 1, 1), iterations=iterations)
    buf = io.StringIO()
    write_kernel(spec, buf)
    text = buf.getvalue()
    head = header_text(spec)
    assert text.startswith(head)
    one = text[len(head):]
    body = "".join(
        re.sub(r"thread block = (\d+),0,0", lambda m, r=r: f"thread block = {int(m.group(1)) + r * blocks},0,0", one)
        for r in range(repeat)
    ).encode()
    packed_body = lzma.compress(body, preset=0) if xz else body
    paths = []
    for kid in range(first, first + count):
        s = TraceSpec(kernel_id=kid, name=f"_Z6kernel{kid}Pf", grid=(blocks * repeat, 1, 1),
                      block=spec.block, iterations=iterations)
        header = header_text(s).encode()
        name = f"kernel-{kid}.traceg" + (".xz" if xz else "")
        path = folder / name
        path.write_bytes((lzma.compress(header, preset=0) if xz else header) + packed_body)
        paths.append(path)
    lines = ["MemcpyHtoD,0x00007f3a00000000,4096", *(p.name for p in paths)]
    (folder / "kernelslist.g").write_text("\n".join(lines) + "\n")
    return paths
