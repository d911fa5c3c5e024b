"""The accel-sim backend's pure pieces (no process, no server): the real Accel-Sim log parsed
line by line (golden, per-kernel statistics included), statistics without a clock naming the
line, the config-map setting, and unsimulated kernels falling back to the built-in model,
flagged. Running a stand-in accel-sim.out is ``tests/integration/test_accelsim.py``."""

from __future__ import annotations

import numpy as np
import pytest

from cascade.engine import predict
from cascade.engine.accelsim import (
    AccelSimConfig,
    AccelSimOutputParser,
    parse_accelsim_output,
)
from cascade.engine.extrapolation import NOT_SIMULATED
from cascade.kerneltable import KernelTable
from tests.support.accelsim_helpers import REAL_LOG as LOG

# --------------------------------------------------------------------------- golden log


def test_real_log_parsed_line_by_line_golden() -> None:
    parser = AccelSimOutputParser(str(LOG))
    completed_at = []
    with LOG.open() as fh:
        for line in fh:
            k = parser.feed(line.rstrip("\n"))
            if k is not None:
                completed_at.append((parser.lineno, k))
    assert parser.finish() is None
    assert len(completed_at) == 1
    lineno, k = completed_at[0]
    assert lineno == 7696  # the gpu_total_sim_rate line closes the kernel's block
    assert (k.uid, k.name, k.cycles, k.instructions) == (1, "_Z6vecAddIfEvPT_S1_S1_i", 1282, 10516)
    assert k.core_clock_mhz == 1607.0 and k.ipc == pytest.approx(8.2028)
    assert k.sim_rate_ips == 10516 and k.kernel_id == 1  # from "Processing kernel .../kernel-1.traceg"
    assert k.duration_ns == pytest.approx(1282 / 1607.0 * 1e3)
    assert parse_accelsim_output(LOG.read_text(), str(LOG)) == [k]


def test_real_log_statistics_per_kernel() -> None:
    """Occupancy and L2 BW from the kernel's lines; L2 hits and DRAM utilisation from the
    counter blocks that follow them (computed here from the log's own lines)."""
    import re

    parser = AccelSimOutputParser(str(LOG))
    text = LOG.read_text()
    for line in text.splitlines():
        parser.feed(line)
    parser.finish()
    [st] = parser.statistics
    assert (st.uid, st.kernel_id, st.cycles, st.instructions) == (1, 1, 1282, 10516)
    assert st.occupancy_pct == pytest.approx(20.686) and st.l2_bw_gbps == pytest.approx(0.5616)
    l2a = int(re.search(r"^L2_total_cache_accesses = (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    l2m = int(re.search(r"^L2_total_cache_misses = (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    assert st.l2_accesses == l2a and st.l2_hit_rate == pytest.approx(1 - l2m / l2a)
    assert st.l1d_accesses == 0 and st.l1d_hit_rate is None  # no L1D accesses: no rate
    pairs = re.findall(r"^bwutil = ([0-9.]+) \ntotal_CMD = (\d+)", text, re.M)
    assert len(pairs) >= 8
    busy = sum(round(float(u) * int(c)) for u, c in pairs)
    assert st.dram_bw_util == pytest.approx(busy / sum(int(c) for _, c in pairs))
    assert 0 < st.dram_bw_util < 0.02


def test_statistics_without_a_clock_name_the_line() -> None:
    from cascade.errors import TraceFormatError

    text = "kernel_name = k\nkernel_launch_uid = 1\ngpu_sim_cycle = 10\ngpu_sim_insn = 5\ngpu_total_sim_rate=5\n"
    with pytest.raises(TraceFormatError, match="gpgpu_clock_domains"):
        parse_accelsim_output(text, "out.log")
    assert parse_accelsim_output(text, "out.log", core_clock_mhz=1000.0)[0].duration_ns == 10.0


# --------------------------------------------------------------------------- settings


def test_config_map_setting_is_a_list_of_pairs() -> None:
    from cascade.errors import ConfigError
    from cascade.platform.settings import load_settings

    got = load_settings({"CASCADE_ACCELSIM_CONFIG_MAP": "SM80_A100=SM86_RTX3070, SM90_H200="})
    assert got.accelsim_config_map == ["SM80_A100=SM86_RTX3070", "SM90_H200="]
    with pytest.raises(ConfigError, match="CASCADE_ACCELSIM_CONFIG_MAP.*GPU_ID=ACCELSIM_CONFIG"):
        load_settings({"CASCADE_ACCELSIM_CONFIG_MAP": "SM80_A100"})


# --------------------------------------------------------------------------- mapping


def test_unsimulated_kernels_use_the_builtin_model_flagged() -> None:
    table = KernelTable.from_rows([{"name": f"k{i}", "kernel_id": i, "bytes": 1e6, "flops": 1e6}
                                   for i in (1, 2, 3, 4)])
    cfg = AccelSimConfig(simulated_cycles={"1": 1410, "3": 2820, "9": 99}, core_clock_mhz=1410.0)
    p = predict(table, "SM80_A100", model="accel-sim", config=cfg)
    assert p.predicted_ns[[0, 2]] == pytest.approx([1000.0, 2000.0])  # cycles at 1410 MHz, exactly
    assert list(p.models) == ["accel-sim", "analytical", "accel-sim", "analytical"]
    assert p.flags is not None
    assert [bool(f & NOT_SIMULATED) for f in p.flags] == [False, True, False, True]
    assert p.extrapolation_reasons[
        "not simulated by Accel-Sim (not traced or skipped): built-in model used"] == 2
    assert np.all(p.predicted_ns[[1, 3]] > 0)
