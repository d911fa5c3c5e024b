"""``python -m services.prepare``: settings from CASCADE_* variables, then run until SIGTERM."""

import sys

from cascade.platform.runtime import service_main
from services.prepare import SERVICE

sys.exit(service_main(SERVICE))
