"""The serving protocol's reading of a measured row (`cascade validate --serving`): which
engine scheduling each row ran with, and rows whose load never reached the engine."""

from __future__ import annotations

import pytest

from cascade.fitting.serving import (
    ServingRow,
    async_scheduling_of,
    engine_limits,
    flag_load_not_reached,
    score,
)


@pytest.mark.parametrize(("backend", "version", "overlap"), [
    ("vllm", "0.12.0", False), ("vllm", "0.11.2", False), ("vllm", "0.14.0", True), ("vllm", "0.18.0", True),
    ("vllm", "1.0.0rc1", True), ("vllm", "", True), ("sglang", "0.5.1.post1", True), ("trtllm", "1.1.0", True)])
def test_each_row_runs_its_engines_default_scheduling(backend: str, version: str, overlap: bool) -> None:
    assert async_scheduling_of({"backend": backend, "backend_version": version}) is overlap


def _row(concurrency: int, tpot: float, *, isl: int = 1024, pred: float = 10.0) -> ServingRow:
    return ServingRow(id=f"c{concurrency}-{isl}", backend="vllm", model="m", gpu="SM90_H100", quant="bf16",
                      moe_quant="bf16", tp=4, ep=1, concurrency=concurrency, isl=isl, osl=1024, ttft_ms=100.0,
                      tpot_ms=tpot, pred_ttft_ms=100.0, pred_tpot_ms=pred, roofline_ttft_ms=50.0,
                      roofline_tpot_ms=5.0)


def test_a_decode_faster_under_more_clients_marks_the_load_as_not_reached() -> None:
    # TPOT 4.7 ms at 512 clients after 9.7 ms at 64: the engine never ran 512 at once
    rows = flag_load_not_reached([_row(8, 4.7), _row(64, 9.7), _row(512, 4.7), _row(128, 12.0),
                                  _row(512, 4.7, isl=8192)])
    assert [r.load_not_reached for r in rows] == [False, False, True, False, False]
    (s,) = score(rows)
    assert s.n == 5 and s.n_load_not_reached == 1
    # the plain MAPE counts every row; the "reached" one leaves the flagged row out
    assert s.tpot_mape_pct_reached is not None and s.tpot_mape_pct_reached < s.tpot_mape_pct


@pytest.mark.parametrize(("row", "engine", "limits"), [
    # AIConfigurator's generated aggregated engine: max_batch_size + isl + 1500 tokens, max_batch_size sequences
    ({"backend": "vllm", "batch_size": "8", "isl": "1024", "silicon_data_source": "x; silicon_concurrency=8"},
     "aiconfigurator", (2532, 8)),
    ({"backend": "trtllm", "batch_size": "64", "isl": "8192"}, "aiconfigurator", (9756, 64)),
    # a per-rank batch (concurrency / tp): the engine holds every client
    ({"backend": "trtllm", "batch_size": "16", "isl": "1024", "silicon_data_source": "silicon_concurrency=128"},
     "aiconfigurator", (2652, 128)),
    # no batch size recorded: the clients
    ({"backend": "vllm", "batch_size": "", "isl": "4000", "silicon_data_source": "silicon_concurrency=32"},
     "aiconfigurator", (5532, 32)),
    # SGLang's rule sets no such budget; --serving-engine defaults: vLLM's API-server defaults everywhere
    ({"backend": "sglang", "batch_size": "8", "isl": "1024"}, "aiconfigurator", (8192, 1024)),
    ({"backend": "vllm", "batch_size": "8", "isl": "1024"}, "defaults", (8192, 1024)),
])
def test_each_row_runs_the_engine_limits_its_benchmark_deployed(row: dict[str, str], engine: str,
                                                                 limits: tuple[int, int]) -> None:
    assert engine_limits(row, engine) == limits  # type: ignore[arg-type]


def test_default_limits_are_vllms_for_the_rows_gpu() -> None:
    """SGLang rows and --serving-engine defaults run vLLM's API-server defaults of that GPU."""
    from cascade.gpus import default_registry

    reg = default_registry()
    row = {"backend": "vllm", "batch_size": "8", "isl": "1024"}
    assert engine_limits(row, "defaults", reg.get("SM90_H200")) == (8192, 1024)
    assert engine_limits(row, "defaults", reg.get("SM80_A100")) == (2048, 256)
    assert engine_limits({**row, "backend": "sglang"}, "aiconfigurator", reg.get("SM89_L40S")) == (2048, 256)


def test_each_vllm_row_is_timed_by_the_kernels_of_the_nearest_vllm_release() -> None:
    """vLLM 0.12 / 0.18 rows on the 0.14 measurements, 0.22 and later on 0.24's, no version or
    another backend on the default."""
    from cascade.fitting.serving import collector_of
    from cascade.llm.model import COLLECTOR_DEFAULT, load_llm_calibration

    cal = load_llm_calibration()
    row = {"backend": "vllm", "backend_version": "0.12.0"}
    assert collector_of(row, cal) == "vllm-0.14"
    assert collector_of({**row, "backend_version": "0.18.1"}, cal) == "vllm-0.14"
    assert collector_of({**row, "backend_version": "0.19"}, cal) == "vllm-0.24"  # a tie: the newer
    assert collector_of({**row, "backend_version": "0.26.0"}, cal) == "vllm-0.24"
    assert collector_of({**row, "backend_version": ""}, cal) == COLLECTOR_DEFAULT
    assert collector_of({"backend": "sglang", "backend_version": "0.5.1"}, cal) == COLLECTOR_DEFAULT
