"""Cascade: predict how a GPU workload traced on one GPU runs on others."""

__version__ = "0.1.0"
