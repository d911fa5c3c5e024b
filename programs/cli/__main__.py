"""``python -m programs.cli``: the ``cascade`` command."""

from programs.cli import main

raise SystemExit(main())
