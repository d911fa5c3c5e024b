"""The CLI on hostile Chrome-trace (PyTorch / Kineto) input: a string bomb and wrong JSON types
each end in one error line, with bounded memory (the reader's limits and errors themselves:
tests/unit/test_json_limits.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.hostile_json import KERNEL, gzip_bomb
from tests.support.paths import REPO

#: The child's own peak RSS (VmHWM: its address space only; ru_maxrss would include the
#: parent's peak at the fork, which is the whole test session's).
_RSS_RUN = """
import sys
from programs.cli import main
rc = main(sys.argv[1:])
hwm = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))
sys.stderr.write(f"\\nmaxrss_kib={hwm}\\n")
sys.exit(rc)
"""


def _cascade(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """Run the ``cascade`` CLI in a subprocess: (exit code, stderr, its peak RSS in MiB)."""
    proc = subprocess.run([sys.executable, "-c", _RSS_RUN, *argv], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    err, _, rss = proc.stderr.rpartition("maxrss_kib=")
    return proc.returncode, err.strip(), int(rss.strip()) // 1024


def test_cli_predict_on_a_string_bomb_ends_in_one_line_with_bounded_memory(tmp_path: Path) -> None:
    path = gzip_bomb(tmp_path / "bomb.pt.trace.json.gz",
                 b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "name": ',
                 256, b"}]}")
    rc, err, rss_mib = _cascade("predict", "--trace", str(path), "--target", "SM80_A100",
                                "--source", "SM90_H100")
    assert rc == 1 and "Traceback" not in err
    assert err.splitlines() == [err] and err.startswith(f"cascade: error: {path}:1: expected JSON "
                                                       "strings of at most 1,048,576 characters")
    assert rss_mib < 400, rss_mib  # 256 MiB of string: never held


def test_cli_predict_on_wrong_types_ends_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "types.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [{**KERNEL, "args": "x"}]}))
    rc, err, _ = _cascade("predict", "--trace", str(path), "--target", "SM80_A100",
                          "--source", "SM90_H100")
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1
    assert "expected a JSON object 'args' on the 'kernel' event #1, got \"str 'x'\"" in err
    rc, err, _ = _cascade("predict", "--trace", str(path), "--target", "SM80_A100",
                          "--source", "SM90_H100", env={"CASCADE_TRACE_JSON_MAX_DEPTH": "1"})
    assert rc == 2 and "CASCADE_TRACE_JSON_MAX_DEPTH" in err and "Traceback" not in err
