"""Traces through the real stack: presigned uploads -> ingest -> prepare -> bundle ready.

Real nats-server (private to this module), real SeaweedFS, the api, ingest
and prepare services running in-process.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from cascade.platform.bundlecache import fetch_bundle
from cascade.traces.bundle import load_bundle
from programs.client import ApiError
from tests.support.traces_stack import REAL_TRACE, TracesStack, traces_stack, write_kernels

pytestmark = pytest.mark.timeout(120)
__all__ = ["traces_stack"]


async def _upload_folder(stack: TracesStack, trace_id: str, folder: Path) -> list[str]:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    async with stack.client() as api:
        await api.upload_files(trace_id, files)
    return [p.name for p in files]


async def test_real_v4_trace_becomes_a_ready_bundle(traces_stack: TracesStack, tmp_path: Path) -> None:
    async with traces_stack.client() as api:
        trace = await api.create_trace(name="matrixmul", source_gpu="SM61_P4", workload="matrixMul 32x32")
        assert trace["state"] == "receiving" and trace["source_gpu"] == "SM61_P4"
        names = await _upload_folder(traces_stack, trace["id"], REAL_TRACE)
        assert "kernel-1.traceg" in names
        await api.seal(trace["id"])
        ready = await api.wait_for_state(trace["id"], {"ready", "failed", "incomplete"}, timeout=60)
        assert ready["state"] == "ready", ready
        assert ready["kernels_total"] == 1 and ready["kernels_prepared"] == 1
        assert ready["bundle_kernels"] == 1
        assert ready["bundle_key"] == f"bundles/{trace['id']}/{ready['bundle_hash']}/"
        assert {f["name"] for f in ready["files"]} == set(names)
        kernels = await api.kernels(trace["id"])
        assert kernels["source"] == "bundle" and kernels["total"] == 1
        row = kernels["kernels"][0]
        assert row["kernel_id"] == 1 and row["block_x"] == 32 and row["block_y"] == 32
        assert row["warp_insts"] == 4416
        listed = await api.list_traces()
        assert trace["id"] in {t["id"] for t in listed}
    record = await traces_stack.store.require(trace["id"])
    local = await fetch_bundle(traces_stack.storage, record, tmp_path / "cache")
    bundle = load_bundle(local)
    assert bundle.hash == record.bundle_hash
    assert bundle.manifest.source_gpu == "SM61_P4" and len(bundle.kernels) == 1
    again = await fetch_bundle(traces_stack.storage, record, tmp_path / "cache")
    assert again == local


async def test_generated_xz_trace_with_multipart_upload(traces_stack: TracesStack, tmp_path: Path) -> None:
    paths = write_kernels(tmp_path / "gen", 12, blocks=4, iterations=2)
    big = tmp_path / "gen" / "kernel-13.traceg"
    write_kernels(tmp_path / "big", 1, blocks=40, iterations=6, xz=False, first=13, repeat=4)
    (tmp_path / "big" / "kernel-13.traceg").rename(big)
    listing = (tmp_path / "gen" / "kernelslist.g").read_text() + "kernel-13.traceg\n"
    (tmp_path / "gen" / "kernelslist.g").write_text(listing)
    assert big.stat().st_size > traces_stack.settings.multipart_threshold_bytes
    async with traces_stack.client() as api:
        trace = await api.create_trace(name="gen", source_gpu="NVIDIA A100-SXM4-80GB")
        assert trace["source_gpu"].startswith("SM80_A100")
        answer = await api.request_uploads(trace["id"], [(big.name, big.stat().st_size)])
        target = answer["uploads"][0]
        assert target["multipart"]["parts"] and len(target["multipart"]["parts"]) >= 2
        await api.upload_target(trace["id"], target, big)
        await api.upload_files(trace["id"], [*paths, tmp_path / "gen" / "kernelslist.g"])
        await api.seal(trace["id"])
        ready = await api.wait_for_state(trace["id"], {"ready", "failed", "incomplete"}, timeout=60)
        assert ready["state"] == "ready", ready
        assert ready["kernels_prepared"] == 13 == ready["bundle_kernels"]
        page = await api.kernels(trace["id"], limit=5, sort="kernel_id", order="desc")
        assert [r["kernel_id"] for r in page["kernels"]] == [13, 12, 11, 10, 9]
        assert page["total"] == 13
        by_insts = await api.kernels(trace["id"], limit=1, sort="warp_insts", order="desc")
        assert by_insts["kernels"][0]["kernel_id"] == 13
        with pytest.raises(ApiError) as err:
            await api.kernels(trace["id"], sort="nonsense")
        assert err.value.http_status == 400 and "sort" in str(err.value)


async def test_hostile_names_sizes_and_auth_are_refused(traces_stack: TracesStack) -> None:
    async with traces_stack.client() as api:
        trace = await api.create_trace(name="hostile", source_gpu="SM90_H100")
        tid = trace["id"]
        for name in ("../kernel-1.traceg", "a/kernel-1.traceg", "..\\x", "/etc/passwd",
                     "kernel-1.traceg\x00.txt", "report.nsys-rep", "notes.txt", ".hidden.json"):
            with pytest.raises(ApiError) as err:
                await api.request_uploads(tid, [(name, 10)])
            assert err.value.http_status == 400, name
            assert err.value.body["field"] == "files[0].name"
        with pytest.raises(ApiError) as err:
            await api.request_uploads(tid, [("kernel-1.traceg", traces_stack.settings.max_upload_bytes + 1)])
        assert err.value.http_status == 400 and err.value.body["field"] == "files[0].size"
        with pytest.raises(ApiError) as err:
            await api.create_trace(name="x", source_gpu="NVIDIA GeForce Potato")
        assert err.value.http_status == 400 and "SM90_H100" in err.value.body["known"]
        with pytest.raises(ApiError) as err:
            await api.report_uploaded(tid, "kernel-7.traceg")
        assert err.value.http_status == 409 and err.value.body["state"] == "not-uploaded"
        with pytest.raises(ApiError) as err:
            await api.request("POST", f"/api/traces/{tid}/seal", json={"expected_kernels": -1})
        assert err.value.http_status == 400 and err.value.body["field"] == "expected_kernels"
        with pytest.raises(ApiError) as err:
            await api.request("GET", "/api/traces/nope.nope")
        assert err.value.http_status == 404
    async with traces_stack.client(token=None) as anon:
        with pytest.raises(ApiError) as err:
            await anon.create_trace(name="anon", source_gpu="SM90_H100")
        assert err.value.http_status == 401
        assert (await anon.get_trace(tid))["id"] == tid


async def test_presigned_url_is_scoped_to_its_key(traces_stack: TracesStack, tmp_path: Path) -> None:
    async with traces_stack.client() as api:
        trace = await api.create_trace(name="scoped", source_gpu="SM90_H100")
        answer = await api.request_uploads(trace["id"], [("stats.csv", 4)])
        url = answer["uploads"][0]["url"]
        assert f"traces/{trace['id']}/raw/stats.csv" in url
        tampered = url.replace("stats.csv", "kernelslist.g")
        async with aiohttp.ClientSession() as http:
            async with http.put(tampered, data=b"evil") as resp:
                assert resp.status == 403
            async with http.put(url, data=b"ok\n\n") as resp:
                assert resp.status == 200
        assert await traces_stack.storage.head(f"traces/{trace['id']}/raw/kernelslist.g") is None


async def test_delete_removes_objects_and_state(traces_stack: TracesStack, tmp_path: Path) -> None:
    write_kernels(tmp_path / "del", 2, blocks=2, iterations=1)
    async with traces_stack.client() as api:
        trace = await api.create_trace(name="doomed", source_gpu="SM90_H100")
        await _upload_folder(traces_stack, trace["id"], tmp_path / "del")
        await api.seal(trace["id"])
        await api.wait_for_state(trace["id"], {"ready"}, timeout=60)
        answer = await api.delete_trace(trace["id"])
        assert answer["deleted"] and answer["objects"] >= 4
        with pytest.raises(ApiError) as err:
            await api.get_trace(trace["id"])
        assert err.value.http_status == 404
    left = [o async for o in traces_stack.storage.list(f"traces/{trace['id']}/")]
    left += [o async for o in traces_stack.storage.list(f"bundles/{trace['id']}/")]
    assert left == []
    assert await traces_stack.store.files(trace["id"]) == []


async def test_read_only_trace_cannot_be_deleted(traces_stack: TracesStack) -> None:
    from cascade.platform.state import Provenance, TraceRecord

    record = TraceRecord(id="sample-ro", name="sample", source_gpu="SM90_H100", state="ready",
                         provenance=Provenance(badge="Sample", read_only=True))
    await traces_stack.store.create(record)
    async with traces_stack.client() as api:
        with pytest.raises(ApiError) as err:
            await api.delete_trace("sample-ro")
        assert err.value.http_status == 409
    assert await traces_stack.store.get("sample-ro") is not None
