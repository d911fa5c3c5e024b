"""`cascade import` as users expect: one-line errors with consistent exit codes, the token
from the local data dir, and re-import rules (resume only on request or an agreeing name; a
sealed trace is never reused); run as subprocesses against real servers."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from programs.embedded.ports import free_port
from programs.embedded.stack import Credentials, StackLayout
from tests.support.paths import REPO
from tests.support.traces_stack import TOKEN, TracesStack, running_stack

pytestmark = [pytest.mark.timeout(180)]



def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no CASCADE_* from outside, a private per-user state dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env["XDG_STATE_HOME"] = str(tmp / "xdg-state")
    env["CASCADE_DATA_DIR"] = str(tmp / "no-stack-here")
    env.update(extra)
    return env


async def _cascade(*argv: str, env: dict[str, str], cwd: Path = REPO) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "programs.cli", *argv, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _folder(tmp: Path, name: str) -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "kernels.csv").write_text("name,duration_ns\nsgemm,1000\nsgemm,2000\n")
    return folder


def _last_line(err: str) -> str:
    """The error line after the import's one-line notes."""
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---- no app: the connection errors ---------------------------------------------------------
async def test_unreachable_app_is_one_line_exit_2(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "t")
    port = free_port()
    rc, _out, err = await _cascade("import", str(folder), "--source-gpu", "SM80_A100",
                                   "--url", f"http://127.0.0.1:{port}", env=_env(tmp_path))
    assert rc == 2
    assert _one_line(err) == (
        f"cascade import: cannot reach the Cascade app at http://127.0.0.1:{port} (connection "
        "refused); start it with `make run` or `cascade up`, or pass --url")


async def test_app_that_never_answers_times_out_in_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "t")
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        rc, _out, err = await _cascade("import", str(folder), "--source-gpu", "SM80_A100",
                                       "--url", f"http://127.0.0.1:{port}", "--timeout", "1",
                                       env=_env(tmp_path))
    assert rc == 2
    assert "(timed out after 1s); start it with" in _one_line(err)


async def test_app_failing_with_500_is_one_line_exit_1(tmp_path: Path) -> None:
    async def boom(_request: web.Request) -> web.Response:
        return web.json_response({"error": "internal", "message": "the bus\nis down"}, status=500)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", boom)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        rc, _out, err = await _cascade("import", str(_folder(tmp_path, "t")), "--source-gpu",
                                       "SM80_A100", "--url", f"http://127.0.0.1:{port}",
                                       "--token", "x", env=_env(tmp_path))
    finally:
        await runner.cleanup()
    assert rc == 1
    assert _one_line(err) == (f"cascade import: the app at http://127.0.0.1:{port} failed (500 "
                              "internal: the bus is down); see its logs (`cascade status` shows "
                              "where)")


# ---- a real app ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
async def stack(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracesStack]:
    async with running_stack(s3_server, tmp_path_factory.mktemp("importux")) as s:
        yield s


def _data_dir_with_token(tmp: Path, token: str) -> Path:
    layout = StackLayout(tmp / "data")
    layout.create()
    creds = Credentials(s3_access_key="k", s3_secret_key="s", api_token=token,
                        created_at="2026-01-01T00:00:00+00:00")
    layout.credentials.write_bytes(msgspec.json.encode(creds))
    return layout.root


async def _traces(stack: TracesStack) -> dict[str, dict[str, Any]]:
    async with stack.client() as api:
        return {t["id"]: t for t in await api.list_traces()}


async def test_wrong_token_is_one_line_naming_where_it_was_read(stack: TracesStack,
                                                                tmp_path: Path) -> None:
    folder = _folder(tmp_path, "t")
    url = stack.base_url
    base = ["import", str(folder), "--source-gpu", "SM80_A100", "--url", url]
    before = await _traces(stack)
    rc, _, err = await _cascade(*base, "--token", "wrong", env=_env(tmp_path))
    assert rc == 2
    assert _one_line(err) == (f"cascade import: the app at {url} refused the token (401 "
                              "unauthorized); it was read from --token; pass the token `cascade "
                              "up` printed with --token or $CASCADE_API_TOKEN")
    rc, _, err = await _cascade(*base, env=_env(tmp_path, CASCADE_API_TOKEN="wrong"))
    assert rc == 2 and "it was read from $CASCADE_API_TOKEN;" in _one_line(err)
    data = _data_dir_with_token(tmp_path, "wrong")
    rc, _, err = await _cascade(*base, env=_env(tmp_path, CASCADE_DATA_DIR=str(data)))
    assert rc == 2 and f"it was read from {data / 'credentials.json'};" in _one_line(err)
    rc, _, err = await _cascade(*base, env=_env(tmp_path))
    assert rc == 2 and "needs a token (401 unauthorized) and none was found" in _one_line(err)
    assert await _traces(stack) == before  # nothing created, nothing sealed


async def test_token_is_read_from_the_local_data_dir(stack: TracesStack, tmp_path: Path) -> None:
    folder = _folder(tmp_path, "t")
    data = _data_dir_with_token(tmp_path, TOKEN)
    rc, out, err = await _cascade("import", str(folder), "--source-gpu", "SM80_A100", "--url",
                                  stack.base_url, "--quiet",
                                  env=_env(tmp_path, CASCADE_DATA_DIR=str(data)))
    assert rc == 0, err
    assert "(name t): uploaded 1, already there 0" in out


