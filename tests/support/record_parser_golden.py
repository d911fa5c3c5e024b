"""One-off: record the goldens of tests/unit/test_traces_reference.py from the reference parser.

The goldens (``tests/data/parser-golden/kernel-features.json.gz``) were recorded
on 2026-12-07, tree at commit 437869015209, by this script from the parser as it
was before the fast path (commit 3f5e7bc), then kept in
``tests/support/reference_parser/``. That package has been deleted since (issue
44: it was partly a copy of the parser it checked), so this script now refuses
to run. It stays as the record of how the goldens were made.

The goldens must NOT be regenerated with the parser under test
(``cascade.traces.parse``): they would then check the fast parser against
itself. If an input changed on purpose (the test then fails on its sha256),
review the change; to re-record, restore the reference parser from git
(``git show 437869015209:tests/support/reference_parser/<file>`` for its four
files) into ``tests/support/reference_parser/``, run
``.venv/bin/python -m tests.support.record_parser_golden``, review the diff of
every changed case, and delete the reference parser again.

Recorded per parser case: the sha256 of its (uncompressed) input, and for each
(chunk, feed, xz) run the test makes, the outcome (every compared
KernelFeatures field, floats as repr, or the TraceFormatError's file, line and
message), identical outcomes stored once. Plus the iteration order of
units_touched on fixed inputs.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from cascade.errors import TraceFormatError
from tests.unit import test_traces_reference as t

RECORDED = "2026-12-07"


def _reference() -> tuple[type, Any]:
    try:
        from tests.support.reference_parser.memory import (
            units_touched as ref_units_touched,
        )
        from tests.support.reference_parser.parse import (
            KernelTraceParser as ref_parser,
        )
    except ImportError as e:
        raise SystemExit(
            f"record_parser_golden: the reference parser (tests/support/reference_parser) is not "
            f"here ({e}); the goldens must be recorded from it, never from the parser under "
            f"test. See this script's docstring.") from None
    for obj in (ref_parser, ref_units_touched):
        if obj.__module__.startswith("cascade.") or "shared/cascade" in str(
                Path(sys.modules[obj.__module__].__file__ or "")):
            raise SystemExit("record_parser_golden: refusing to record from the parser under test")
    return ref_parser, ref_units_touched


def _outcome(parser_cls: type, data: bytes, run: t.Run) -> dict[str, Any]:
    parser = parser_cls("k.traceg", chunk_bytes=run.chunk_bytes)
    try:
        for i in range(0, len(data), run.feed):
            parser.feed(data[i : i + run.feed])
        return t.encode_outcome(parser.finish())
    except TraceFormatError as e:
        return t.encode_outcome(e)


def record() -> dict[str, Any]:
    ref_parser, ref_units_touched = _reference()
    if not t.REAL_TRACES:
        raise SystemExit(f"record_parser_golden: no real traces under {t.DATA / 'traces'}")
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        for case, again in zip(t.all_cases(Path(a)), t.all_cases(Path(b)), strict=True):
            assert case.name not in cases, case.name
            assert t._sha(case.text) == t._sha(again.text), f"{case.name}: input not deterministic"
            outputs: list[dict[str, Any]] = []
            runs: dict[str, int] = {}
            for run in case.runs:
                out = _outcome(ref_parser, case.data(run), run)
                if out not in outputs:
                    outputs.append(out)
                runs[run.key] = outputs.index(out)
            cases[case.name] = {"sha256": t._sha(case.text), "runs": runs, "outputs": outputs}
            print(f"{case.name}: {len(case.runs)} runs, {len(outputs)} distinct outcomes")
    order = []
    for addrs, width, shift in t.units_order_inputs():
        units = ref_units_touched(addrs, width, shift)
        order.append({"sha256": t._sha(json.dumps([addrs, width, shift]).encode()),
                      "order": t.units_order(units)})
    return {"about": "outputs of the pre-fast-path trace parser (commit 3f5e7bc), recorded by "
                     "tests/support/record_parser_golden.py; never re-record with the parser "
                     "under test",
            "recorded": RECORDED, "cases": cases, "units_touched_order": order}


def main() -> None:
    golden = record()
    t.GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, separators=(",", ":"))
    with gzip.GzipFile(t.GOLDEN, "wb", mtime=0) as fh:
        fh.write(text.encode())
    print(f"{t.GOLDEN}: {len(golden['cases'])} cases, {t.GOLDEN.stat().st_size} bytes")


if __name__ == "__main__":
    main()
