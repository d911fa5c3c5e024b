"""The boards people buy now (issue 42): B300, GB200, GB300, RTX PRO 6000 Blackwell, and the
interconnect fields (NVLink generation, bandwidth and domain, NVLink SHARP, PCIe) every spec
carries."""

from __future__ import annotations

import msgspec
import pytest

from cascade.gpus import GPURegistry, builtin_specs, default_registry, spec_from_mapping
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
}
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
