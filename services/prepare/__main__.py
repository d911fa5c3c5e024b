"""``python -m services.prepare``: settings from CASCADE_* variables, then run until SIGTERM."""

import sys

from cascade.platform.runtime import main
from services.prepare import run

sys.exit(main("prepare", run))
