"""``python -m services.simulator``: settings from CASCADE_* variables, then run until SIGTERM."""

import sys

from cascade.runtime import main

from services.simulator import run

sys.exit(main("simulator", run))
