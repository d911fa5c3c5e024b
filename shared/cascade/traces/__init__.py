"""Accel-Sim instruction traces and kernel timelines -> per-kernel features and bundles."""
