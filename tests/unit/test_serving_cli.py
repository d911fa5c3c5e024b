"""`cascade scenario`: the command works without a running app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascade.kerneltable import KernelTable
from cascade.tableio import write_table
from programs.cli import main

HEADERS = (
    "============ Serving Benchmark Result ============",
    "Successful requests:", "Benchmark duration (s):", "Request throughput (req/s):",
    "Output token throughput (tok/s):", "Total Token throughput (tok/s):",
    "---------------Time to First Token----------------", "Mean TTFT (ms):", "Median TTFT (ms):",
    "P99 TTFT (ms):", "-----Time per Output Token (excl. 1st token)------", "Mean TPOT (ms):",
    "---------------Inter-token Latency----------------", "P99 ITL (ms):",
)


def test_summary_is_laid_out_like_vllm_bench_serve(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    rec = tmp_path / "r.csv"
    rc = main(["scenario", "--synthetic", "--rate", "10", "--replicas", "2", "--requests", "200",
               "--prompt", "uniform:64:512", "--output", "64", "--slo", "ttft_ms=200,tpot_ms=40",
               "--records", str(rec), "--save-step-model", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert rc == 0
    for h in HEADERS:
        assert h in out, h
    assert "Successful requests:                     200" in out
    assert "Request goodput (req/s):" in out
    assert len(rec.read_text().splitlines()) == 201
    rc = main(["scenario", "--step-model", str(tmp_path / "m.json"), "--rate", "10",
               "--replicas", "2", "--requests", "200", "--prompt", "uniform:64:512",
               "--output", "64", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["completed"] == 200 and data["tpot_ms"]["mean"] > 0


def test_from_table_builds_the_step_model(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    rows = [{"name": "k", "step": 0, "step_kind": "prefill", "step_tokens": 6, "step_context": 6,
             "duration_ns": 900_000.0}]
    for s in range(1, 32):
        rows.append({"name": "k", "step": s, "step_kind": "decode", "step_tokens": 1,
                     "step_context": 6 + s, "duration_ns": 800_000.0 + 500.0 * s})
    path = tmp_path / "table.csv"
    write_table(KernelTable.from_rows(rows), path)
    rc = main(["scenario", "--from-table", str(path), "--arrival", "constant", "--rate", "2",
               "--requests", "50", "--prompt", "6", "--output", "20", "--model", "opt-125m",
               "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    # one prefill (0.9 ms) then decodes: TTFT at low load ~ the prefill step
    assert data["ttft_ms"]["median"] == pytest.approx(0.9, rel=0.05)
    assert not data["extrapolated"]
    rc = main(["scenario", "--from-table", str(path), "--rate", "2", "--requests", "50",
               "--prompt", "2000", "--output", "20", "--model", "opt-125m"])
    out = capsys.readouterr().out
    assert rc == 0 and "Extrapolated: prefill_tokens=2000 (calibrated 6..6)" in out


def test_bad_input_gives_an_error_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "--synthetic", "--prompt", "uniform:9"]) == 1
    assert "prompt" in capsys.readouterr().err
    assert main(["scenario", "--synthetic", "--slo", "ttft=3"]) == 1
    assert "slo" in capsys.readouterr().err
    # opt-125m holds 2048 tokens: 2040 + 20 is refused as its server would refuse it ...
    assert main(["scenario", "--synthetic", "--requests", "20", "--prompt", "2040", "--output", "20",
                 "--model", "opt-125m"]) == 1
    err = capsys.readouterr().err
    assert "output" in err and "context of 2048" in err
    # ... unless the check is switched off
    assert main(["scenario", "--synthetic", "--requests", "20", "--prompt", "2040", "--output", "20",
                 "--model", "opt-125m", "--max-context", "0"]) == 0


def test_capacity_search_prints_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["scenario", "--synthetic", "--rate", "100", "--requests", "300",
               "--slo", "ttft_ms=300,tpot_ms=30,attainment=0.9", "--capacity", "replicas"])
    out = capsys.readouterr().out
    assert rc == 0 and "Capacity meeting the SLOs:" in out and "replicas" in out
