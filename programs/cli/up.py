"""`cascade up` (the embedded stack in the foreground) and `cascade status`."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from cascade.platform.settings import load_settings


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``up`` and ``status`` sub-commands."""
    up = subparsers.add_parser(
        "up",
        help="run NATS, S3 and the five services on this machine (Ctrl-C stops them)",
        description=(
            "Start the embedded stack: nats-server (JetStream) and SeaweedFS with data under "
            "CASCADE_DATA_DIR (.cascade), then the ingest, prepare, orchestrator, simulator "
            "and api services, restarted if they crash. Prints the UI URL and the API token."
        ),
    )
    up.add_argument("--data-dir", help="data directory (default: CASCADE_DATA_DIR or .cascade)")
    up.add_argument("--port", type=int, help="api / web UI port (default: CASCADE_HTTP_PORT or 8080)")
    up.set_defaults(func=run_up)

    status = subparsers.add_parser("status", help="show which parts of the embedded stack are up")
    status.add_argument("--data-dir", help="data directory (default: CASCADE_DATA_DIR or .cascade)")
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.set_defaults(func=run_status)

    boot = subparsers.add_parser(
        "bootstrap",
        help="create the bucket, streams and KV buckets on the configured NATS and S3",
        description=(
            "Idempotent bootstrap against CASCADE_NATS_URL and CASCADE_S3_ENDPOINT (used by "
            "docker-compose and clusters; `cascade up` does it itself). Retries until --wait "
            "seconds have passed."
        ),
    )
    boot.add_argument("--wait", type=float, default=60.0,
                      help="seconds to keep retrying while NATS or S3 are not reachable (default 60)")
    boot.set_defaults(func=run_bootstrap)


def _settings(args: argparse.Namespace) -> Any:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = args.data_dir
    if getattr(args, "port", None) is not None:
        overrides["http_port"] = args.port
    return load_settings(**overrides)


def run_up(args: argparse.Namespace) -> int:
    """Run the embedded stack until SIGINT/SIGTERM; exit 0 after a clean stop."""
    from cascade.platform.log import configure_logging
    from programs.embedded.stack import EmbeddedStack

    settings = _settings(args)
    configure_logging(settings, "cascade-up")
    stack = EmbeddedStack(settings)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            return await stack.run(stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    return asyncio.run(main())


def run_status(args: argparse.Namespace) -> int:
    """Print the stack's state; exit 0 when every component is up, else 1."""
    from programs.embedded.stack import status_report

    report = status_report(_settings(args))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["running"] else 1
    out = sys.stdout
    print(f"data dir : {report['data_dir']}", file=out)
    print(f"status   : {report['status']}"
          + (f" (cascade up pid {report['supervisor_pid']})" if report.get("supervisor_pid") else ""),
          file=out)
    if report.get("http_url"):
        print(f"web UI   : {report['http_url']}", file=out)
    if report["components"]:
        print(f"{'component':<14}{'up':<5}{'pid':>8}  {'state':<10}{'restarts':>8}  port", file=out)
        for c in report["components"]:
            print(f"{c['name']:<14}{'yes' if c['up'] else 'no':<5}{c['pid'] or '-':>8}  "
                  f"{c['state']:<10}{c['restarts']:>8}  {c['port'] or '-'}", file=out)
    api = report.get("api")
    if isinstance(api, dict):
        if "error" in api and len(api) == 1:
            print(f"api      : {api['error']}", file=out)
        else:
            print("api /api/status:", file=out)
            print(json.dumps(api, indent=2, default=str), file=out)
    return 0 if report["running"] else 1


def run_bootstrap(args: argparse.Namespace) -> int:
    """Ensure bucket, streams and KV buckets exist; retry until ``--wait`` runs out."""
    from cascade.platform.log import configure_logging
    from programs.embedded.stack import bootstrap

    settings = load_settings()
    configure_logging(settings, "cascade-bootstrap")
    outcome = asyncio.run(bootstrap(settings, wait_s=args.wait))
    print(json.dumps(outcome, indent=2))
    return 0
