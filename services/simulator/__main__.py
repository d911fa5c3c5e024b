"""``python -m services.simulator [--once | --one LABEL] [--idle-timeout S] [--worker-label L]``.

Without options: a pool worker pulling simulation jobs until SIGTERM. ``--once``
(the local and Kubernetes backends' mode): take exactly one job, then exit 0;
exit 0 too when no job arrives within ``--idle-timeout`` seconds. ``--one LABEL``
is ``--once`` with LABEL (a sim id or Kubernetes Job name) recorded as the worker
label. Settings come from CASCADE_* variables.
"""

import argparse
import sys

from cascade.platform.runtime import service_main
from services.simulator import SERVICE

parser = argparse.ArgumentParser(prog="python -m services.simulator", description=__doc__)
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--once", action="store_true", help="take exactly one job, then exit")
mode.add_argument("--one", metavar="LABEL", default="", help="--once, labelling the worker LABEL")
parser.add_argument("--idle-timeout", type=float, default=60.0, metavar="S",
                    help="one-job mode: exit when no job arrives within S seconds (default 60)")
parser.add_argument("--worker-label", default="", help="label added to the worker identity")
args = parser.parse_args()
once = bool(args.once or args.one)
sys.exit(service_main(SERVICE, once=once, idle_timeout_s=args.idle_timeout,
                      worker_label=args.worker_label or args.one))
