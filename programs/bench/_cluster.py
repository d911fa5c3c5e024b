"""The cluster topology on one machine: three clustered nats-servers, S3, every service a
process of its own.

:class:`ClusterTopology` starts, on loopback ports under one work directory:

- three ``nats-server``s in one cluster (``--cluster``/``--routes``), JetStream on each; the
  streams and KV buckets are created with 3 replicas (``CASCADE_STREAM_REPLICAS=3``) and every
  client gets all three URLs (``CASCADE_NATS_URL=a,b,c``);
- SeaweedFS as the S3 server;
- the orchestrator (``pool`` backend), two api replicas and N pool simulators, each a
  ``python -m services.<name>`` process with its own data directory (so each simulator keeps
  its own bundle cache, as separate machines would).

Jobs are acknowledged within ``ack_wait_s`` (15 s, half the default): a NATS node lost takes a
few seconds of consumer leader election during which a job's heartbeats may not land, and at
5 s three deliveries of a job still running could pass before the new leader counts them.

Any part can be killed with SIGKILL and started again on the same ports and data
(:meth:`kill`, :meth:`restart`), which is what ``cascade bench cluster`` and
``tests/integration/test_cluster.py`` do mid-run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

from cascade.platform.settings import Settings, load_settings
from programs.embedded.binaries import nats_server_binary, weed_binary
from programs.embedded.ports import GRPC_OFFSET, can_connect, free_ports
from programs.embedded.procs import spawn, stop_popen, wait_until
from programs.embedded.seaweed import (
    generate_credentials,
    pick_ports,
    weed_mini_argv,
    write_s3_config,
)

REPO = Path(__file__).resolve().parents[2]
NATS_NODES = 3


class ClusterTopology:
    """Three NATS nodes, S3, orchestrator, two apis and pool simulators as processes."""

    def __init__(self, workdir: Path, *, simulators: int = 3, apis: int = 2,
                 ack_wait_s: float = 15.0) -> None:
        self.workdir = Path(workdir)
        self.simulators = simulators
        self.apis = apis
        self.ack_wait_s = ack_wait_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.argv: dict[str, tuple[list[str], dict[str, str] | None]] = {}
        access, secret = generate_credentials()
        self.s3_access, self.s3_secret = access, secret
        self.s3_ports = pick_ports()
        # One draw for every other port, none of them an S3 component's (or its gRPC port's):
        # ports drawn one by one could repeat, and an api once answered with a NATS node's INFO.
        s3 = {p + d for p in msgspec.structs.astuple(self.s3_ports) for d in (0, GRPC_OFFSET)}
        ports = free_ports(2 * NATS_NODES + apis, avoid=s3)
        self.nats_ports = ports[:NATS_NODES]
        self.route_ports = ports[NATS_NODES:2 * NATS_NODES]
        self.api_ports = ports[2 * NATS_NODES:]
        self.restarts: dict[str, int] = {}

    # -- addresses ----------------------------------------------------------------------------
    @property
    def nats_url(self) -> str:
        """Every node's client URL, comma-separated (as clients are configured)."""
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.nats_ports)

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_ports.s3}"

    def api_url(self, i: int) -> str:
        """Base URL of api replica ``i``."""
        return f"http://127.0.0.1:{self.api_ports[i]}"

    def settings(self, **overrides: Any) -> Settings:
        """Settings of a client of this topology (the environment ignored)."""
        return load_settings({}, nats_url=self.nats_url, stream_replicas=NATS_NODES,
                             s3_endpoint=self.s3_endpoint, s3_access_key=self.s3_access,
                             s3_secret_key=self.s3_secret, nats_connect_timeout_s=10.0,
                             **overrides)

    def _env(self, name: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
        env.update(
            CASCADE_NATS_URL=self.nats_url, CASCADE_STREAM_REPLICAS=str(NATS_NODES),
            CASCADE_S3_ENDPOINT=self.s3_endpoint, CASCADE_S3_ACCESS_KEY=self.s3_access,
            CASCADE_S3_SECRET_KEY=self.s3_secret, CASCADE_SAMPLES="false",
            CASCADE_ORCHESTRATOR_BACKEND="pool", CASCADE_JOB_ACK_WAIT_S=str(self.ack_wait_s),
            CASCADE_DATA_DIR=str(self.workdir / name), CASCADE_LOG_FORMAT="json",
            CASCADE_LOG_LEVEL="warning", CASCADE_SERVICE_NAME=name, CASCADE_DRAIN_TIMEOUT_S="2",
            CASCADE_NATS_CONNECT_TIMEOUT_S="20",
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
        env.update(extra)
        return env

    # -- processes ----------------------------------------------------------------------------
    def _start(self, name: str) -> None:
        argv, env = self.argv[name]
        (self.workdir / name).mkdir(parents=True, exist_ok=True)
        self.procs[name] = spawn(argv, self.workdir / f"{name}.log", env=env, cwd=REPO)

    def _nats_argv(self, i: int) -> list[str]:
        routes = ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(self.route_ports) if j != i)
        return [str(nats_server_binary()), "-js", "-n", f"cascade-{i}", "-a", "127.0.0.1",
                "-p", str(self.nats_ports[i]), "--cluster_name", "cascade",
                "--cluster", f"nats://127.0.0.1:{self.route_ports[i]}", "--routes", routes,
                "-sd", str(self.workdir / f"nats-{i}" / "jetstream")]

    def start(self, timeout: float = 90.0) -> float:
        """Start everything; returns once both apis answer /readyz 200 (seconds taken)."""
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for i in range(NATS_NODES):
            self.argv[f"nats-{i}"] = (self._nats_argv(i), None)
            self._start(f"nats-{i}")
        config = write_s3_config(self.workdir / "s3-identities.json", self.s3_access, self.s3_secret)
        (self.workdir / "s3" / "data").mkdir(parents=True, exist_ok=True)
        self.argv["s3"] = (weed_mini_argv(weed_binary(), self.workdir / "s3" / "data",
                                          self.s3_ports, config), None)
        self._start("s3")
        if not wait_until(lambda: all(can_connect("127.0.0.1", p) for p in self.nats_ports)
                          and can_connect("127.0.0.1", self.s3_ports.s3), timeout):
            raise RuntimeError(f"NATS nodes or S3 did not listen within {timeout:g} s")
        asyncio.run(self._bootstrap(timeout))
        py = sys.executable
        self.argv["orchestrator"] = ([py, "-m", "services.orchestrator"], self._env("orchestrator"))
        for i in range(self.apis):
            self.argv[f"api-{i}"] = ([py, "-m", "services.api"],
                                     self._env(f"api-{i}", CASCADE_HTTP_PORT=str(self.api_ports[i])))
        for i in range(self.simulators):
            self.argv[f"sim-{i}"] = ([py, "-m", "services.simulator", "--worker-label", f"sim-{i}"],
                                     self._env(f"sim-{i}"))
        for name in ("orchestrator", *(f"api-{i}" for i in range(self.apis)),
                     *(f"sim-{i}" for i in range(self.simulators))):
            self._start(name)
        for i in range(self.apis):
            def up(i: int = i) -> bool:
                return self.ready(i)

            if not wait_until(up, timeout - (time.monotonic() - t0)):
                raise RuntimeError(f"api-{i} not ready; see {self.workdir / f'api-{i}.log'}")
        return time.monotonic() - t0

    async def _bootstrap(self, timeout: float) -> None:
        """Streams, KV buckets (3 replicas) and the bucket, once JetStream has a leader."""
        from cascade.platform.bus import connect
        from cascade.platform.storage import Storage

        settings = self.settings()
        deadline = time.monotonic() + timeout
        while True:
            try:
                bus = await connect(settings, name="cascade-cluster-bootstrap")
                try:
                    await bus.ensure_streams()
                finally:
                    await bus.close()
                break
            except Exception:  # noqa: BLE001 - no meta leader yet: JetStream answers "unavailable"
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        while True:
            try:
                async with Storage.from_settings(settings) as storage:
                    await storage.ensure_bucket()
                return
            except Exception:  # noqa: BLE001 - the S3 gateway comes up after its volume server
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    def ready(self, i: int) -> bool:
        """True when api replica ``i`` answers /readyz 200."""
        try:
            with urllib.request.urlopen(f"{self.api_url(i)}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def kill(self, name: str) -> int:
        """SIGKILL one part (``nats-1``, ``api-0``, ``sim-2``...); returns its pid."""
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return proc.pid

    def restart(self, name: str) -> None:
        """Start a killed part again with the same command line (ports, data)."""
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self._start(name)

    def stop(self) -> None:
        """Stop everything (services first, then S3 and NATS). Idempotent."""
        order = [n for n in self.procs if not n.startswith(("nats-", "s3"))]
        order += [n for n in self.procs if n.startswith(("s3", "nats-"))]
        for name in order:
            proc = self.procs.pop(name)
            if proc.poll() is None:
                stop_popen(proc, 10)
