"""``python -m services.api``: settings from CASCADE_* variables, then serve until SIGTERM."""

import sys

from cascade.platform.runtime import main
from services.api import run

sys.exit(main("api", run))
