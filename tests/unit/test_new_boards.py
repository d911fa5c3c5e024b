"""The boards people buy now (issue 42): B300, GB200, GB300, RTX PRO 6000 Blackwell, and the
interconnect fields (NVLink generation, bandwidth and domain, NVLink SHARP, PCIe) every spec
carries."""

from __future__ import annotations

import msgspec
import pytest

from cascade.gpus import GPURegistry, GPUSpec, builtin_specs, default_registry, spec_from_mapping
from cascade.gpus.spec import check_consistency

NEW = ("SM103_B300", "SM100_GB200", "SM103_GB300", "SM120_RTXPRO6000_SERVER", "SM120_RTXPRO6000_WS")
#: Device names drivers report (nvidia-smi / torch.cuda.get_device_name) -> spec id.
DRIVER_NAMES = {
    "NVIDIA B300 SXM6 AC": "SM103_B300",
    "NVIDIA GB200": "SM100_GB200",
    "NVIDIA GB300": "SM103_GB300",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "SM120_RTXPRO6000_SERVER",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "SM120_RTXPRO6000_WS",
    "NVIDIA A100-PG509-200": "SM80_A100_SXM_40GB",  # an OEM part name in real traces (issue 45)
    "NVIDIA H800": "SM90_H800",
    "NVIDIA H20": "SM90_H20",
    "NVIDIA A800-SXM4-80GB": "SM80_A800",
    "Tesla V100S-PCIE-32GB": "SM70_V100S_PCIE",
    "NVIDIA A30": "SM80_A30",
    "NVIDIA H100 NVL": "SM90_H100_NVL",
    "NVIDIA H200 NVL": "SM90_H200_NVL",
}
#: Rented / owned boards the catalogue lacked, each with the catalogued sibling it is checked against.
RENTED = {"SM90_H800": "SM90_H100", "SM90_H20": "SM90_H100", "SM80_A800": "SM80_A100",
          "SM70_V100S_PCIE": "SM70_V100_PCIE_32GB", "SM80_A30": "SM80_A100_PCIE_80GB",
          "SM90_H100_NVL": "SM90_H100_PCIE", "SM90_H200_NVL": "SM90_H200"}
NVLINK_BOARDS = ("SM80_A100", "SM80_A100_SXM_40GB", "SM90_H100", "SM90_H200", "SM90_GH200", "SM100_B200",
                 "SM103_B300", "SM100_GB200", "SM103_GB300")


def test_the_new_boards_load_with_sources() -> None:
    reg = default_registry()
    for spec_id in NEW:
        spec = reg.get(spec_id)
        assert spec.id == spec_id and spec.arch == "blackwell" and spec.sources
        check_consistency(spec)


@pytest.mark.parametrize(("device", "spec_id"), sorted(DRIVER_NAMES.items()))
def test_driver_names_resolve(device: str, spec_id: str) -> None:
    reg = default_registry()
    assert reg.get(device).id == spec_id
    assert reg.resolve(device.lower().replace(" ", "_")) is reg.get(spec_id)


@pytest.mark.parametrize("spec_id", NEW)
def test_fp4_outruns_fp8_which_is_at_least_bf16(spec_id: str) -> None:
    t = default_registry().get(spec_id).tensor_tflops
    assert t["fp4"] > t["fp8"] >= t["bf16"] > 0


def test_blackwell_ultra_fp4_exceeds_blackwell() -> None:
    reg = default_registry()
    b200, b300 = reg.get("SM100_B200"), reg.get("SM103_B300")
    gb200, gb300 = reg.get("SM100_GB200"), reg.get("SM103_GB300")
    assert b200.tensor_tflops["fp4"] == 9000
    assert b300.tensor_tflops["fp4"] > b200.tensor_tflops["fp4"]
    assert gb300.tensor_tflops["fp4"] > gb200.tensor_tflops["fp4"]
    # the dense BF16 / FP8 peaks are the Blackwell ones; FP64 is cut on Blackwell Ultra
    assert b300.tensor_tflops["bf16"] == b200.tensor_tflops["bf16"]
    assert b300.fp64_tflops < b200.fp64_tflops / 10


@pytest.mark.parametrize("spec_id", NVLINK_BOARDS)
def test_nvlink_boards_carry_their_nvlink(spec_id: str) -> None:
    spec = default_registry().get(spec_id)
    assert spec.nvlink_gen >= 3 and spec.nvlink_gbps >= 300 and spec.nvlink_domain >= 8
    if spec.arch in ("hopper", "blackwell"):
        assert spec.nvls
    if spec.arch == "blackwell":
        assert (spec.nvlink_gen, spec.nvlink_gbps) == (5, 900)


