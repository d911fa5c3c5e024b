"""``cascade profile``'s pure pieces (no process, no server): the kernel-folder watcher
reporting complete kernel files once, and the baseline file's round trip and refusals. The
profiler against a real stack is ``tests/integration/test_profiler.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascade.traces.baseline import read_baseline


def test_watcher_reports_complete_kernel_files_once(tmp_path: Path) -> None:
    from programs.profiler.watch import KernelFolderWatcher

    w = KernelFolderWatcher(tmp_path)
    (tmp_path / "kernel-1.trace").write_text("x")
    (tmp_path / "kernel-1.trace.tmp").write_text("not a trace name")
    assert w.scan(exited=False) == []  # the newest file may still be being written
    (tmp_path / "kernel-2.trace").write_text("y")
    assert [f.path.name for f in w.scan(exited=False)] == ["kernel-1.trace"]
    (tmp_path / "kernelslist").write_text("MemcpyHtoD,0x1,4\nkernel-2.tra")  # half a line
    assert w.scan(exited=False) == [] and w.pending() == ["kernel-2.trace"]
    (tmp_path / "kernelslist").write_text("MemcpyHtoD,0x1,4\nkernel-2.trace\n")
    assert [f.path.name for f in w.scan(exited=False)] == ["kernel-2.trace"]
    (tmp_path / "kernel-10.trace.xz").write_text("z")
    assert w.scan(exited=False) == []
    assert [f.kernel_id for f in w.scan(exited=True)] == [10]
    assert w.scan(exited=True) == [] and w.pending() == []


def test_baseline_file_round_trip_and_errors(tmp_path: Path) -> None:
    from cascade.errors import ValidationError
    from cascade.traces.baseline import Baseline, write_baseline
    from cascade.traces.files import check_name

    path = write_baseline(tmp_path / "baseline.json", Baseline(e2e_ms=[10.0, 12.0, 11.0],
                                                               step_ms=[[1.0, 2.0], [3.0, 4.0]]))
    got = read_baseline(path.read_bytes())
    assert got.summary() == {"e2e_ms": 11.0, "e2e_ms_p50": 11.0, "e2e_ms_min": 10.0,
                             "repeats": 3.0, "step_mean_ms": 2.5, "steps_per_run": 2.0}
    assert check_name("baseline.json").kind == "baseline" and check_name("baseline.json").unit == ""
    with pytest.raises(ValidationError, match=r"baseline.json is not a Cascade baseline.*e2e_ms"):
        read_baseline(b'{"e2e_ms": "fast"}')
    with pytest.raises(ValidationError, match="not JSON"):
        read_baseline(b"{")
