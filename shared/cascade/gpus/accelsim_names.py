"""Which Accel-Sim config serves which Cascade GPU: one table, with the reason for each pairing.

Accel-Sim names its tested configurations after the chip it modelled (``SM6_TITANX``,
``SM7_QV100``, ``SM75_RTX2060``, ``SM86_RTX3070``, ``SM90_H100`` ...: folders under
``gpu-simulator/gpgpu-sim/configs/tested-cfgs`` and ``gpu-simulator/configs/tested-cfgs``);
Cascade names its GPU specs after the product (``SM61_GTX1080TI``, ``SM70_V100_SXM2`` ...).
:data:`PAIRINGS` says, per Cascade GPU id, which stock configs may serve it, best first, and
why: ``same chip`` (the config models this GPU's die) or ``closest`` (same architecture,
another chip: Accel-Sim's result is for the config's shape, not this product's).

A GPU missing here has no stock config (Blackwell, Fermi/Kepler configs have no Cascade spec;
``SM100_GCN3`` is an AMD GCN3 model, not Blackwell). Settings override or add pairings
(``CASCADE_ACCELSIM_CONFIG_MAP``, entries ``GPU_ID=CONFIG_NAME``; ``GPU_ID=`` for none).
This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

from cascade.errors import ConfigError

Relation = Literal["same chip", "closest", "folder", "setting"]


class ConfigPairing(msgspec.Struct, frozen=True, kw_only=True):
    """One Accel-Sim config that can serve one Cascade GPU."""

    gpu_id: str
    """Cascade GPU spec id."""
    config: str
    """Accel-Sim config folder name (as under ``configs/tested-cfgs``)."""
    relation: Relation
    """``same chip``, ``closest``, ``folder`` (a folder named after the GPU) or ``setting``
    (``CASCADE_ACCELSIM_CONFIG_MAP``)."""
    reason: str
    """Why this config serves this GPU, one sentence."""


def _p(gpu_id: str, config: str, relation: Relation, reason: str) -> ConfigPairing:
    return ConfigPairing(gpu_id=gpu_id, config=config, relation=relation, reason=reason)


_TITANX = "SM6_TITANX models the Pascal GP102 (TITAN X, 28 SMs, 1417 MHz)"
_QV100 = "SM7_QV100 models the Volta GV100 (80 SMs, 1132 MHz)"
_RTX2060 = "SM75_RTX2060 models the Turing TU106 (RTX 2060, 30 SMs, 1365 MHz)"
_RTX3070 = "SM86_RTX3070 models the Ampere GA104 (RTX 3070, 46 SMs, 1132 MHz)"
_H100 = "SM90_H100 models the Hopper GH100 (H100 SXM5, 132 SMs, 1132 MHz)"

#: Stock pairings, per Cascade GPU id best first (see the module docstring).
PAIRINGS: tuple[ConfigPairing, ...] = (
    _p("SM60_P100_PCIE_16GB", "SM6_TITANX", "closest", f"{_TITANX}; the P100 is GP100 (56 SMs, HBM2)"),
    _p("SM60_P100_SXM2_16GB", "SM6_TITANX", "closest", f"{_TITANX}; the P100 is GP100 (56 SMs, HBM2)"),
    _p("SM61_GTX1080", "SM6_TITANX", "closest", f"{_TITANX}; the GTX 1080 is GP104 (20 SMs)"),
    _p("SM61_GTX1080TI", "SM6_TITANX", "same chip", f"{_TITANX}; the GTX 1080 Ti is GP102 with 28 SMs"),
    _p("SM61_P4", "SM6_TITANX", "closest", f"{_TITANX}; the P4 is GP104 (20 SMs)"),
    _p("SM70_V100_PCIE_32GB", "SM7_QV100", "same chip", f"{_QV100}; the V100 PCIe is GV100 with 80 SMs"),
    _p("SM70_V100_PCIE_32GB", "SM7_GV100", "same chip", "SM7_GV100 models the Volta GV100 (80 SMs, 1447 MHz)"),
    _p("SM70_V100_SXM2", "SM7_QV100", "same chip", f"{_QV100}; the V100 SXM2 is GV100 with 80 SMs"),
    _p("SM70_V100_SXM2", "SM7_GV100", "same chip", "SM7_GV100 models the Volta GV100 (80 SMs, 1447 MHz)"),
    _p("SM75_RTX2080TI", "SM75_RTX2060", "closest", f"{_RTX2060}; the RTX 2080 Ti is TU102 (68 SMs)"),
    _p("SM75_RTX2080TI", "SM75_RTX2060_S", "closest", "SM75_RTX2060_S models the Turing TU106 (34 SMs)"),
    _p("SM75_T4", "SM75_RTX2060", "closest", f"{_RTX2060}; the T4 is TU104 (40 SMs)"),
    _p("SM75_T4", "SM75_RTX2060_S", "closest", "SM75_RTX2060_S models the Turing TU106 (34 SMs)"),
    _p("SM80_A100", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models GA100 (108 SMs)"),
    _p("SM80_A100_PCIE_40GB", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models GA100"),
    _p("SM80_A100_PCIE_80GB", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models GA100"),
    _p("SM80_A100_SXM_40GB", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models GA100"),
    _p("SM86_A10", "SM86_RTX3070", "closest", f"{_RTX3070}; the A10 is GA102 (72 SMs)"),
    _p("SM86_A10G", "SM86_RTX3070", "closest", f"{_RTX3070}; the A10G is GA102 (80 SMs)"),
    _p("SM86_A40", "SM86_RTX3070", "closest", f"{_RTX3070}; the A40 is GA102 (84 SMs)"),
    _p("SM86_RTX3090", "SM86_RTX3070", "closest", f"{_RTX3070}; the RTX 3090 is GA102 (82 SMs)"),
    _p("SM86_RTXA6000", "SM86_RTX3070", "closest", f"{_RTX3070}; the RTX A6000 is GA102 (84 SMs)"),
    _p("SM89_L4", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models Ada (AD104)"),
    _p("SM89_L40", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models Ada (AD102)"),
    _p("SM89_L40S", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models Ada (AD102)"),
    _p("SM89_RTX4090", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models Ada (AD102)"),
    _p("SM89_RTX6000ADA", "SM86_RTX3070", "closest", f"{_RTX3070}; no stock config models Ada (AD102)"),
    _p("SM90_GH200", "SM90_H100", "same chip", f"{_H100}; GH200's GPU is GH100 with 132 SMs (HBM3 96 GB)"),
    _p("SM90_H100", "SM90_H100", "same chip", f"{_H100}"),
    _p("SM90_H100_PCIE", "SM90_H100", "same chip", f"{_H100}; the H100 PCIe is GH100 with 114 SMs"),
    _p("SM90_H200", "SM90_H100", "same chip", f"{_H100}; the H200 is GH100 with HBM3e 141 GB"),
)

#: Every Accel-Sim config name the stock table uses.
STOCK_CONFIG_NAMES: frozenset[str] = frozenset(p.config for p in PAIRINGS)

#: The setting that overrides the table, and the form of its entries.
MAP_VAR = "CASCADE_ACCELSIM_CONFIG_MAP"
MAP_FORM = "GPU_ID=ACCELSIM_CONFIG (e.g. SM80_A100=SM86_RTX3070; GPU_ID= for none)"


def parse_overrides(entries: Iterable[str]) -> dict[str, str]:
    """``GPU_ID=CONFIG`` entries as ``{gpu_id: config}`` (``""``: no config for that GPU);
    :class:`ConfigError` naming :data:`MAP_VAR` for a malformed one."""
    out: dict[str, str] = {}
    for entry in entries:
        gpu, sep, config = entry.partition("=")
        if not sep or not gpu.strip():
            raise ConfigError(MAP_VAR, entry, MAP_FORM)
        out[gpu.strip()] = config.strip()
    return out


def pairings_for(overrides: Mapping[str, str] | None = None) -> dict[str, list[ConfigPairing]]:
    """GPU id -> candidate configs, best first: the stock table with ``overrides`` (from
    :func:`parse_overrides`) replacing a GPU's candidates or adding a GPU."""
    table: dict[str, list[ConfigPairing]] = {}
    for p in PAIRINGS:
        table.setdefault(p.gpu_id, []).append(p)
    for gpu, config in (overrides or {}).items():
        table[gpu] = [_p(gpu, config, "setting", f"{MAP_VAR} names {config} for {gpu}")] if config else []
    return table
