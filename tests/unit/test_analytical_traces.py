"""The ``analytical`` kernel model on parsed instruction traces (not hand-made rows).

Inputs: the real Accel-Sim v4 trace ``../shared/data/traces/matrixmul-32x32-sm61``
(relative to the repository root), generated multi-kernel trace folders
(:func:`cascade.traces.generate.write_trace_folder`) and rows derived from them by
scaling a kernel's extensive features (what a kernel with N times the grid would
report). Predictions are checked against physics computed here from the features
and the spec, independently of the model's own formulas.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import numpy as np
import pytest

from cascade.engine import predict
from cascade.engine.analytical import FEATURES_LABEL, occupancy
from cascade.engine.perf import roofline_ns
from cascade.engine.workload import workload_of
from cascade.gpus.registry import default_registry
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import KernelTable
from cascade.traces.folder import parse_trace_folder
from cascade.traces.generate import TraceSpec, write_trace_folder
from tests.support.paths import SHARED_DATA

DATA = SHARED_DATA
REAL_TRACE = DATA / "traces" / "matrixmul-32x32-sm61"
SOURCE = "SM61_P4"
TARGETS = ("SM61_P4", "SM70_V100_PCIE_32GB", "SM80_A100", "SM90_H100")

#: Columns that grow with the grid (a kernel with N times the blocks has N times these).
EXTENSIVE = ("warp_insts", "insts_int", "insts_fp32", "insts_fp64", "insts_fp16", "insts_sfu",
             "insts_tensor", "insts_ld_global", "insts_st_global", "insts_ld_shared",
             "insts_st_shared", "insts_local", "insts_atomic", "insts_barrier", "insts_branch",
             "insts_const", "insts_tex", "insts_other", "insts_tensor_hmma", "insts_tensor_imma",
             "insts_tensor_dmma", "insts_tensor_gmma", "tensor_flops", "insts_pred_off",
             "insts_partial", "warps", "gmem_requests", "gmem_sectors", "gmem_ld_sectors",
             "gmem_st_sectors", "footprint_lines", "smem_accesses", "smem_bank_conflicts",
             "local_bytes")

# Kernels of the generated folder: 256-thread blocks with 48 KiB of shared memory and 64
# registers, so a P4 SM (96 KiB) holds 2 blocks: 40 blocks make one wave on its 20 SMs.
_WAVE = {"sm": 61, "block": (256, 1, 1), "regs": 64, "smem": 49152, "iterations": 1}
GENERATED = (
    TraceSpec(kernel_id=1, grid=(20, 1, 1), **_WAVE),            # one wave on a P4
    TraceSpec(kernel_id=2, grid=(80, 1, 1), **_WAVE),            # 4x the blocks: two waves
    TraceSpec(kernel_id=3, grid=(4, 2, 1), sm=80, iterations=3),  # tensor-core (HMMA) kernel
    TraceSpec(kernel_id=4, grid=(8, 2, 1), sm=80, iterations=6),  # twice the blocks and loop
)


@pytest.fixture(scope="module")
def real() -> KernelTable:
    if not REAL_TRACE.is_dir():
        pytest.skip(f"reference trace not present at {REAL_TRACE}")
    parsed = parse_trace_folder(REAL_TRACE)
    assert parsed.failures == {}
    return parsed.table()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> KernelTable:
    folder = tmp_path_factory.mktemp("analytical-traces")
    write_trace_folder(folder, list(GENERATED))
    parsed = parse_trace_folder(folder)
    assert parsed.failures == {}
    table = parsed.table()
    assert list(table["grid_x"]) == [20, 80, 4, 8]
    return table


def _row(table: KernelTable, i: int) -> dict[str, Any]:
    return {c: table[c][i] for c in table.columns}


def scaled(table: KernelTable, i: int, factor: int, columns: tuple[str, ...] = EXTENSIVE) -> KernelTable:
    """Kernel ``i`` with ``factor`` times its grid (and so its extensive features), or with
    only ``columns`` scaled when given."""
    row = _row(table, i)
    for c in columns:
        row[c] = float(row[c]) * factor
    if columns is EXTENSIVE:
        row["grid_x"] = int(row["grid_x"]) * factor
    return KernelTable.from_rows([row])


def spec(name: str) -> GPUSpec:
    return default_registry().get(name)


def analytical(table: KernelTable, target: str | GPUSpec) -> np.ndarray:
    pred = predict(table, target, source=SOURCE, model="analytical")
    # every row here has instruction features: labelled as predicted from them, and the
    # prediction quotes no figure (no protocol measures the features' accuracy)
    assert list(pred.models) == [FEATURES_LABEL] * len(table)
    assert pred.provenance.accuracy.mape_pct is None and pred.provenance.accuracy.total_pct is None
    return pred.predicted_ns


def physical_floor_ns(table: KernelTable, g: GPUSpec) -> np.ndarray:
    """Bounds no kernel can beat, from its features: warp-instruction issue (one per
    scheduler per cycle), FP32 lanes (at least one FLOP per active FP32 lane instruction at
    the SIMT peak), tensor FLOPs at the best tensor peak, and every distinct line touched
    read once at full DRAM bandwidth."""
    f = {c: np.nan_to_num(table[c].astype(float)) for c in (
        "warp_insts", "insts_fp32", "tensor_flops", "footprint_lines")}
    issue = f["warp_insts"] / (g.sms * g.schedulers_per_sm * g.clock_hz)
    fp32 = f["insts_fp32"] * 32.0 / g.peak_flops("fp32", False)
    tensor_peak = max(g.peak_flops(d, True) for d in ("fp16", "bf16", "tf32", "fp32"))
    tensor = f["tensor_flops"] / tensor_peak
    dram = f["footprint_lines"] * 128.0 / g.bandwidth_bps
    return np.maximum.reduce([issue, fp32, tensor, dram]) * 1e9


def fixed_ns(generated: KernelTable, g: GPUSpec) -> float:
    """The model's fixed per-kernel time on ``g``: its prediction for a kernel of one warp
    instruction with no dependency chain."""
    row = _row(generated, 0)
    row.update({c: 0.0 for c in EXTENSIVE})
    row.update(warp_insts=1.0, warps=1.0, dep_chain=0.0, grid_x=1)
    return float(analytical(KernelTable.from_rows([row]), g)[0])


# ---- the real trace -----------------------------------------------------------------------------

def test_real_trace_predicts_finite_positive_times_on_every_target(real: KernelTable) -> None:
    assert len(real) == 1 and real["warp_insts"][0] == 4416
    for name in TARGETS:
        ns = analytical(real, name)
        assert np.all(np.isfinite(ns)) and np.all(ns > 0), (name, ns)
        # one 1024-thread block of 4416 warp instructions: microseconds, not milliseconds
        assert 1_000 < ns[0] < 100_000, (name, ns)


def test_real_trace_is_launch_bound_single_block(real: KernelTable) -> None:
    pred = predict(real, "SM90_H100", source=SOURCE, model="analytical")
    assert pred.regime_names[0] == "launch"
    # a single block: occupancy allows it on every target, one wave
    for name in TARGETS:
        bps, threads = occupancy(real, spec(name))
        assert threads[0] == 1024 and bps[0] >= 1


# ---- physics on parsed traces ---------------------------------------------------------------------

def _all_kernels(real: KernelTable, generated: KernelTable) -> KernelTable:
    heavy = [scaled(generated, i, 500) for i in range(len(generated))]
    rows = [_row(t, i) for t in (real, generated, *heavy) for i in range(len(t))]
    return KernelTable.from_rows(rows)


@pytest.mark.parametrize("name", (*TARGETS, "SM90_H200", "SM75_T4"))
def test_never_faster_than_the_physical_bounds(real: KernelTable, generated: KernelTable,
                                               name: str) -> None:
    table = _all_kernels(real, generated)
    g = spec(name)
    ns = analytical(table, g)
    assert np.all(np.isfinite(ns)) and np.all(ns > 0)
    floor = physical_floor_ns(table, g)
    assert np.all(ns >= floor * (1 - 1e-9)), (name, ns, floor)
    assert np.all(ns >= roofline_ns(workload_of(table), g) * (1 - 1e-9))
    # the heavy (500x grid) kernels are far from launch-bound: the floor is a real constraint
    assert np.all(floor[-len(generated):] > 0.2 * ns[-len(generated):]) or name == "SM61_P4"


def test_rows_are_predicted_independently(real: KernelTable, generated: KernelTable) -> None:
    table = _all_kernels(real, generated)
    together = analytical(table, "SM80_A100")
    alone = np.array([analytical(table.take(np.array([i])), "SM80_A100")[0] for i in range(len(table))])
    assert np.allclose(together, alone, rtol=1e-12)


def test_four_times_the_blocks_needs_more_waves_on_a_small_gpu(generated: KernelTable) -> None:
    p4, h100 = spec("SM61_P4"), spec("SM90_H100")
    pair = generated.take(np.array([0, 1]))
    bps, _ = occupancy(pair, p4)
    waves = np.ceil(pair["grid_x"] / (p4.sms * bps))
    assert list(waves) == [1, 2]
    assert list(np.ceil(pair["grid_x"] / (h100.sms * occupancy(pair, h100)[0]))) == [1, 1]
    small = analytical(pair, p4)
    big = analytical(pair, h100)
    assert small[1] > 1.5 * small[0], small
    # on the big GPU both grids fit in one wave: 4x the blocks costs (relatively) less
    assert big[1] / big[0] < small[1] / small[0], (small, big)
    assert big[1] >= big[0]


def test_more_work_per_kernel_takes_longer_on_every_target(generated: KernelTable) -> None:
    for name in TARGETS:
        ns = analytical(generated, name)
        assert ns[3] > ns[2], (name, ns)  # 2x the blocks and 2x the loop trip count
        grown = [analytical(scaled(generated, 1, k), name)[0] for k in (1, 4, 16, 64)]
        assert all(b >= a for a, b in itertools.pairwise(grown)), (name, grown)
        assert grown[-1] > 4 * grown[0], (name, grown)


def test_heavy_kernel_is_faster_on_newer_bigger_gpus(generated: KernelTable) -> None:
    heavy = scaled(generated, 1, 1000)
    times = [analytical(heavy, name)[0] for name in TARGETS]
    assert times == sorted(times, reverse=True), dict(zip(TARGETS, times, strict=True))


def test_memory_heavy_kernel_benefits_from_bandwidth(generated: KernelTable) -> None:
    """A streaming kernel (its traffic far beyond L2) speeds up with DRAM bandwidth almost
    in proportion; a compute-only kernel does not move."""
    h100 = spec("SM90_H100")
    faster = msgspec.structs.replace(h100, memory_bandwidth_gbps=2 * h100.memory_bandwidth_gbps)
    streaming = scaled(generated, 1, 2000)
    assert streaming["footprint_lines"][0] * 128 > 10 * h100.l2_bytes
    base, doubled = analytical(streaming, h100)[0], analytical(streaming, faster)[0]
    fixed = fixed_ns(generated, h100)
    ratio = (base - fixed) / (doubled - fixed)
    assert 1.6 < ratio <= 2.0 + 1e-4, (base, doubled, ratio)
    assert predict(streaming, h100, source=SOURCE, model="analytical").regime_names[0] == "memory"
    # same SMs and clocks, 4.8 vs 3.35 TB/s: H200 is faster on the streaming kernel
    assert analytical(streaming, "SM90_H200")[0] < base
    compute = scaled(generated, 1, 400, columns=("warp_insts", "insts_fp32", "insts_int"))
    assert analytical(compute, faster)[0] == pytest.approx(analytical(compute, h100)[0], rel=1e-12)


def test_compute_heavy_kernel_follows_fp32_throughput(generated: KernelTable) -> None:
    """FP32-bound work scales with SIMT throughput: half the clock (and so half the quoted
    FP32 and INT32 peaks), same memory system, takes twice the work time."""
    h100 = spec("SM90_H100")
    half = msgspec.structs.replace(h100, boost_clock_mhz=h100.boost_clock_mhz / 2,
                                   fp32_tflops=h100.fp32_tflops / 2, int32_tops=h100.int32_tops / 2)
    compute = scaled(generated, 1, 2000, columns=("warp_insts", "insts_fp32"))
    full_t = analytical(compute, h100)[0] - fixed_ns(generated, h100)
    half_t = analytical(compute, half)[0] - fixed_ns(generated, half)
    assert predict(compute, h100, source=SOURCE, model="analytical").regime_names[0] == "compute"
    assert half_t / full_t == pytest.approx(2.0, rel=0.05), (full_t, half_t)
