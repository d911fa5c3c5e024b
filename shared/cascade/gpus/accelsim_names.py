"""Which Accel-Sim config serves which Cascade GPU: paired by chip and architecture, with the
reason for each pairing.

Accel-Sim names its tested configurations after the board it modelled (``SM6_TITANX``,
``SM7_QV100``, ``SM80_A100``, ``NVIDIA_A100_80GB_PCIe``, ``SM90_H200`` ...: folders under
``gpu-simulator/gpgpu-sim/configs/tested-cfgs`` and ``gpu-simulator/configs/tested-cfgs``);
Cascade names its GPU specs after the product (``SM61_GTX1080TI``, ``SM70_V100_SXM2`` ...).
:data:`CONFIG_CHIPS` says which chip each known config models and :data:`GPU_CHIPS` which chip
each built-in GPU is; :func:`pairings_for` derives, per GPU, the configs that may serve it,
best first: ``same chip`` (the config models this GPU's die: every GA100 board on ``SM80_A100``
or ``NVIDIA_A100_80GB_PCIe``, every GH100 board on ``SM90_H100`` / ``SM90_H200``), then
``closest`` (same architecture, another chip, nearest compute capability and SM count first),
then, for Ada, an Ampere config (the architecture Ada's SM descends from) after every Ada one.

Whatever a checkout holds is paired through this: a folder of a known config name serves
every GPU of its chip or architecture; a folder named after a GPU (id or alias) serves that
GPU; a known config with no Cascade GPU of its architecture (Fermi, Kepler, AMD GCN3) serves
none, and :func:`unpaired_reason` says why. Settings override or add pairings
(``CASCADE_ACCELSIM_CONFIG_MAP``, entries ``GPU_ID=CONFIG_NAME``; ``GPU_ID=`` for none).
This module does no I/O: the GPU specs are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

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


class ModelledChip(msgspec.Struct, frozen=True, kw_only=True):
    """What one stock Accel-Sim config models."""

    config: str
    """Accel-Sim config folder name."""
    chip: str
    """The die it models (``GA100``, ``GH100`` ...)."""
    arch: str
    """Cascade architecture name (``ampere``, ``ada`` ...; ``fermi``, ``kepler``, ``gcn3`` for
    chips no Cascade spec has)."""
    sm_version: int
    """Compute capability x 10 (0 for a non-NVIDIA model)."""
    sms: int
    """SMs the config simulates."""
    board: str
    """The board the config was correlated against, in words."""
    note: str = ""
    """Why it cannot run trace-driven here, when that is known from the name alone."""


def _c(config: str, chip: str, arch: str, sm: int, sms: int, board: str, note: str = "") -> ModelledChip:
    return ModelledChip(config=config, chip=chip, arch=arch, sm_version=sm, sms=sms, board=board, note=note)


#: The stock configs of Accel-Sim and GPGPU-Sim (``dev``), what each models.
CONFIG_CHIPS: dict[str, ModelledChip] = {c.config: c for c in (
    _c("SM2_GTX480", "GF100", "fermi", 20, 15, "GeForce GTX 480",
       "a PTX-mode (GPGPU-Sim) config: Accel-Sim ships no trace.config for it, and traces of sm_20 "
       "code cannot be taken with NVBit"),
    _c("SM3_KEPLER_TITAN", "GK110", "kepler", 35, 14, "GeForce GTX TITAN"),
    _c("SM6_TITANX", "GP102", "pascal", 61, 28, "TITAN X (Pascal), 1417 MHz"),
    _c("SM7_GV100", "GV100", "volta", 70, 80, "Quadro GV100, 1447 MHz"),
    _c("SM7_QV100", "GV100", "volta", 70, 80, "Quadro GV100 / Tesla V100, 1132 MHz"),
    _c("SM7_TITANV", "GV100", "volta", 70, 80, "TITAN V"),
    _c("SM75_RTX2060", "TU106", "turing", 75, 30, "GeForce RTX 2060, 1365 MHz"),
    _c("SM75_RTX2060_S", "TU106", "turing", 75, 34, "GeForce RTX 2060 SUPER"),
    _c("SM80_A100", "GA100", "ampere", 80, 108, "A100 SXM4"),
    _c("NVIDIA_A100_80GB_PCIe", "GA100", "ampere", 80, 108, "A100 PCIe 80GB"),
    _c("SM86_RTX3070", "GA104", "ampere", 86, 46, "GeForce RTX 3070, 1132 MHz"),
    _c("SM86_RTX3060_MOBILE", "GA106", "ampere", 86, 30, "GeForce RTX 3060 Laptop GPU, 975 MHz"),
    _c("SM87_ORIN", "GA10B", "ampere", 87, 16, "Jetson AGX Orin, 1200 MHz"),
    _c("SM89_RTX4060_LAPTOP", "AD107", "ada", 89, 24, "GeForce RTX 4060 Laptop GPU, 1890 MHz"),
    _c("SM90_H100", "GH100", "hopper", 90, 132, "H100 SXM5"),
    _c("SM90_H200", "GH100", "hopper", 90, 132, "H200 SXM (HBM3e)"),
    _c("SM100_GCN3", "GCN3", "gcn3", 0, 0, "an AMD GCN3 GPU (not NVIDIA Blackwell, despite the name)",
       "models an AMD GCN3 GPU, not an NVIDIA one: no Cascade GPU pairs with it"),
)}

#: The die of every built-in Cascade GPU (a GPU missing here pairs by architecture only).
GPU_CHIPS: dict[str, str] = {
    "SM60_P100_PCIE_16GB": "GP100", "SM60_P100_SXM2_16GB": "GP100", "SM61_GTX1080": "GP104",
    "SM61_GTX1080TI": "GP102", "SM61_P4": "GP104",
    "SM70_V100_PCIE_32GB": "GV100", "SM70_V100_SXM2": "GV100", "SM70_V100S_PCIE": "GV100",
    "SM75_RTX2080TI": "TU102", "SM75_T4": "TU104",
    "SM80_A100": "GA100", "SM80_A100_PCIE_40GB": "GA100", "SM80_A100_PCIE_80GB": "GA100",
    "SM80_A100_SXM_40GB": "GA100", "SM80_A800": "GA100", "SM80_A30": "GA100",
    "SM86_A10": "GA102", "SM86_A10G": "GA102", "SM86_A40": "GA102", "SM86_RTX3090": "GA102",
    "SM86_RTXA6000": "GA102", "SM86_RTX3060_MOBILE": "GA106", "SM87_ORIN": "GA10B",
    "SM89_L4": "AD104", "SM89_L40": "AD102", "SM89_L40S": "AD102", "SM89_RTX4090": "AD102",
    "SM89_RTX6000ADA": "AD102", "SM89_RTX4060_LAPTOP": "AD107",
    "SM90_GH200": "GH100", "SM90_H100": "GH100", "SM90_H100_PCIE": "GH100", "SM90_H100_NVL": "GH100",
    "SM90_H200_NVL": "GH100",
    "SM90_H200": "GH100",
    "SM90_H800": "GH100", "SM90_H20": "GH100",
    "SM100_B200": "GB100", "SM100_GB200": "GB100", "SM103_B300": "GB110", "SM103_GB300": "GB110",
    "SM120_RTXPRO6000_SERVER": "GB202", "SM120_RTXPRO6000_WS": "GB202",
}

#: Same-chip configs a GPU prefers, first to last, before the others of its chip (the PCIe
#: boards on the PCIe config, the HBM3e board on the HBM3e one).
PREFERRED: dict[str, tuple[str, ...]] = {
    "SM80_A100": ("SM80_A100",), "SM80_A100_SXM_40GB": ("SM80_A100",),
    "SM80_A100_PCIE_40GB": ("NVIDIA_A100_80GB_PCIe",), "SM80_A100_PCIE_80GB": ("NVIDIA_A100_80GB_PCIe",),
    "SM90_H100": ("SM90_H100",), "SM90_H100_PCIE": ("SM90_H100",), "SM90_H100_NVL": ("SM90_H100",),
    "SM90_GH200": ("SM90_H100",),
    "SM90_H200": ("SM90_H200",), "SM90_H200_NVL": ("SM90_H200",),
    "SM70_V100_SXM2": ("SM7_QV100", "SM7_GV100"), "SM70_V100_PCIE_32GB": ("SM7_QV100", "SM7_GV100"),
}

#: Architecture -> the one whose configs serve it after its own (Ada's SM is Ampere's GA10x SM
#: with more L2 and FP8).
FALLBACK_ARCH: dict[str, str] = {"ada": "ampere"}

#: Compute capability of the integrated (Tegra) Ampere GPU: an Orin config serves discrete
#: boards only after every discrete config of the architecture, and the other way round.
TEGRA_SM = 87

_ARCH_WORD = {"fermi": "Fermi", "kepler": "Kepler", "pascal": "Pascal", "volta": "Volta",
              "turing": "Turing", "ampere": "Ampere", "ada": "Ada", "hopper": "Hopper",
              "blackwell": "Blackwell", "gcn3": "AMD GCN3"}


class _Spec(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def sm_version(self) -> int: ...
    @property
    def sms(self) -> int: ...


def arch_word(arch: str) -> str:
    """``ampere`` -> ``Ampere`` (as people write it)."""
    return _ARCH_WORD.get(arch, arch)


def describe_config(config: str) -> str:
    """``SM80_A100 models the Ampere GA100 (A100 SXM4, 108 SMs)``; for an unknown name, the name."""
    c = CONFIG_CHIPS.get(config)
    if c is None:
        return config
    sms = f", {c.sms} SMs" if c.sms else ""
    return f"{config} models the {arch_word(c.arch)} {c.chip} ({c.board}{sms})"


def _gpu_words(spec: _Spec) -> str:
    chip = GPU_CHIPS.get(spec.id)
    return f"the {spec.name} is {arch_word(spec.arch)}{' ' + chip if chip else ''} with {spec.sms} SMs"


def candidates_for(spec: _Spec) -> list[ConfigPairing]:
    """The stock configs that may serve ``spec``, best first (see the module docstring)."""
    chip = GPU_CHIPS.get(spec.id)
    out: list[ConfigPairing] = []
    seen: set[str] = set()

    def add(config: str, relation: Relation, why: str) -> None:
        if config not in seen:
            seen.add(config)
            out.append(ConfigPairing(gpu_id=spec.id, config=config, relation=relation,
                                     reason=f"{describe_config(config)}; {why}"))

    if chip is not None:
        same = [c for c in CONFIG_CHIPS.values() if c.chip == chip]
        order = {name: i for i, name in enumerate(PREFERRED.get(spec.id, ()))}
        same.sort(key=lambda c: (order.get(c.config, len(order)), abs(c.sms - spec.sms)))
        for c in same:
            add(c.config, "same chip", _gpu_words(spec))
    for depth, arch in enumerate((spec.arch, FALLBACK_ARCH.get(spec.arch, ""))):
        if not arch:
            continue
        near = [c for c in CONFIG_CHIPS.values() if c.arch == arch]
        near.sort(key=lambda c: ((c.sm_version == TEGRA_SM) != (spec.sm_version == TEGRA_SM),
                                 abs(c.sm_version - spec.sm_version), abs(c.sms - spec.sms)))
        for c in near:
            why = (f"{_gpu_words(spec)}: same architecture, another chip" if depth == 0 else
                   f"{_gpu_words(spec)}: {arch_word(arch)} is the architecture {arch_word(spec.arch)}'s "
                   f"SM descends from, used where no {arch_word(spec.arch)} config is present")
            add(c.config, "closest", why)
    return out


def unpaired_reason(config: str, gpu_archs: Iterable[str]) -> str:
    """Why a stock config serves no Cascade GPU here ('' when it could: it was just not chosen)."""
    c = CONFIG_CHIPS.get(config)
    if c is None:
        return ""
    if c.note:
        return c.note
    if c.arch not in set(gpu_archs):
        return (f"{describe_config(config)}; Cascade has no {arch_word(c.arch)} GPU spec (add one "
                f"with id {config} to run it, or pair a GPU with it in {MAP_VAR})")
    return ""


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


def pairings_for(specs: Iterable[_Spec], overrides: Mapping[str, str] | None = None
                 ) -> dict[str, list[ConfigPairing]]:
    """GPU id -> candidate configs, best first, for ``specs`` (:func:`candidates_for`), with
    ``overrides`` (from :func:`parse_overrides`) replacing a GPU's candidates or adding a GPU."""
    table: dict[str, list[ConfigPairing]] = {}
    for spec in specs:
        pairs = candidates_for(spec)
        if pairs:
            table[spec.id] = pairs
    for gpu, config in (overrides or {}).items():
        table[gpu] = ([ConfigPairing(gpu_id=gpu, config=config, relation="setting",
                                     reason=f"{MAP_VAR} names {config} for {gpu}")] if config else [])
    return table


def stock_pairings(specs: Iterable[_Spec]) -> list[ConfigPairing]:
    """Every (GPU, config) pairing of ``specs``, GPU by GPU, best first."""
    return [p for spec in specs for p in candidates_for(spec)]
