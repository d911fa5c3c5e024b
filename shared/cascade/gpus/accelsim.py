"""Import an Accel-Sim ``gpgpusim.config`` (+ ``trace.config``) as a :class:`GPUSpec`."""

from __future__ import annotations

import re

from cascade.errors import ConfigError
from cascade.gpus.spec import Efficiency, GPUSpec

_OPT = re.compile(r"^\s*(-[A-Za-z0-9_:]+)\s+(.*?)\s*(?:#.*)?$")


def parse_options(text: str) -> dict[str, str]:
    """Option -> value from gpgpu-sim config text (also the option dump in an accel-sim log)."""
    opts: dict[str, str] = {}
    for line in text.splitlines():
        m = _OPT.match(line)
        if m and m.group(2):
            opts[m.group(1)] = m.group(2).strip()
    return opts


def _num(opts: dict[str, str], key: str, default: float | None = None) -> float:
    raw = opts.get(key)
    if raw is None:
        if default is None:
            raise ConfigError(f"accel-sim option {key}", None, "present in gpgpusim.config")
        return default
    try:
        return float(raw.split(",")[0].split(":")[0])
    except ValueError:
        raise ConfigError(f"accel-sim option {key}", raw, "a number") from None


def _arch_for(sm_version: int) -> str:
    for floor, arch in ((100, "blackwell"), (90, "hopper"), (89, "ada"), (80, "ampere"),
                        (75, "turing"), (70, "volta")):
        if sm_version >= floor:
            return arch
    return "pascal"


def fp32_lanes_per_sm(sm_version: int) -> int:
    """FP32 FMA lanes per SM by compute capability (CUDA guide throughput table)."""
    if sm_version in (60, 70, 72, 75, 80):
        return 64
    return 128


def import_accelsim_config(
    gpgpusim_config_text: str,
    trace_config_text: str | None = None,
    *,
    name: str,
    sm_version: int | None = None,
    tensor_tflops: dict[str, float] | None = None,
) -> GPUSpec:
    """Build a spec from Accel-Sim config text.

    SMs = clusters x cores per cluster; core clock from ``-gpgpu_clock_domains``;
    DRAM bandwidth = channels x chips per channel x bus width x DRAM clock x
    data/command frequency ratio; L2 = sets x line x assoc per sub-partition x
    sub-partitions. FP32 peak assumes the config's SIMT lanes (``-gpgpu_shader_core_pipeline``
    warp size x 4 sub-cores, sm_version >= 70) or 128 (Pascal) FMA lanes per SM.
    Tensor peaks are not in the config: pass ``tensor_tflops`` if you need them.
    """
    opts = parse_options(gpgpusim_config_text)
    if trace_config_text:
        opts.update(parse_options(trace_config_text))
    clusters = _num(opts, "-gpgpu_n_clusters")
    per_cluster = _num(opts, "-gpgpu_n_cores_per_cluster", 1)
    sms = int(clusters * per_cluster)
    domains = opts.get("-gpgpu_clock_domains")
    if not domains:
        raise ConfigError("accel-sim option -gpgpu_clock_domains", None, "core:icnt:l2:dram MHz")
    try:
        core_mhz, _icnt, _l2, dram_mhz = (float(x) for x in domains.split(":")[:4])
    except ValueError:
        raise ConfigError("accel-sim option -gpgpu_clock_domains", domains, "core:icnt:l2:dram MHz") from None
    n_mem = _num(opts, "-gpgpu_n_mem")
    chips = _num(opts, "-gpgpu_n_mem_per_ctrlr", 1)
    buswidth = _num(opts, "-gpgpu_dram_buswidth", 4)
    ratio = _num(opts, "-dram_data_command_freq_ratio", 2)
    bandwidth_gbps = n_mem * chips * buswidth * dram_mhz * 1e6 * ratio / 1e9
    sub = _num(opts, "-gpgpu_n_sub_partition_per_mchannel", 1)
    l2_bytes = 0.0
    dl2 = opts.get("-gpgpu_cache:dl2", "")
    m = re.match(r"^[A-Z]:(\d+):(\d+):(\d+)", dl2)
    if m:
        l2_bytes = int(m.group(1)) * int(m.group(2)) * int(m.group(3)) * n_mem * sub
    pipeline = opts.get("-gpgpu_shader_core_pipeline", "2048:32")
    threads, _, warp = pipeline.partition(":")
    max_threads = int(float(threads))
    warp_size = int(float(warp or 32))
    regs = int(_num(opts, "-gpgpu_shader_registers", 65536))
    ctas = int(_num(opts, "-gpgpu_shader_cta", 32))
    smem = _num(opts, "-gpgpu_shmem_size", 49152)
    smem_kb = smem / 1024
    sched = int(_num(opts, "-gpgpu_num_sched_per_core", 4))
    if sm_version is None:
        sm_version = int(_num(opts, "-gpgpu_compute_capability_major", 7)) * 10 + int(
            _num(opts, "-gpgpu_compute_capability_minor", 0))
    lanes = fp32_lanes_per_sm(sm_version)
    fp32 = 2 * lanes * sms * core_mhz * 1e6 / 1e12
    launch_cycles = _num(opts, "-gpgpu_kernel_launch_latency", 0)
    dram_lat_cycles = _num(opts, "-dram_latency", 100) + _num(opts, "-gpgpu_l2_rop_latency", 85)
    return GPUSpec(
        id=name,
        name=f"{name} (imported from Accel-Sim config)",
        arch=_arch_for(sm_version),
        sm_version=sm_version,
        sms=sms,
        boost_clock_mhz=core_mhz,
        memory_gb=_num(opts, "-gpgpu_dram_size_gb", 16),
        memory_bandwidth_gbps=bandwidth_gbps,
        l2_mb=max(l2_bytes, 1) / 1e6,
        smem_per_sm_kb=smem_kb,
        smem_per_block_kb=min(smem_kb, 48 if sm_version < 70 else smem_kb),
        regs_per_sm=regs,
        max_threads_per_sm=max_threads,
        max_blocks_per_sm=ctas,
        max_warps_per_sm=max(1, max_threads // warp_size),
        schedulers_per_sm=sched,
        fp32_tflops=fp32,
        fp64_tflops=fp32 / (2 if sm_version in (60, 70, 80, 90, 100) else 32),
        fp16_tflops=fp32 * (2 if sm_version >= 60 and sm_version != 61 else 1),
        int32_tops=fp32 / 2,
        tensor_tflops=dict(tensor_tflops or {}),
        launch_overhead_ns=max(launch_cycles / core_mhz * 1e3, 1000.0),
        dram_latency_ns=dram_lat_cycles / core_mhz * 1e3 + 200.0,
        efficiency=Efficiency(),
        sources=["imported from Accel-Sim gpgpusim.config" + (" + trace.config" if trace_config_text else "")],
    )
