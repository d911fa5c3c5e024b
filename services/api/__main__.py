"""``python -m services.api``: settings from CASCADE_* variables, then serve until SIGTERM."""

import sys

from cascade.platform.runtime import service_main
from services.api import SERVICE

sys.exit(service_main(SERVICE))
