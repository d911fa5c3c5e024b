"""What ``cascade import`` reads from a folder before it uploads: the files it takes and the trace
kind, every file it skips (named, with the reason), and the multipart ETag S3 computes (the
uploads themselves: tests/integration/test_import.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cascade.errors import ValidationError
from cascade.traces.files import classify_files, collect_files
from programs.cli.importer import infer_kind
from programs.client import md5_etag
from tests.support.trace_folders import tool_folder
from tests.support.traces_stack import (
    write_kernels,
)


def test_collect_files_and_kind(tmp_path: Path) -> None:
    write_kernels(tmp_path, 2, blocks=1, iterations=1)
    (tmp_path / "README.md").write_text("not a trace file")
    (tmp_path / "run.pt.trace.json").write_text('{"traceEvents": []}')
    names = [p.name for p in collect_files(tmp_path)]
    assert names == ["kernel-1.traceg.xz", "kernel-2.traceg.xz", "kernelslist.g", "run.pt.trace.json"]
    assert infer_kind(collect_files(tmp_path)) == "both"
    with pytest.raises(ValidationError):
        collect_files(tmp_path / "README.md")


def test_multipart_etag_matches_s3_rule(tmp_path: Path) -> None:
    import hashlib

    data = os.urandom(11 * 1024 * 1024)
    path = tmp_path / "blob"
    path.write_bytes(data)
    size = 5 * 1024 * 1024
    parts = [hashlib.md5(data[i:i + size]).digest() for i in range(0, len(data), size)]
    assert md5_etag(path, size) == hashlib.md5(b"".join(parts)).hexdigest() + "-3"
    assert md5_etag(path) == hashlib.md5(data).hexdigest()


def test_classify_files_names_every_skipped_file(tmp_path: Path) -> None:
    tool_folder(tmp_path)
    files, skipped = classify_files(tmp_path)
    assert [p.name for p in files] == ["kernel-1.traceg", "kernel-2.traceg", "kernel-3.traceg",
                                       "kernelslist.g"]
    assert set(skipped) == {"nvprof.json", "accelsim_log.csv", "run.log", "junk.bin", "notes.txt"}
    assert "not a Chrome trace" in skipped["nvprof.json"]
    assert "'name' column" in skipped["accelsim_log.csv"]
    assert "not a trace file name" in skipped["junk.bin"]