async def test_reimport_rules(stack: TracesStack, tmp_path: Path) -> None:
    env = _env(tmp_path, CASCADE_API_TOKEN=TOKEN)
    url = stack.base_url

    async def run(folder: Path, *extra: str, token_env: dict[str, str] = env) -> tuple[int, str, str]:
        return await _cascade("import", str(folder), "--source-gpu", "SM80_A100", "--url", url,
                              "--quiet", *extra, env=token_env)

    def trace_id(out: str) -> str:
        return out.split("trace ", 1)[1].split()[0]

    # a ready earlier trace holding exactly this folder: nothing to do (and no seal again)
    sealed_folder = _folder(tmp_path, "sealed")
    rc, out, err = await run(sealed_folder, "--name", "first", "--wait", "60")
    assert rc == 0 and "state ready" in out, out + err
    first = trace_id(out)
    rc, out, err = await run(sealed_folder)
    assert rc == 0, err
    assert err.strip() == (f"trace {first} (name first) already holds this folder (ready); "
                           "nothing to upload")
    assert out.startswith(f"trace {first} (name first): uploaded 0, already there 1")
    # a sealed earlier trace is never reused under a new name: the folder becomes a new trace
    rc, out, err = await run(sealed_folder, "--name", "second", "--wait", "60")
    assert rc == 0, err
    assert err.strip() == (f"the earlier upload of this folder, trace {first} (name first), is "
                           "sealed (ready); importing it as a new trace (name second)")
    second = trace_id(out)
    traces = await _traces(stack)
    assert second != first and traces[first]["name"] == "first"
    assert traces[second]["name"] == "second" and traces[second]["state"] == "ready"
    # the same with a wrong token: a clear 401, and neither trace is touched
    rc, _, err = await run(sealed_folder, "--name", "third",
                           token_env=_env(tmp_path, CASCADE_API_TOKEN="wrong"))
    assert rc == 2 and "refused the token (401 unauthorized)" in _last_line(err)
    assert await _traces(stack) == traces
    # --resume of a ready trace: a no-op when it holds this folder, else refused in one line
    rc, out, err = await run(sealed_folder, "--resume")
    assert rc == 0 and out.startswith(f"trace {second} (name second): uploaded 0"), out + err
    (sealed_folder / "kernels.csv").write_text("name,duration_ns\nsgemm,3000\n")
    rc, _, err = await run(sealed_folder, "--resume")
    assert rc == 1 and f"cannot resume trace {second} (name second): it is ready" in _one_line(err)

    # sealed incomplete (an interrupted upload): continued with --resume only
    async with stack.client() as api:
        cut = {}
        for label in ("resumed", "renewed"):
            folder = _folder(tmp_path, label)
            rc, out, err = await run(folder, "--name", label, "--no-seal")
            assert rc == 0, err
            cut[label] = (folder, trace_id(out))
            await api.seal(cut[label][1], expected_files=["kernels.csv", "stats.csv"])
            await api.wait_for_state(cut[label][1], {"incomplete"}, timeout=30)
    folder, tid = cut["renewed"]
    rc, out, err = await run(folder)
    assert rc == 0, err
    assert err.strip() == (f"the earlier upload of this folder, trace {tid} (name renewed), is "
                           "sealed (incomplete); importing it as a new trace (name renewed); "
                           "--resume continues the earlier one instead")
    assert trace_id(out) != tid
    folder, tid = cut["resumed"]
    (folder / "stats.csv").write_text("kernel,cycles\n1,2\n")  # the file it missed
    rc, out, err = await run(folder, "--resume")
    assert err.strip() == (f"resuming trace {tid} (name resumed, sealed incomplete) from the "
                           "earlier upload of this folder")
    assert out.startswith(f"trace {tid} (name resumed): uploaded 1, already there 1")
    async with stack.client() as api:
        assert (await api.wait_for_state(tid, {"ready"}, timeout=30))["state"] == "ready"

    # an unsealed earlier upload resumes when the name agrees (or none is given), saying so
    open_folder = _folder(tmp_path, "open")
    rc, out, err = await run(open_folder, "--name", "n1", "--no-seal")
    assert rc == 0, err
    unsealed = trace_id(out)
    assert not (await _traces(stack))[unsealed]["sealed"]
    rc, out, err = await run(open_folder)
    assert rc == 0, err
    assert err.strip() == (f"resuming trace {unsealed} (name n1) from the earlier upload of this "
                           "folder")
    assert out.startswith(f"trace {unsealed} (name n1): uploaded 0, already there 1")
    assert (await _traces(stack))[unsealed]["sealed"]

    # ... but not under another name without --resume
    other_folder = _folder(tmp_path, "other")
    rc, out, err = await run(other_folder, "--name", "x", "--no-seal")
    assert rc == 0, err
    kept = trace_id(out)
    rc, out, err = await run(other_folder, "--name", "y", "--no-seal")
    assert rc == 0, err
    assert err.strip() == (f"the earlier upload of this folder, trace {kept} (name x), is not "
                           "sealed and stays as it is; importing a new trace (name y); --resume "
                           "continues the earlier one instead")
    fresh = trace_id(out)
    assert fresh != kept and (await _traces(stack))[fresh]["name"] == "y"
    rc, out, err = await run(other_folder, "--name", "z", "--resume")
    assert rc == 0, err
    assert err.strip() == f"resuming trace {fresh} (name y) from the earlier upload of this folder"
    assert out.startswith(f"trace {fresh} (name y): ")
    state = json.loads((other_folder / ".cascade-import.json").read_text())
    assert [e["trace_id"] for e in state.values()] == [fresh]
    rc, _, err = await run(_folder(tmp_path, "never"), "--resume")
    assert rc == 1 and "nothing to resume: no earlier upload of" in _one_line(err)
