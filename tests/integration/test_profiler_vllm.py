"""``cascade profile vllm`` against the vLLM stand-in (tests/support/vllm_standin.py): the
server launched with the profiler dir set, a closed-loop load, every rank's trace imported as
one workload, the measured TTFT / TPOT in baseline.json; and the 404 of a server started
without VLLM_TORCH_PROFILER_DIR, told as what to do."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cascade.traces.baseline import read_baseline
from cascade.traces.inputs import load_trace
from cascade.traces.ranks import rank_of_stream
from cascade.traces.timeline import import_timeline
from programs.embedded.ports import can_connect, free_port
from tests.support.paths import REPO
from tests.support.vllm_standin import GEMM, NCCL
from tests.support.wait import wait_until_blocking

STANDIN = [sys.executable, "-m", "tests.support.vllm_standin"]


def _cascade(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "programs.cli", "profile", "vllm", *args],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_launched_server_traced_every_rank_with_its_ttft_and_tpot(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "trace"
    launch = shlex.join([*STANDIN, "--port", str(port), "--tensor-parallel-size", "2",
                         "--flush-delay", "0.5"])
    proc = _cascade("--url", f"http://127.0.0.1:{port}", "--launch", launch, "--concurrency", "4",
                    "--prompt", "64", "--output", "8", "--requests", "8", "--out", str(out),
                    "--settle", "0.3")
    assert proc.returncode == 0, proc.stderr
    assert "2 rank traces" in proc.stderr

    rank_files = sorted((out / "vllm-profile").glob("*.pt.trace.json.gz"))
    assert [p.name.split(".")[0] for p in rank_files] == ["standin_rank0", "standin_rank1"]

    table = import_timeline(out / "timeline.csv")
    assert len(load_trace(out / "timeline.csv").table) == len(table)
    ranks = np.array([rank_of_stream(int(s)) for s in table["stream"]])
    assert set(ranks) == {0, 1}
    streams = {r: set(table["stream"][ranks == r].tolist()) for r in (0, 1)}
    assert streams[0].isdisjoint(streams[1])
    names = table["name"]
    for r in (0, 1):
        assert (names[ranks == r] == GEMM).sum() > 0
        assert (names[ranks == r] == NCCL).sum() > 0
    assert (np.diff(table["kernel_id"]) == 1).all()

    base = read_baseline((out / "baseline.json").read_bytes())
    assert base.serving is not None
    assert base.serving.concurrency == 4 and base.serving.prompt_tokens == 64
    assert base.serving.output_tokens == 8 and base.serving.requests == 8
    assert base.serving.tensor_parallel == 2
    s = base.summary()
    for key in ("ttft_ms", "ttft_ms_p50", "tpot_ms", "tpot_ms_p50"):
        assert s[key] > 0, key
    # the stand-in's first token takes 20 ms, each next one 3 ms
    assert 15 < s["ttft_ms_p50"] < 500 and 2 < s["tpot_ms_p50"] < 100
    assert base.device == "NVIDIA H100 80GB HBM3"


@pytest.fixture
def unprofiled_server(tmp_path: Path) -> Iterator[str]:
    """The stand-in started without VLLM_TORCH_PROFILER_DIR (no profiler routes)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TORCH_PROFILER_DIR"}
    server = subprocess.Popen([*STANDIN, "--port", str(port)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_blocking(lambda: can_connect("127.0.0.1", port), timeout=30,
                            what="the stand-in listening")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_server_without_the_profiler_dir_says_to_set_it(unprofiled_server: str,
                                                        tmp_path: Path) -> None:
    proc = _cascade("--url", unprofiled_server, "--profile-dir", str(tmp_path / "prof"),
                    "--concurrency", "2", "--prompt", "8", "--output", "4", "--requests", "2",
                    "--out", str(tmp_path / "trace"))
    assert proc.returncode == 1, proc.stderr
    assert "404" in proc.stderr and "VLLM_TORCH_PROFILER_DIR" in proc.stderr
    assert "/start_profile" in proc.stderr
    assert not (tmp_path / "trace" / "timeline.csv").exists()


def test_attaching_needs_the_profile_dir(tmp_path: Path) -> None:
    proc = _cascade("--url", "http://127.0.0.1:9", "--out", str(tmp_path / "trace"))
    assert proc.returncode == 1
    assert "--profile-dir" in proc.stderr and "VLLM_TORCH_PROFILER_DIR" in proc.stderr