def test_nvlink_figures_per_direction() -> None:
    reg = default_registry()
    assert reg.get("SM80_A100").nvlink_gbps == 300
    assert reg.get("SM90_H100").nvlink_gbps == 450
    assert reg.get("SM100_B200").nvlink_gbps == 900
    assert not reg.get("SM80_A100").nvls  # NVSwitch gen 2: no in-switch reductions


def test_nvl72_gpus_share_one_domain_of_72() -> None:
    reg = default_registry()
    assert reg.get("SM100_GB200").nvlink_domain == 72
    assert reg.get("SM103_GB300").nvlink_domain == 72
    assert reg.get("SM100_B200").nvlink_domain == reg.get("SM103_B300").nvlink_domain == 8


@pytest.mark.parametrize("spec_id", ["SM120_RTXPRO6000_SERVER", "SM120_RTXPRO6000_WS", "SM89_L40S", "SM89_L4",
                                     "SM89_L40"])
def test_pcie_boards_have_no_nvlink(spec_id: str) -> None:
    spec = default_registry().get(spec_id)
    assert (spec.nvlink_gen, spec.nvlink_gbps, spec.nvlink_domain, spec.nvls) == (0, 0.0, 0, False)
    assert spec.pcie_gbps == {4: 32.0, 5: 64.0}[spec.pcie_gen]


def test_pcie_generations() -> None:
    reg = default_registry()
    assert (reg.get("SM103_B300").pcie_gen, reg.get("SM103_B300").pcie_gbps) == (6, 128.0)
    assert (reg.get("SM100_B200").pcie_gen, reg.get("SM100_B200").pcie_gbps) == (5, 64.0)
    assert (reg.get("SM120_RTXPRO6000_SERVER").pcie_gen, reg.get("SM90_H100").pcie_gen) == (5, 5)
    assert (reg.get("SM80_A100").pcie_gen, reg.get("SM80_A100").pcie_gbps) == (4, 32.0)


def test_a_spec_without_the_interconnect_fields_still_loads_with_defaults() -> None:
    data = msgspec.to_builtins(GPURegistry(builtin_specs()).get("SM90_H100"))
    for key in ("nvlink_gen", "nvlink_gbps", "nvlink_domain", "nvls", "pcie_gen", "pcie_gbps"):
        del data[key]
    spec = spec_from_mapping({**data, "id": "OLD_STYLE"}, "test")
    assert (spec.nvlink_gen, spec.nvlink_gbps, spec.nvlink_domain, spec.nvls) == (0, 0.0, 0, False)
    assert (spec.pcie_gen, spec.pcie_gbps) == (4, 32.0)


def test_interconnect_fields_are_bounded_and_consistent() -> None:
    from cascade.errors import ConfigError

    base = msgspec.to_builtins(GPURegistry(builtin_specs()).get("SM90_H100"))
    with pytest.raises(ConfigError, match="nvlink_gbps"):
        spec_from_mapping({**base, "nvlink_gbps": -1.0}, "test")
    with pytest.raises(ConfigError, match="pcie_gen"):
        spec_from_mapping({**base, "pcie_gen": 99}, "test")
    h100 = default_registry().get("SM90_H100")
    with pytest.raises(ValueError, match="nvlink_gbps"):
        check_consistency(msgspec.structs.replace(h100, nvlink_gen=0))
    with pytest.raises(ValueError, match="nvls"):
        check_consistency(msgspec.structs.replace(h100, nvlink_domain=0))


@pytest.mark.parametrize(("spec_id", "sibling_id"), sorted(RENTED.items()))
def test_rented_boards_load_consistent_with_sources(spec_id: str, sibling_id: str) -> None:
    reg = default_registry()
    spec, sibling = reg.get(spec_id), reg.get(sibling_id)
    check_consistency(spec)
    assert spec.sources and spec.id == spec_id
    assert (spec.arch, spec.sm_version) == (sibling.arch, sibling.sm_version)


def test_h800_is_an_h100_sxm_with_nvlink_and_fp64_cut() -> None:
    reg = default_registry()
    h800, h100 = reg.get("SM90_H800"), reg.get("SM90_H100")
    assert h800.tensor_tflops["bf16"] == h100.tensor_tflops["bf16"]
    assert h800.tensor_tflops["fp8"] == h100.tensor_tflops["fp8"]
    assert (h800.sms, h800.fp32_tflops, h800.memory_bandwidth_gbps) == (h100.sms, h100.fp32_tflops,
                                                                         h100.memory_bandwidth_gbps)
    assert h800.nvlink_gen == h100.nvlink_gen and h800.nvlink_gbps == 200 < h100.nvlink_gbps
    assert h800.fp64_tflops < h100.fp64_tflops / 10
    assert reg.resolve("NVIDIA H800 PCIe") is not h800  # the PCIe board (114 SMs) is another GPU


