"""The GPU specs every build must ship, checked in the registry (``tests/unit/test_gpus.py``)
and in ``cascade gpus --json`` (``tests/integration/test_gpus.py``)."""

from __future__ import annotations

REQUIRED = ["SM80_A100", "SM80_A100_PCIE_80GB", "SM80_A100_PCIE_40GB", "SM80_A100_SXM_40GB", "SM90_H100",
            "SM90_H100_PCIE", "SM90_H200", "SM100_B200", "SM89_L40S", "SM89_L4", "SM70_V100_PCIE_32GB",
            "SM75_T4", "SM60_P100_PCIE_16GB", "SM61_P4"]
