"""The bundled sample `opt125m-h100-e2e`: the generator's check mode, timeline invariants, the
recorded reference, the loader (the generator run as a script: tests/integration/test_sample.py)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from cascade.errors import ConflictError, NotFoundError, TraceFormatError
from cascade.kerneltable import COLUMNS, KernelTable
from cascade.platform import samples
from tests.support.paths import REPO

ROOT = REPO
SAMPLE = ROOT / "samples" / "opt125m-h100-e2e"
SCRIPT = SAMPLE / "generate_timeline.py"

HIDDEN, FFN, VOCAB, LAYERS, HEADS = 768, 3072, 50272, 12, 12


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opt125m_generate_timeline", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sample() -> samples.Sample:
    return samples.load_sample()


@pytest.fixture(scope="module")
def table(sample: samples.Sample) -> KernelTable:
    return sample.synthetic_table


# ---- generator -------------------------------------------------------------------------------

@pytest.mark.slow  # writes the whole sample timeline (~2 s): `make test` runs it, `make test-unit` leaves it out
def test_check_mode_detects_drift(tmp_path: Path, gen: ModuleType) -> None:
    out = tmp_path / "synthetic"
    gen.write(out)
    assert gen.main(["--check", "--out", str(out)]) == 0
    csv = out / "timeline.csv.gz"
    csv.write_bytes(gzip.compress(gzip.decompress(csv.read_bytes()).replace(b"prefill", b"decode", 1)))
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert gen.check(out) == [str(csv)]


def test_generator_imports_neither_torch_nor_network() -> None:
    text = SCRIPT.read_text()
    for banned in ("import torch", "urllib", "requests", "http.client", "socket", "random"):
        assert banned not in text


# ---- timeline shape ------------------------------------------------------------------------

def test_columns_are_known_and_filled(table: KernelTable) -> None:
    for col in table.columns:
        assert col in COLUMNS
    for col in ("name", "grid_x", "block_x", "regs", "smem_bytes", "stream", "host_launch_ns",
                "start_ns", "duration_ns", "step", "step_kind", "step_tokens", "step_context", "op",
                "flops", "bytes"):
        assert table.has(col), col
    assert set(np.unique(table["stream"])) == {7}
    assert np.array_equal(table["kernel_id"], np.arange(1, len(table) + 1))


def test_steps_cover_prefill_of_six_and_decode_contexts_7_to_37(table: KernelTable) -> None:
    steps = table["step"]
    assert sorted(set(steps.tolist())) == list(range(32))
    assert np.all(np.diff(steps) >= 0)
    per_step = {}
    for s in range(32):
        sel = steps == s
        kinds = set(table["step_kind"][sel].tolist())
        tokens = set(table["step_tokens"][sel].tolist())
        contexts = set(table["step_context"][sel].tolist())
        assert len(kinds) == len(tokens) == len(contexts) == 1
        per_step[s] = (kinds.pop(), tokens.pop(), contexts.pop())
    assert per_step[0] == ("prefill", 6, 6)
    decode = [per_step[s] for s in range(1, 32)]
    assert all(kind == "decode" and tok == 1 for kind, tok, _ in decode)
    assert [ctx for _, _, ctx in decode] == list(range(7, 38))


def test_kernel_counts_per_step(table: KernelTable) -> None:
    counts = np.bincount(table["step"])
    assert counts[0] == 274
    assert set(counts[1:].tolist()) == {354}
    assert len(table) == 274 + 31 * 354


def test_one_lm_head_and_twelve_layers_per_step(table: KernelTable) -> None:
    for s in range(32):
        sel = table["step"] == s
        op, n, k, m = table["op"][sel], table["n"][sel], table["k"][sel], table["m"][sel]
        lm = (op == "linear") & (n == VOCAB)
        assert lm.sum() == 1
        assert m[lm][0] == 1 and k[lm][0] == HIDDEN  # logits for the last token only
        tokens = table["step_tokens"][sel][0]
        square = (op == "linear") & (n == HIDDEN) & (k == HIDDEN)
        assert square.sum() == 4 * LAYERS  # q, k, v, out_proj
        assert ((op == "linear") & (n == FFN) & (k == HIDDEN)).sum() == LAYERS  # fc1
        assert ((op == "linear") & (n == HIDDEN) & (k == FFN)).sum() == LAYERS  # fc2
        assert np.all(m[op == "linear"][~lm[op == "linear"]] == tokens)
        assert (op == "layernorm").sum() == 2 * LAYERS + 1
        assert (op == "softmax").sum() == LAYERS
        assert (op == "bmm").sum() == 2 * LAYERS
        assert (op == "embedding").sum() == 2  # tokens + learned positions
        assert (op == "cat").sum() == (2 * LAYERS if s > 0 else 0) + 2  # KV cache + ids / mask
        assert table["sync_after"][sel].sum() == 1
        assert table["sync_after"][sel][-1] == 1  # the step ends with the host waiting


def test_linear_and_bmm_flops_bytes_match_shapes(table: KernelTable) -> None:
    for op in ("linear", "bmm"):
        sel = table["op"] == op
        b, m, n, k = (table[c][sel].astype(float) for c in ("batch", "m", "n", "k"))
        assert np.all(m >= 1) and np.all(n >= 1) and np.all(k >= 1) and np.all(b >= 1)
        np.testing.assert_array_equal(table["flops"][sel], 2 * b * m * n * k)
        base = 2 * b * (m * k + n * k + m * n)
        extra = table["bytes"][sel] - base
        if op == "linear":  # + fp16 bias vector, absent only on lm_head
            np.testing.assert_array_equal(extra, np.where(n == VOCAB, 0.0, 2 * n))
        else:
            np.testing.assert_array_equal(extra, 0.0)
    attn = table.take(table["op"] == "bmm")
    assert set(attn["batch"].tolist()) == {HEADS}
    ctx = attn["step_context"]
    assert np.all((attn["n"] == ctx) | (attn["k"] == ctx))  # QK^T: n = S; AV: k = S


def test_durations_and_times_are_consistent(table: KernelTable) -> None:
    dur, start, launch = table["duration_ns"], table["start_ns"], table["host_launch_ns"]
    assert np.all(dur > 0) and np.all(dur < 1e6)
    assert np.all(start >= launch)
    end = start + dur
    assert np.all(start[1:] >= end[:-1])  # one stream: in order, no overlap
    assert np.all(np.diff(launch) > 0)
    sync = np.flatnonzero(table["sync_after"] == 1)
    sync = sync[sync < len(table) - 1]
    assert np.all(launch[sync + 1] > end[sync])  # host resumes after the device finished
    gemm = table["op"] == "linear"
    assert dur[gemm].min() >= 3500  # documented fixed cost of a GEMM kernel
    assert np.all(table["flops"] >= 0) and np.all(table["bytes"] > 0)
    assert set(table["dtype"].tolist()) <= {"fp16", "fp32", ""}


def test_manifest_records_provenance_and_assumptions(sample: samples.Sample, gen: ModuleType) -> None:
    man = sample.synthetic_manifest
    assert man.provenance == "synthetic" and man.label == "synthetic"
    assert man.generator == "samples/opt125m-h100-e2e/generate_timeline.py"
    assert man.source_gpu == "SM90_H100"
    assert man.workload["new_tokens"] == 32 and man.workload["prompt_tokens"] == 6
    assert man.steps["decode"]["contexts"] == [7, 37]
    assert man.assumptions["host_op_ns"] == gen.HOST_OP_NS
    assert man.derived["kernels_total"] == len(sample.synthetic_table)
    end = sample.synthetic_table["start_ns"] + sample.synthetic_table["duration_ns"]
    assert man.derived["e2e_ns"] == float(end.max())


# ---- recorded reference ----------------------------------------------------------------------

def test_reference_figures_and_error_percentages(sample: samples.Sample) -> None:
    ref = sample.reference
    assert ref.badge == "Sample" and ref.read_only and not ref.rerunnable
    assert ref.kernel_model == "accel-sim"
    assert ref.trace.source_config == "SM90_H100" and not ref.trace.instruction_traces_bundled
    assert ref.trace.instruction_traces_mb == 415
    assert ref.workload.model == "facebook/opt-125m" and ref.workload.new_tokens == 32
    assert (ref.workload.repeats, ref.workload.warmup_repeats) == (4, 1)
    h100, h200, a100 = (ref.result(c) for c in ("SM90_H100", "SM90_H200", "SM80_A100"))
    assert (h100.real_mean_e2e_ms, h100.simulated_mean_e2e_ms, h100.error_pct) == (254.45, 262.14, 3.02)
    assert (a100.real_mean_e2e_ms, a100.simulated_mean_e2e_ms, a100.error_pct) == (222.08, 229.58, 3.38)
    assert h200.real_mean_e2e_ms is None and h200.simulated_mean_e2e_ms == 262.16 and h200.counterfactual
    assert round((262.14 - 254.45) / 254.45 * 100, 2) == 3.02
    for row in (h100, a100):
        assert round(row.computed_error_pct() or 0.0, 2) == row.error_pct
    cal = ref.calibration
    assert (cal.prefill_tokens, cal.decode_context_min, cal.decode_context_max) == (6, 7, 37)
    with pytest.raises(NotFoundError):
        ref.result("SM100_B200")


def test_reference_with_inconsistent_error_is_rejected(tmp_path: Path) -> None:
    root = tmp_path / "samples"
    shutil.copytree(SAMPLE, root / "opt125m-h100-e2e")
    path = root / "opt125m-h100-e2e" / "reference" / "results.json"
    data = json.loads(path.read_text())
    data["results"][0]["error_pct"] = 2.5
    path.write_text(json.dumps(data))
    with pytest.raises(TraceFormatError, match=r"results\[0\] \(SM90_H100\).*\+3\.02"):
        samples.load_sample(root=root)
    del data["results"][0]["simulated_mean_e2e_ms"]
    path.write_text(json.dumps(data))
    with pytest.raises(TraceFormatError, match="simulated_mean_e2e_ms"):
        samples.load_reference(root=root)


# ---- loader ----------------------------------------------------------------------------------

def test_load_sample_ids_and_listing(sample: samples.Sample) -> None:
    assert samples.SAMPLES_DIR == ROOT / "samples"
    assert sample.recorded_trace_id == "sample-opt125m-h100-e2e" == samples.RECORDED_TRACE_ID
    assert sample.synthetic_trace_id == "sample-opt125m-h100-e2e-synthetic" == samples.SYNTHETIC_TRACE_ID
    assert sample.recorded_run_id == "sample-opt125m-h100-e2e" == samples.RECORDED_RUN_ID
    listed = samples.list_samples()
    assert [s.name for s in listed] == ["opt125m-h100-e2e"]
    assert listed[0] == sample.info
    assert samples.is_recorded_run("sample-opt125m-h100-e2e")
    assert not samples.is_recorded_run("sample-opt125m-h100-e2e-synthetic")


def test_rerun_of_recorded_run_is_a_409() -> None:
    with pytest.raises(ConflictError) as err:
        samples.refuse_rerun(samples.RECORDED_RUN_ID)
    assert err.value.http_status == 409
    assert "415 MB" in str(err.value) and "cannot be rerun" in str(err.value)
    samples.refuse_rerun("some-other-run")  # no error


def test_loader_errors_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="known: opt125m-h100-e2e"):
        samples.load_sample("nope")
    assert samples.list_samples(tmp_path / "absent") == []
    root = tmp_path / "samples"
    shutil.copytree(SAMPLE, root / "opt125m-h100-e2e")
    csv = root / "opt125m-h100-e2e" / "synthetic" / "timeline.csv.gz"
    csv.write_bytes(gzip.compress(gzip.decompress(csv.read_bytes()).replace(b",prefill,", b",decode,", 1)))
    with pytest.raises(TraceFormatError, match="sha256"):
        samples.load_sample(root=root)
    (root / "opt125m-h100-e2e" / "reference" / "results.json").write_text("{")
    with pytest.raises(TraceFormatError, match="results.json"):
        samples.load_sample(root=root)