def test_h100_nvl_is_a_whole_gh100_on_a_pcie_board_in_bridged_pairs() -> None:
    """All 132 SMs and six HBM3 stacks (94 GB, 3.9 TB/s: more than the SXM5's 80 GB at 3.35), its
    tensor peaks between the 350 W PCIe board's and the 700 W SXM5's, NVLink only to its bridged twin."""
    reg = default_registry()
    nvl, sxm, pcie = reg.get("SM90_H100_NVL"), reg.get("SM90_H100"), reg.get("SM90_H100_PCIE")
    assert nvl.sms == sxm.sms > pcie.sms
    assert nvl.memory_gb > sxm.memory_gb and nvl.memory_bandwidth_gbps > sxm.memory_bandwidth_gbps
    for dtype in ("bf16", "fp8", "tf32"):
        assert pcie.tensor_tflops[dtype] < nvl.tensor_tflops[dtype] < sxm.tensor_tflops[dtype]
    assert nvl.tensor_tflops["fp8"] == 2 * nvl.tensor_tflops["bf16"]
    assert nvl.nvlink_domain == 2 and not nvl.nvls and nvl.pcie_gen == 5


def test_h200_nvl_is_an_h100_nvl_with_the_h200s_memory() -> None:
    """The same GH100 at the same power-capped clocks as the H100 NVL (the same peaks), with the H200
    SXM's 141 GB at 4.8 TB/s; NVLink bridges of up to four boards."""
    reg = default_registry()
    nvl, h100_nvl, h200 = reg.get("SM90_H200_NVL"), reg.get("SM90_H100_NVL"), reg.get("SM90_H200")
    assert nvl.tensor_tflops == h100_nvl.tensor_tflops and nvl.fp32_tflops == h100_nvl.fp32_tflops
    assert (nvl.memory_gb, nvl.memory_bandwidth_gbps) == (h200.memory_gb, h200.memory_bandwidth_gbps)
    assert nvl.tensor_tflops["bf16"] < h200.tensor_tflops["bf16"]
    assert nvl.nvlink_domain == 4 and nvl.nvlink_gbps == h200.nvlink_gbps and not nvl.nvls


def test_h20_trades_tensor_throughput_for_memory_bandwidth() -> None:
    reg = default_registry()
    h20, h100 = reg.get("SM90_H20"), reg.get("SM90_H100")
    assert h20.tensor_tflops["bf16"] < 0.2 * h100.tensor_tflops["bf16"]
    assert h20.tensor_tflops["fp8"] == 2 * h20.tensor_tflops["bf16"]
    assert h20.memory_bandwidth_gbps > h100.memory_bandwidth_gbps and h20.memory_gb > h100.memory_gb
    assert h20.sms < h100.sms and h20.nvlink_gbps == h100.nvlink_gbps
    assert "NVIDIA H20-3e" not in reg  # the 141 GB HBM3e board is another GPU, not an alias


def test_a800_is_an_a100_sxm_except_nvlink() -> None:
    reg = default_registry()
    a800, a100 = msgspec.to_builtins(reg.get("SM80_A800")), msgspec.to_builtins(reg.get("SM80_A100"))
    differ = {k for k in a100 if a800[k] != a100[k]}
    assert differ == {"id", "name", "aliases", "sources", "nvlink_gbps"}
    assert a800["nvlink_gbps"] == 200 < a100["nvlink_gbps"]


def test_v100s_is_a_faster_clocked_v100_pcie() -> None:
    reg = default_registry()
    v100s, v100 = reg.get("SM70_V100S_PCIE"), reg.get("SM70_V100_PCIE_32GB")
    assert (v100s.sms, v100s.memory_gb, v100s.l2_mb) == (v100.sms, v100.memory_gb, v100.l2_mb)
    for field in ("boost_clock_mhz", "fp32_tflops", "fp64_tflops", "memory_bandwidth_gbps"):
        assert getattr(v100s, field) > getattr(v100, field), field
    assert v100s.tensor_tflops["fp16"] > v100.tensor_tflops["fp16"]


def test_a30_is_about_half_an_a100_at_the_same_rate_per_sm() -> None:
    reg = default_registry()
    a30, a100 = reg.get("SM80_A30"), reg.get("SM80_A100_PCIE_80GB")

    def per_sm_clock(spec: GPUSpec) -> float:
        return spec.tensor_tflops["fp16"] * 1e12 / (spec.sms * spec.boost_clock_mhz * 1e6)

    assert a30.sms * 2 < a100.sms * 1.1 and a30.memory_bandwidth_gbps < a100.memory_bandwidth_gbps / 2
    assert per_sm_clock(a30) == pytest.approx(per_sm_clock(a100), rel=0.01)
    assert a30.tensor_tflops["int8"] == 2 * a30.tensor_tflops["fp16"]
