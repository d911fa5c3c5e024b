"""``python -m services.orchestrator``: settings from CASCADE_* variables, then run until SIGTERM."""

import sys

from cascade.platform.runtime import main
from services.orchestrator import run

sys.exit(main("orchestrator", run))
