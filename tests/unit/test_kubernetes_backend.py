"""The ``kubernetes`` orchestrator backend against a small fake Kubernetes API server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cascade.errors import UnknownNameError
from cascade.platform.messages.jobs import SimJob
from cascade.platform.settings import load_settings
from services.orchestrator.backends import (
    KubernetesBackend,
    KubernetesTemplate,
    SimRef,
    backend_names,
    create_backend,
    job_name,
    load_kubernetes_template,
)


class FakeKube:
    """Just enough of the batch/v1 API: create (409 on a duplicate name) and delete Jobs."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/apis/batch/v1/namespaces/{ns}/jobs", self.create)
        app.router.add_delete("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self.delete)
        return app

    async def create(self, request: web.Request) -> web.Response:
        self.requests.append(("POST", request.path, dict(request.headers)))
        body = await request.json()
        name = body["metadata"]["name"]
        if name in self.jobs:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "reason": "AlreadyExists", "code": 409}, status=409)
        body["metadata"]["uid"] = f"uid-{len(self.jobs)}"
        self.jobs[name] = body
        return web.json_response(body, status=201)

    async def delete(self, request: web.Request) -> web.Response:
        self.requests.append(("DELETE", request.path, dict(request.headers)))
        name = request.match_info["name"]
        if self.jobs.pop(name, None) is None:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "reason": "NotFound", "code": 404}, status=404)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture
async def fake_kube() -> AsyncIterator[tuple[FakeKube, str]]:
    kube = FakeKube()
    server = TestServer(kube.app())
    await server.start_server()
    try:
        yield kube, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def _job(sim: str) -> SimJob:
    return SimJob(run_id="run-abc", sim_id=sim, trace_id="t1", bundle_key="bundles/t1/h/",
                  config="SM90_H100", replica=0)


async def test_one_job_per_sim_from_template(fake_kube: tuple[FakeKube, str]) -> None:
    kube, url = fake_kube
    settings = load_settings({}, nats_url="nats://nats.cascade:4222", job_max_deliver=4,
                             sim_timeout_s=600, orchestrator_backend="kubernetes")
    template = KubernetesTemplate(
        namespace="sims", image="registry.example/cascade:1.2", service_account="cascade-sim",
        resources={"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        env={"EXTRA": "yes"}, api_url=url, token="s3cret",
    )
    backend = create_backend("kubernetes", settings, lambda: 2, template=template)
    assert isinstance(backend, KubernetesBackend)
    await backend.start()
    try:
        await backend.submit([_job("run-abc-sm90_h100-r0"), _job("run-abc-sm90_h100-r1")])
        await backend.submit([_job("run-abc-sm90_h100-r0")])  # re-submitted after a restart: 409 ignored
        posts = [r for r in kube.requests if r[0] == "POST"]
        assert [p[1] for p in posts] == ["/apis/batch/v1/namespaces/sims/jobs"] * 3
        assert posts[0][2]["Authorization"] == "Bearer s3cret"
        assert len(kube.jobs) == 2
        body = kube.jobs[job_name("cascade-sim", "run-abc-sm90_h100-r0")]
        assert body["apiVersion"] == "batch/v1" and body["kind"] == "Job"
        assert body["metadata"]["namespace"] == "sims"
        assert body["metadata"]["labels"]["cascade/sim"] == "run-abc-sm90_h100-r0"
        assert body["spec"]["backoffLimit"] == 4
        assert body["spec"]["activeDeadlineSeconds"] == 660
        pod = body["spec"]["template"]["spec"]
        assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "cascade-sim"
        (container,) = pod["containers"]
        assert container["image"] == "registry.example/cascade:1.2"
        assert container["command"][:4] == ["python", "-m", "services.simulator", "--once"]
        assert container["resources"]["limits"] == {"memory": "8Gi"}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["CASCADE_NATS_URL"] == "nats://nats.cascade:4222"
        assert env["CASCADE_JOB_MAX_DELIVER"] == "4" and env["EXTRA"] == "yes"

        await backend.cancel([SimRef(sim_id="run-abc-sm90_h100-r1", run_id="run-abc"),
                              SimRef(sim_id="run-abc-never", run_id="run-abc")])
        deletes = [r[1] for r in kube.requests if r[0] == "DELETE"]
        assert deletes[0] == "/apis/batch/v1/namespaces/sims/jobs/" + job_name(
            "cascade-sim", "run-abc-sm90_h100-r1")
        assert set(kube.jobs) == {job_name("cascade-sim", "run-abc-sm90_h100-r0")}
        assert backend.stats()["jobs_created"] == 2
    finally:
        await backend.stop()


def test_job_names_are_dns_labels() -> None:
    long = "run-0123456789ab-" + "x" * 80 + "-r3"
    name = job_name("cascade-sim", long)
    assert len(name) <= 63 and name == name.lower()
    assert name != job_name("cascade-sim", long + "4")


def test_template_file_and_registry(tmp_path: Any) -> None:
    path = tmp_path / "kubernetes.toml"
    path.write_text('namespace = "ml"\nimage = "cascade:2"\n[env]\nA = "1"\n')
    t = load_kubernetes_template(path)
    assert (t.namespace, t.image, t.env) == ("ml", "cascade:2", {"A": "1"})
    assert load_kubernetes_template(tmp_path / "missing.toml") == KubernetesTemplate()
    path.write_text('namespace = 3\n')
    with pytest.raises(Exception, match="Kubernetes Job template"):
        load_kubernetes_template(path)
    assert backend_names() == ["kubernetes", "local", "pool"]
    with pytest.raises(UnknownNameError, match="known: kubernetes, local, pool"):
        create_backend("slurm", load_settings({}), lambda: 0)
