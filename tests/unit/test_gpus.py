"""GPU specs, registry lookups (driver names, suggestions for unknown names and Accel-Sim config
names), user specs and the Accel-Sim config importer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascade.errors import ConfigError, DuplicateNameError, UnknownGPUError
from cascade.gpus import (
    GPURegistry,
    builtin_specs,
    default_registry,
    import_accelsim_config,
    load_spec_file,
    spec_from_mapping,
)
from tests.support.gpu_ids import REQUIRED
from tests.support.paths import SHARED_DATA

DATA = SHARED_DATA


def test_all_required_specs_ship_with_sources() -> None:
    reg = default_registry()
    assert set(REQUIRED) <= set(reg.ids())
    for spec in reg:
        assert spec.sources, spec.id
        assert spec.sm_version // 10 == int(spec.id[2:].split("_")[0]) // 10


@pytest.mark.parametrize(("alias", "spec_id"), [
    ("NVIDIA H100 80GB HBM3", "SM90_H100"), ("NVIDIA A100 80GB PCIe", "SM80_A100_PCIE_80GB"),
    ("NVIDIA A100-PCIE-40GB", "SM80_A100_PCIE_40GB"), ("NVIDIA A100-SXM4-80GB", "SM80_A100"),
    ("Tesla V100-PCIE-32GB", "SM70_V100_PCIE_32GB"), ("Tesla T4", "SM75_T4"), ("NVIDIA H200", "SM90_H200"),
    ("NVIDIA B200", "SM100_B200"), ("NVIDIA L40S", "SM89_L40S"), ("NVIDIA L4", "SM89_L4"),
    ("Tesla P100-PCIE-16GB", "SM60_P100_PCIE_16GB"), ("Tesla P4", "SM61_P4"),
    ("nvidia_h100_80gb_hbm3", "SM90_H100"), ("sm90_h200", "SM90_H200"), ("tesla_v100-pcie-32gb", "SM70_V100_PCIE_32GB"),
])
def test_lookup_by_alias_case_insensitive(alias: str, spec_id: str) -> None:
    assert default_registry().get(alias).id == spec_id


def test_figures_match_docs_table() -> None:
    reg = default_registry()
    h100, a100, t4 = reg.get("SM90_H100"), reg.get("SM80_A100"), reg.get("SM75_T4")
    assert (h100.sms, h100.memory_bandwidth_gbps, h100.tensor_tflops["fp16"]) == (132, 3350, 989)
    assert (a100.sms, a100.memory_bandwidth_gbps, a100.l2_mb, a100.fp32_tflops) == (108, 2039, 40, 19.5)
    assert (t4.sms, t4.max_threads_per_sm, t4.memory_bandwidth_gbps) == (40, 1024, 320)
    assert reg.get("SM90_H200").memory_bandwidth_gbps == 4800
    assert reg.get("SM100_B200").tensor_tflops["fp8"] == 4500


def test_unknown_gpu_lists_known_ids() -> None:
    with pytest.raises(UnknownGPUError) as err:
        default_registry().get("GeForce 256")
    assert "SM90_H100" in str(err.value) and err.value.known == sorted(default_registry().ids())


def test_add_user_spec_from_file_and_duplicate_rejected(tmp_path: Path) -> None:
    reg = GPURegistry(builtin_specs())
    base = json.loads(json.dumps(__import__("msgspec").to_builtins(reg.get("SM90_H100"))))
    base.update(id="MY_H100_LOWCLOCK", aliases=["My H100"], boost_clock_mhz=1500)
    (tmp_path / "mine.json").write_text(json.dumps(base))
    loaded = reg.load_dir(tmp_path)
    assert [s.id for s in loaded] == ["MY_H100_LOWCLOCK"]
    assert reg.get("my h100").boost_clock_mhz == 1500
    with pytest.raises(DuplicateNameError):
        reg.add(reg.get("SM90_H100"))


def test_bad_spec_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "X"\nname = "x"\narch = "ampere"\nsm_version = 80\nsms = "many"\n')
    with pytest.raises(ConfigError) as err:
        load_spec_file(bad)
    assert "bad.toml" in str(err.value)


def test_import_accelsim_config_from_real_option_dump() -> None:
    text = (DATA / "accelsim-log" / "vectoradd-100-32.accelsim_log.txt").read_text()
    spec = import_accelsim_config(text, name="SM61_FROM_LOG", sm_version=61)
    assert spec.sms == 20 and spec.boost_clock_mhz == 1607.0
    assert spec.memory_bandwidth_gbps == pytest.approx(320.0)  # 8 ch x 4 B x 2500 MHz x 4
    assert spec.l2_mb == pytest.approx(64 * 128 * 16 * 16 / 1e6)
    assert spec.max_threads_per_sm == 2048 and spec.regs_per_sm == 65536 and spec.schedulers_per_sm == 2
    reg = GPURegistry()
    reg.add(spec)
    assert reg.get("sm61_from_log") is spec


def test_import_accelsim_h100_like_config_with_trace_config() -> None:
    lines = [
        "-gpgpu_n_clusters 66", "-gpgpu_n_cores_per_cluster 2", "-gpgpu_clock_domains 1980.0:1980.0:1980.0:2619.0",
        "-gpgpu_n_mem 40", "-gpgpu_n_sub_partition_per_mchannel 2", "-gpgpu_dram_buswidth 16",
        "-gpgpu_dram_burst_length 2", "-dram_data_command_freq_ratio 2",
        "-gpgpu_cache:dl2 S:64:128:16,L:B:m:L:P,A:192:4,32:0,32", "-gpgpu_shmem_size 233472",
        "-gpgpu_shader_registers 65536", "-gpgpu_shader_core_pipeline 2048:32", "-gpgpu_shader_cta 32",
        "-gpgpu_num_sched_per_core 4"]
    cfg = "\n".join(lines)
    trace = "-trace_opcode_latency_initiation_tensor 32,32 # tensor\n"
    spec = import_accelsim_config(cfg, trace, name="ACCEL_H100", sm_version=90)
    assert spec.sms == 132 and spec.arch == "hopper"
    assert spec.memory_bandwidth_gbps == pytest.approx(40 * 16 * 2619 * 2 / 1000)
    assert spec.l2_mb == pytest.approx(64 * 128 * 16 * 80 / 1e6)


def test_missing_accelsim_option_is_a_clear_error() -> None:
    with pytest.raises(ConfigError) as err:
        import_accelsim_config("-gpgpu_n_clusters 4\n", name="X")
    assert "-gpgpu_clock_domains" in str(err.value)


#: GPUs people own: driver name (as nvidia-smi / torch.cuda.get_device_name report it) -> spec
OWNED = {
    "NVIDIA GeForce GTX 1080": ("SM61_GTX1080", 20, 320, 8.87, None),
    "NVIDIA GeForce GTX 1080 Ti": ("SM61_GTX1080TI", 28, 484, 11.34, None),
    "NVIDIA GeForce RTX 2080 Ti": ("SM75_RTX2080TI", 68, 616, 13.45, 53.8),
    "NVIDIA GeForce RTX 3090": ("SM86_RTX3090", 82, 936, 35.6, 71.0),
    "NVIDIA GeForce RTX 4090": ("SM89_RTX4090", 128, 1008, 82.6, 165.2),
    "NVIDIA RTX A6000": ("SM86_RTXA6000", 84, 768, 38.7, 154.8),
    "NVIDIA RTX 6000 Ada Generation": ("SM89_RTX6000ADA", 142, 960, 91.1, 364.2),
    "NVIDIA L40": ("SM89_L40", 142, 864, 90.5, 181.05),
    "NVIDIA A10G": ("SM86_A10G", 80, 600, 35.0, 70.0),
    "NVIDIA GH200 480GB": ("SM90_GH200", 132, 4000, 67.0, 989.0),
}


@pytest.mark.parametrize("device", sorted(OWNED))
def test_gpus_people_own_resolve_from_their_driver_names(device: str) -> None:
    spec_id, sms, bw, fp32, fp16_tensor = OWNED[device]
    spec = default_registry().get(device)
    assert spec.id == spec_id and spec.sources
    assert (spec.sms, spec.memory_bandwidth_gbps, spec.fp32_tflops) == (sms, bw, fp32)
    assert spec.tensor_tflops.get("fp16") == fp16_tensor
    # the FP32 peak is the SIMT lanes at the boost clock (GP10x, GA10x, AD10x, GH100: 128 per SM)
    lanes = 64 if spec.arch == "turing" else 128
    assert spec.fp32_tflops == pytest.approx(spec.sms * lanes * 2 * spec.boost_clock_mhz * 1e-6,
                                             rel=0.03)
    assert default_registry().get(device.removeprefix("NVIDIA ")).id == spec_id


def test_unknown_gpu_suggests_the_closest_known_ones() -> None:
    with pytest.raises(UnknownGPUError) as err:
        default_registry().get("NVIDIA GeForce RTX 4090 D")
    assert err.value.suggestions[0] == "SM89_RTX4090"
    assert "closest: SM89_RTX4090" in str(err.value)
    assert err.value.to_dict()["suggestions"][0] == "SM89_RTX4090"


def test_a_config_name_where_a_gpu_is_wanted_suggests_the_gpus_it_serves() -> None:
    from cascade.runs.plan import resolve_config

    with pytest.raises(UnknownGPUError) as err:
        resolve_config("SM7_TITANV")
    assert set(err.value.suggestions[:3]) == {"SM70_V100_PCIE_32GB", "SM70_V100_SXM2", "SM70_V100S_PCIE"}
    assert "Accel-Sim config name" in str(err.value) and "Volta GV100" in str(err.value)
    with pytest.raises(UnknownGPUError) as err:
        resolve_config("SM6_TITANX")
    assert err.value.suggestions[0] == "SM61_GTX1080TI"
    assert all(default_registry().get(s).arch == "pascal" for s in err.value.suggestions)


def test_every_builtin_spec_is_within_the_plausibility_bounds() -> None:
    from cascade.gpus.spec import field_bounds

    bounds = field_bounds()
    assert {"sms", "boost_clock_mhz", "launch_overhead_ns", "tensor_tflops", "memory_gb"} <= set(bounds)
    specs = builtin_specs()
    assert len(specs) >= len(REQUIRED)
    for spec in specs:
        data = __import__("msgspec").to_builtins(spec)
        for name, (low, high) in bounds.items():
            values = data[name].values() if isinstance(data[name], dict) else [data[name]]
            for v in values:
                assert low <= v <= high, (spec.id, name, v)


@pytest.mark.parametrize(("field", "value", "range_text"), [
    ("sms", 1_200_000, "from 1 to 1024"),
    ("boost_clock_mhz", -3.4e16, "from 100 to 5000"),
    ("launch_overhead_ns", 1e300, "from 10 to 1e+06"),
    ("memory_bandwidth_gbps", float("inf"), "from 10 to 100000"),
    ("dram_latency_ns", float("nan"), "from 10 to 100000"),
    ("tensor_tflops", {"fp16": -1.0}, "from 0 to 1e+06"),
])
def test_implausible_spec_names_the_field_and_range(field: str, value: object, range_text: str) -> None:
    base = __import__("msgspec").to_builtins(GPURegistry(builtin_specs()).get("SM90_H100"))
    with pytest.raises(ConfigError) as err:
        spec_from_mapping({**base, field: value}, "test")
    assert field in str(err.value) and range_text in str(err.value)


def test_builtin_specs_obey_the_cross_field_rules() -> None:
    import msgspec

    from cascade.gpus.spec import check_consistency

    for spec in builtin_specs():
        check_consistency(spec)
    h100 = GPURegistry(builtin_specs()).get("SM90_H100")
    with pytest.raises(ValueError, match="smem_per_block_kb"):
        check_consistency(msgspec.structs.replace(h100, smem_per_block_kb=1000))
    with pytest.raises(ValueError, match="sustained_clock_mhz"):
        check_consistency(msgspec.structs.replace(h100, sustained_clock_mhz=4000))
