"""Orchestrator backends: how simulation capacity comes to exist.

Registered by name (``settings.orchestrator_backend``):

- ``local``: one ``python -m services.simulator --once`` process per queued or
  running sim, at most ``settings.max_local_sims`` at once. Each process takes
  exactly one job from the work queue and exits; a process that dies (SIGKILL)
  is replaced while its sim is unfinished, and the replacement takes the job
  when the work queue redelivers it.
- ``kubernetes``: one ``batch/v1`` Job per sim, created through
  kubernetes_asyncio from a :class:`KubernetesTemplate` (image, resources,
  service account, env); the pod runs the same ``--once`` command.
- ``pool``: long-running simulator workers pull jobs on their own
  (docker-compose scales them); the orchestrator only publishes.

A backend is told about new jobs (:meth:`Backend.submit`), sims to stop
(:meth:`Backend.cancel`, e.g. on cancel or timeout) and reads the number of
unfinished sims from the ``demand`` callable it is built with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from cascade.errors import ConfigError
from cascade.platform.log import get_logger
from cascade.platform.messages.jobs import SimJob
from cascade.platform.settings import Settings, env_var
from cascade.registry import Registry

log = get_logger("cascade.orchestrator.backends")

Demand = Callable[[], int]
#: Seconds a cancelled local simulator gets after SIGTERM before SIGKILL.
STOP_GRACE_S = 3.0


class SimRef(msgspec.Struct, frozen=True, kw_only=True):
    """A sim a backend is asked to stop: its id and the worker holding it (if known)."""

    sim_id: str
    run_id: str
    worker: str = ""


class Backend:
    """Base class of orchestrator backends (see the module docstring)."""

    name: ClassVar[str] = ""

    def __init__(self, settings: Settings, demand: Demand) -> None:
        self.settings = settings
        self.demand = demand

    async def start(self) -> None:
        """Start background work (idempotent)."""

    async def stop(self) -> None:
        """Stop background work; simulations already running may finish on their own."""

    async def submit(self, jobs: list[SimJob]) -> None:
        """Make capacity exist for newly queued jobs (already published to the work queue)."""

    async def cancel(self, sims: list[SimRef]) -> None:
        """Stop the given sims' workers where the backend can (cancel, timeout)."""

    def stats(self) -> dict[str, Any]:
        """Backend figures for the service's status answer."""
        return {"backend": self.name}


#: Orchestrator backends by name (registered at the end of this module).
BACKENDS: Registry[type[Backend]] = Registry("orchestrator backend")


def backend_names() -> list[str]:
    """Registered backend names."""
    return BACKENDS.names()


def create_backend(name: str, settings: Settings, demand: Demand, **kwargs: Any) -> Backend:
    """Instantiate the backend registered as ``name`` (UnknownNameError lists the known ones)."""
    return BACKENDS.impl(name)(settings, demand, **kwargs)


def settings_env(settings: Settings) -> dict[str, str]:
    """``CASCADE_*`` variables that reproduce ``settings`` in a child process or pod."""
    out: dict[str, str] = {}
    for field in settings.__struct_fields__:
        value = getattr(settings, field)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        out[env_var(field)] = text
    out.pop(env_var("service_name"), None)
    return out


def once_idle_timeout(settings: Settings) -> float:
    """How long a one-job simulator waits for a job: longer than a redelivery takes."""
    return max(10.0, 2 * settings.job_ack_wait_s + 5.0)


# --------------------------------------------------------------------------- pool


class PoolBackend(Backend):
    """Long-running simulator workers pull jobs; nothing to start or stop here."""

    name = "pool"


# --------------------------------------------------------------------------- local


