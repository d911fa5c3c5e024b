"""A real api + ingest + prepare stack for the traces integration tests.

Each test module that imports :func:`traces_stack` gets its own ``nats-server``
(so the durable ingest/prepare consumers see only this module's traces), a
fresh bucket on the session's SeaweedFS server, and the three services running
in-process through their ``run(settings, stop=...)`` coroutines (the testbed's
:class:`~programs.embedded.testbed.InProcessStack`). Prepare workers can be stopped and
started again (or run as subprocesses).
"""

from __future__ import annotations

import contextlib
import lzma
import secrets
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cascade.platform.settings import load_settings
from cascade.platform.tracestore import TraceStore
from cascade.traces.generate import TraceSpec, header_text, write_kernel
from programs.client import CascadeClient
from programs.embedded.testbed import InProcessStack, stack_ports
from tests.support.paths import REPO

SHARED_DATA = REPO.parent / "shared" / "data"
REAL_TRACE = SHARED_DATA / "traces" / "matrixmul-32x32-sm61"
TOKEN = "test-token-" + "f" * 16


class TracesStack(InProcessStack):
    """The testbed's in-process stack with the traces tests' handles."""

    store: TraceStore

    @property
    def base_url(self) -> str:
        """Base URL of the api."""
        return self.base

    def client(self, token: str | None = TOKEN) -> CascadeClient:
        """An api client (with the write token unless told otherwise)."""
        return CascadeClient(self.base, token)

    def spawn_prepare(self, log: Path) -> subprocess.Popen[bytes]:
        """A prepare worker as a separate process (``python -m services.prepare``)."""
        return self.spawn("prepare", log)


@contextlib.asynccontextmanager
async def running_stack(s3_server: Any, base: Path, *, prepare: bool = True,
                        **overrides: Any) -> AsyncIterator[TracesStack]:
    """Start NATS + the three services; stop everything on exit."""
    values: dict[str, Any] = {
        "s3_endpoint": s3_server.endpoint,
        "s3_access_key": s3_server.access_key, "s3_secret_key": s3_server.secret_key,
        "s3_region": s3_server.region, "bucket": f"tr-{secrets.token_hex(5)}",
        "http_port": stack_ports().http, "api_tokens": [TOKEN], "data_dir": str(base / "data"),
        "reconcile_interval_s": 1.0, "job_ack_wait_s": 3.0, "drain_timeout_s": 2.0,
        "log_format": "json", "log_level": "warning", "samples": False,
        "multipart_threshold_bytes": 5 * 1024 * 1024,
    }
    values.update(overrides)
    services = ("api", "ingest", "prepare") if prepare else ("api", "ingest")
    async with TracesStack.running(load_settings({}, **values), *services, nats_dir=base / "nats",
                                   quiet=True, name="traces-test") as stack:
        stack.store = await TraceStore.open(stack.bus)
        yield stack


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
