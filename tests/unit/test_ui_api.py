"""API pieces the web UI's pages need: trace totals for charts, field-level spec errors,
recorded figures in a recorded run's results."""

from __future__ import annotations

import pytest

from cascade.errors import ValidationError
from cascade.gpus import default_registry
from cascade.kerneltable import KernelTable
from cascade.runs.summary import RecordedReference, ReferenceRow, config_results, with_reference
from services.api.routes.configs import _checked_fields
from services.api.trace_views import trace_summary


def test_trace_summary_totals_by_family_step_and_mix() -> None:
    table = KernelTable.from_rows([
        {"name": "ampere_sgemm_128x64_nn", "duration_ns": 5000.0, "step": 0, "step_kind": "prefill",
         "start_ns": 0.0, "insts_fp32": 10.0},
        {"name": "void at::native::vectorized_elementwise_kernel<4>()", "duration_ns": 1000.0, "step": 0,
         "step_kind": "prefill", "start_ns": 6000.0, "insts_fp32": 2.0},
        {"name": "ampere_sgemm_128x64_nn", "duration_ns": 3000.0, "step": 1, "step_kind": "decode",
         "start_ns": 9000.0, "insts_fp32": 4.0},
    ])
    s = trace_summary(table)
    assert s["kernels"] == 3 and s["time_ns"] == 9000.0
    assert s["families"]["gemm"] == {"count": 2, "time_ns": 8000.0}
    assert s["families"]["elementwise"] == {"count": 1, "time_ns": 1000.0}
    assert [(x["step"], x["kind"], x["kernels"], x["time_ns"]) for x in s["steps"]] == [
        (0, "prefill", 2, 6000.0), (1, "decode", 1, 3000.0)]
    assert s["steps"][0]["start_ns"] == 0.0 and s["steps"][0]["end_ns"] == 7000.0
    assert s["instruction_mix"] == {"insts_fp32": 16.0}


def _h100() -> dict[str, object]:
    import msgspec

    spec = default_registry().resolve("SM90_H100")
    assert spec is not None
    return dict(msgspec.to_builtins(spec), id="MY_GPU", name="mine")


@pytest.mark.parametrize(("change", "field"), [
    ({"sms": -1}, "sms"), ({"boost_clock_mhz": "fast"}, "boost_clock_mhz"), ({"arch": "kepler"}, "arch"),
    ({"id": "bad id!"}, "id"), ({"name": " "}, "name"),
])
def test_spec_errors_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        _checked_fields(dict(_h100(), **change))
    assert info.value.field == field
    assert "$." not in str(info.value)


def test_spec_missing_field_is_named() -> None:
    body = _h100()
    del body["l2_mb"]
    with pytest.raises(ValidationError) as info:
        _checked_fields(body)
    assert info.value.field == "l2_mb"


def test_valid_spec_passes() -> None:
    assert _checked_fields(_h100())["id"] == "MY_GPU"


def test_recorded_figures_fill_results_without_files() -> None:
    import msgspec

    rows = {"hardware": "", "note": ""}
    ref = RecordedReference(badge="", title="", simulator="", kernel_model="accel-sim", caveats=[], configs=[
        ReferenceRow(config="A", real_e2e_ms=10.0, simulated_e2e_ms=11.0, error_pct=10.0, counterfactual=False, **rows),
        ReferenceRow(config="B", real_e2e_ms=None, simulated_e2e_ms=9.0, error_pct=None, counterfactual=True, **rows)])
    empty = config_results("A", [], {})  # no result files
    assert empty.predicted_e2e_ms is None and empty.counterfactual is True
    a = with_reference(empty, ref)
    assert (a.predicted_e2e_ms, a.baseline_e2e_ms, a.error_pct, a.counterfactual) == (11.0, 10.0, 10.0, False)
    assert a.recorded is True and a.model == "accel-sim"
    b = with_reference(config_results("B", [], {}), ref)
    assert b.counterfactual is True and b.baseline_e2e_ms is None and b.predicted_e2e_ms == 9.0
    real = msgspec.structs.replace(empty, predicted_e2e_ms=12.5)
    assert with_reference(real, ref) is real  # a result of its own wins


async def test_a_trace_added_or_deleted_wakes_what_waits_on_the_model_index() -> None:
    """Which sims are /v1 models depends on their traces: a trace deleted after the last sims or
    runs change must wake ``wait_until`` (it waited out its timeout, and a test failed 1 in 8)."""
    import asyncio

    from services.api.sim_models import SimModels

    class Traces:
        def __init__(self) -> None:
            self.listeners: list = []  # type: ignore[type-arg]

        def on_record_change(self, listener: object) -> None:
            self.listeners.append(listener)

    traces = Traces()
    models = SimModels(None, None, traces)  # type: ignore[arg-type]
    gone = {"trace": False}
    waiter = asyncio.create_task(models.wait_until(lambda: gone["trace"], timeout=5.0))
    await asyncio.sleep(0.01)
    gone["trace"] = True
    for listener in traces.listeners:
        listener("tr-deleted")
    await asyncio.wait_for(waiter, 1.0)
