"""`cascade trace inspect` on the real trace and on a generated raw folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascade.traces.generate import TraceSpec, write_trace_folder
from programs.cli import main
from tests.support.paths import SHARED_DATA

REAL = SHARED_DATA / "traces" / \
    "matrixmul-32x32-sm61"


def test_inspect_json_real(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "inspect", str(REAL), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [k] = out["kernels"]
    assert k["warp_insts"] == 4416 and k["warps"] == 32 and out["failures"] == {}


def test_inspect_table_generated_raw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_trace_folder(tmp_path, [TraceSpec(raw=True, kernel_id=i) for i in (1, 2)], xz=True)
    assert main(["trace", "inspect", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "2 kernels" in text and "_Z10gemm_tiled" in text


def test_inspect_reports_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kernelslist.g").write_text("kernel-1.traceg\n")
    (tmp_path / "kernel-1.traceg").write_text("-kernel name = k\n\n#traces\n#BEGIN_TB\nwarp = x\n")
    assert main(["trace", "inspect", str(tmp_path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert "kernel-1.traceg:5" in out["failures"]["kernel-1.traceg"]
