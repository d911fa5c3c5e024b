"""``python -m services.ingest``: settings from CASCADE_* variables, then run until SIGTERM."""

import sys

from cascade.platform.runtime import service_main
from services.ingest import SERVICE

sys.exit(service_main(SERVICE))