class LocalBackend(Backend):
    """One ``--once`` simulator process per unfinished sim, at most ``max_local_sims`` at once."""

    name = "local"

    def __init__(
        self,
        settings: Settings,
        demand: Demand,
        *,
        python: str | None = None,
        log_dir: str | Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(settings, demand)
        self.python = python or sys.executable
        self.log_dir = Path(log_dir) if log_dir is not None else settings.data_path / "logs"
        self.extra_env = dict(extra_env or {})
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.spawned = 0
        self.exited = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._killers: set[asyncio.Task[None]] = set()

    def command(self) -> list[str]:
        """The argv of one simulator process."""
        return [self.python, "-m", "services.simulator", "--once",
                "--idle-timeout", f"{once_idle_timeout(self.settings):g}"]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(settings_env(self.settings))
        env["CASCADE_LOG_FORMAT"] = "json"
        env.update(self.extra_env)
        return env

    def _spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        logfile = open(self.log_dir / "simulators.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                self.command(), env=self._env(), stdin=subprocess.DEVNULL, stdout=logfile,
                stderr=subprocess.STDOUT, cwd=str(Path(__file__).resolve().parents[2]),
                start_new_session=True,
            )
        finally:
            logfile.close()
        self.procs[proc.pid] = proc
        self.spawned += 1
        log.info("simulator process started", pid=proc.pid, running=len(self.procs))

    def _reap(self) -> None:
        for pid, proc in list(self.procs.items()):
            code = proc.poll()
            if code is not None:
                del self.procs[pid]
                self.exited += 1
                if code != 0:
                    log.warning("simulator process exited", pid=pid, code=code)

    def reconcile(self) -> int:
        """Reap exited processes and start new ones up to the demand; returns processes alive."""
        self._reap()
        want = min(self.settings.max_local_sims, max(0, self.demand()))
        while len(self.procs) < want:
            self._spawn()
        return len(self.procs)

    async def _loop(self) -> None:
        while True:
            try:
                self.reconcile()
            except OSError as exc:
                log.error("cannot start a simulator process", error=str(exc))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=0.5)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="local-backend")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        for killer in list(self._killers):
            killer.cancel()
        for proc in list(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + self.settings.drain_timeout_s + 5
        while self.procs and asyncio.get_running_loop().time() < deadline:
            self._reap()
            await asyncio.sleep(0.1)
        for proc in list(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self.procs.clear()

    async def submit(self, jobs: list[SimJob]) -> None:
        self._wake.set()

    async def cancel(self, sims: list[SimRef]) -> None:
        """SIGTERM the sims' processes (a simulator then stops what it runs, e.g. Accel-Sim's
        process group) and SIGKILL any still alive after :data:`STOP_GRACE_S`."""
        for ref in sims:
            pid = _pid_of(ref.worker)
            proc = self.procs.get(pid) if pid is not None else None
            if proc is not None and proc.poll() is None:
                log.info("stopping simulator process", pid=pid, sim_id=ref.sim_id)
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                task = asyncio.create_task(self._kill_later(proc))
                self._killers.add(task)
                task.add_done_callback(self._killers.discard)
        self._wake.set()

    async def _kill_later(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = asyncio.get_running_loop().time() + STOP_GRACE_S
        while proc.poll() is None and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def stats(self) -> dict[str, Any]:
        return {"backend": self.name, "processes": len(self.procs), "spawned": self.spawned,
                "max_local_sims": self.settings.max_local_sims}


def _pid_of(worker: str) -> int | None:
    m = re.search(r":(\d+)(?:/|$)", worker)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------- kubernetes


class KubernetesTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """How the ``kubernetes`` backend builds one batch/v1 Job per sim.

    Loaded from ``{data_dir}/kubernetes.toml`` (or ``.json``) by
    :func:`load_kubernetes_template`; every field has a default.
    """

    namespace: str = "default"
    """Namespace the Jobs are created in."""
    image: str = "cascade:latest"
    """Container image holding Cascade (the docker-compose image)."""
    image_pull_policy: str = "IfNotPresent"
    service_account: str = ""
    """ServiceAccount of the pods ('' for the namespace default)."""
    resources: dict[str, dict[str, str]] = msgspec.field(
        default_factory=lambda: {"requests": {"cpu": "1", "memory": "1Gi"}})
    """Container resources (requests/limits)."""
    env: dict[str, str] = {}
    """Extra environment variables (override the CASCADE_* settings passed down)."""
    labels: dict[str, str] = {}
    """Extra labels on the Job and its pod."""
    node_selector: dict[str, str] = {}
    ttl_seconds_after_finished: int = 3600
    active_deadline_s: float | None = None
    """Job deadline; default: the sim timeout setting."""
    command: list[str] = msgspec.field(
        default_factory=lambda: ["python", "-m", "services.simulator", "--once"])
    job_name_prefix: str = "cascade-sim"
    api_url: str = ""
    """Kubernetes API server URL; '' loads in-cluster config, then ~/.kube/config."""
    token: str = ""
    """Bearer token for ``api_url`` (optional)."""
    verify_ssl: bool = True


def load_kubernetes_template(path: str | Path) -> KubernetesTemplate:
    """Read a :class:`KubernetesTemplate` from TOML or JSON; a missing file gives the defaults."""
    p = Path(path)
    if not p.exists():
        return KubernetesTemplate()
    try:
        data = tomllib.loads(p.read_text()) if p.suffix == ".toml" else json.loads(p.read_text())
        return msgspec.convert(data, KubernetesTemplate)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, msgspec.ValidationError) as exc:
        raise ConfigError(str(p), "...", f"a valid Kubernetes Job template ({exc})") from None


def job_name(prefix: str, sim_id: str) -> str:
    """A DNS-1123 Job name (<= 63 characters) for a sim."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{sim_id}".lower()).strip("-")
    if len(base) > 63:
        import hashlib

        digest = hashlib.sha256(sim_id.encode()).hexdigest()[:8]
        base = base[:54].rstrip("-") + "-" + digest
    return base


class KubernetesBackend(Backend):
    """One batch/v1 Job per sim (kubernetes_asyncio)."""

    name = "kubernetes"

    def __init__(
        self, settings: Settings, demand: Demand, *, template: KubernetesTemplate | None = None
    ) -> None:
        super().__init__(settings, demand)
        path = Path(settings.kubernetes_template) if settings.kubernetes_template else (
            settings.data_path / "kubernetes.toml")
        self.template = template or load_kubernetes_template(path)
        self._api: Any = None
        self._client: Any = None
        self.created = 0
        self.deleted = 0

    async def start(self) -> None:
        if self._api is not None:
            return
        from kubernetes_asyncio import client, config

        t = self.template
        if t.api_url:
            cfg = client.Configuration()
            cfg.host = t.api_url
            cfg.verify_ssl = t.verify_ssl
            if t.token:
                cfg.api_key = {"BearerToken": t.token}
                cfg.api_key_prefix = {"BearerToken": "Bearer"}
            self._client = client.ApiClient(configuration=cfg)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                await config.load_kube_config()
            self._client = client.ApiClient()
        self._api = client.BatchV1Api(self._client)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()
        self._client = None
        self._api = None

    def job_manifest(self, job: SimJob) -> dict[str, Any]:
        """The batch/v1 Job body for one sim."""
        t = self.template
        name = job_name(t.job_name_prefix, job.sim_id)
        env = settings_env(self.settings)
        env.update({"CASCADE_LOG_FORMAT": "json", "CASCADE_SERVICE_NAME": "simulator"})
        env.update(t.env)
        labels = {"app.kubernetes.io/name": "cascade", "app.kubernetes.io/component": "simulator",
                  "cascade/run": _label(job.run_id), "cascade/sim": _label(job.sim_id), **t.labels}
        container: dict[str, Any] = {
            "name": "simulator",
            "image": t.image,
            "imagePullPolicy": t.image_pull_policy,
            "command": [*t.command, "--worker-label", name],
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "resources": t.resources,
        }
        pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if t.service_account:
            pod_spec["serviceAccountName"] = t.service_account
        if t.node_selector:
            pod_spec["nodeSelector"] = t.node_selector
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": t.namespace, "labels": labels,
                         "annotations": {"cascade/sim-id": job.sim_id, "cascade/run-id": job.run_id}},
            "spec": {
                "backoffLimit": self.settings.job_max_deliver,
                "ttlSecondsAfterFinished": t.ttl_seconds_after_finished,
                "activeDeadlineSeconds": int(t.active_deadline_s or self.settings.sim_timeout_s) + 60,
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        }

    async def submit(self, jobs: list[SimJob]) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        await self.start()
        for job in jobs:
            body = self.job_manifest(job)
            try:
                await self._api.create_namespaced_job(namespace=self.template.namespace, body=body)
                self.created += 1
            except ApiException as exc:
                if exc.status == 409:  # already created (orchestrator restarted): fine
                    continue
                raise

    async def cancel(self, sims: list[SimRef]) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        await self.start()
        for ref in sims:
            name = job_name(self.template.job_name_prefix, ref.sim_id)
            try:
                await self._api.delete_namespaced_job(
                    name=name, namespace=self.template.namespace, propagation_policy="Background"
                )
                self.deleted += 1
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("cannot delete Kubernetes Job", job=name, status=exc.status)

    def stats(self) -> dict[str, Any]:
        return {"backend": self.name, "jobs_created": self.created, "jobs_deleted": self.deleted,
                "namespace": self.template.namespace}


def _label(value: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63].strip("-_.")
    return out or "x"


BACKENDS.register(PoolBackend.name, None, PoolBackend)
BACKENDS.register(LocalBackend.name, None, LocalBackend)
BACKENDS.register(KubernetesBackend.name, None, KubernetesBackend)
