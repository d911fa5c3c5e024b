"""Fitted model parameters, stored as JSON data with provenance.

``default.json`` is produced by ``cascade calibrate --data ../shared/data/measured``
(see :mod:`cascade.fitting.fit`). Parameters are few and physical: per GPU the
achievable fraction of SIMT / tensor peak and of DRAM bandwidth (with a
multiplier per op family), the fixed per-kernel time of each measurement kind,
and per architecture the GEMM tile its libraries typically pick.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import msgspec

from cascade.calibration.calibration import Calibration
from cascade.calibration.parameters import (
    BW_FAMILIES,
    SIMT_KERNEL_FAMILY,
    STREAM_FAMILIES,
    ConvAlgos,
    ConvSize,
    Globals,
    ResidualTable,
    ResolvedParams,
    SpecParams,
    Transfer,
    measurement_context,
)
from cascade.errors import ConfigError

_DEFAULT: Calibration | None = None


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Load a calibration JSON file; with no path, the packaged ``default.json`` (cached)."""
    global _DEFAULT
    if path is None:
        if _DEFAULT is None:
            entry = resources.files("cascade.calibration").joinpath("default.json")
            _DEFAULT = (msgspec.json.decode(entry.read_bytes(), type=Calibration)
                        if entry.is_file() else Calibration())
        return _DEFAULT
    p = Path(path)
    try:
        return msgspec.json.decode(p.read_bytes(), type=Calibration)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ConfigError("calibration file", str(p), f"a readable Cascade calibration JSON ({exc})") from None


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write a calibration as indented JSON."""
    Path(path).write_bytes(msgspec.json.format(msgspec.json.encode(cal), indent=2) + b"\n")


__all__ = [
    "BW_FAMILIES",
    "SIMT_KERNEL_FAMILY",
    "STREAM_FAMILIES",
    "Calibration",
    "ConvAlgos",
    "ConvSize",
    "Globals",
    "ResidualTable",
    "ResolvedParams",
    "SpecParams",
    "Transfer",
    "load_calibration",
    "measurement_context",
    "measurement_of",
    "save_calibration",
]


def measurement_of(kind: str, dataset: str) -> str:
    """Measurement kind of a data set kind (``vidur``, ``neusight``) and its data set name
    (see :attr:`MeasuredSet.measurement`)."""
    return "kernel" if kind == "vidur" else f"{kind}-{dataset}"
