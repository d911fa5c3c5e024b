"""Command-line options of the fit's model terms (``cascade calibrate`` / ``validate``,
``python -m cascade.fitting.extrapolate``); argparse only, so ``--help`` stays light."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cascade.fitting.fit import FitConfig


#: The model's on / off switches (``store_true`` options) and what each one does.
_SWITCHES: tuple[tuple[str, str], ...] = (
    ("--no-split-k", "fit and score without split-K GEMMs (the comparison in docs/ACCURACY.md)"),
    ("--l2-reuse", "fit a share of L2 that a rerun operator's bytes find resident (tried, rejected: "
                   "the fit drives it to 0; docs/ACCURACY.md)"),
    ("--family-fixed", "fit a multiplier of the fixed per-kernel time per op family and GPU (tried, "
                       "rejected: worse on the shifted-shape protocol; docs/ACCURACY.md)"),
    ("--no-tile-reuse", "fit and score without the operand-traffic cost of small SIMT GEMM tiles "
                        "(the comparison in docs/ACCURACY.md)"),
    ("--no-tensor-tile-reuse", "fit and score without the operand-traffic cost of small tensor-core "
                               "GEMM tiles (the comparison in docs/ACCURACY.md, session 10)"),
    ("--no-tile-latency", "fit and score without the exposed start of each wave of tensor-core GEMM "
                          "tiles (the comparison in docs/ACCURACY.md, session 10)"),
    ("--no-launch-waves", "fit and score without the wave quantisation of non-GEMM kernels whose grid "
                          "and block size are known (the comparison in docs/ACCURACY.md, session 11)"),
    ("--warp-fill", "a lone SIMT GEMM tile of fewer warps than its SM's schedulers runs at warps / "
                    "schedulers of the SM's rate (tried, rejected; docs/ACCURACY.md, session 12)"),
    ("--simt-step", "fit a least time per K step of a SIMT GEMM tile on its SM, per GPU (tried, "
                    "rejected: the fit drives it towards 0; docs/ACCURACY.md, session 12)"),
    ("--no-gemm-stream", "fit and score with GEMMs' DRAM traffic at the fitted bandwidth fraction of "
                         "the per-kernel context instead of the spec's achievable fraction (the "
                         "comparison in docs/ACCURACY.md)"),
)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The fitted model's optional physical terms (:class:`cascade.fitting.fit.FitConfig`)."""
    for flag, text in _SWITCHES:
        p.add_argument(flag, action="store_true", help=text)
    p.add_argument("--floor-prior", type=float, default=None, metavar="WEIGHT",
                   help="weight of the pull of each GPU's benchmark-harness floor towards the other "
                        "GPUs' (the harness's fixed time is host-side); 0 turns it off "
                        "(default: FitConfig's; docs/ACCURACY.md)")


def fit_config(args: argparse.Namespace) -> FitConfig:
    """The FitConfig the options select."""
    from cascade.fitting.fit import FitConfig

    prior = getattr(args, "floor_prior", None)
    return FitConfig(split_k=not args.no_split_k, l2_reuse=args.l2_reuse, family_fixed=args.family_fixed,
                     tile_reuse=not getattr(args, "no_tile_reuse", False),
                     tensor_tile_reuse=not getattr(args, "no_tensor_tile_reuse", False),
                     tile_latency=not getattr(args, "no_tile_latency", False),
                     launch_waves=not getattr(args, "no_launch_waves", False),
                     warp_fill=getattr(args, "warp_fill", False),
                     simt_step=getattr(args, "simt_step", False),
                     gemm_stream=not getattr(args, "no_gemm_stream", False),
                     **({} if prior is None else {"floor_prior": max(float(prior), 0.0)}))
