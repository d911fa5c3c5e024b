"""``python -m services.ingest``: settings from CASCADE_* variables, then run until SIGTERM."""

import sys

from cascade.platform.runtime import main
from services.ingest import run

sys.exit(main("ingest", run))
