"""`cascade up` (the embedded stack in the foreground) and `cascade status`."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
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
            "and api services, restarted if they crash. Prints the UI URL, a one-time sign-in "
            "link (the browser it opens has the API token) and the API token, then one short "
            "line per service event; the services' full JSON logs are in DATA_DIR/logs."
        ),
    )
    up.add_argument("--data-dir", help="data directory (default: CASCADE_DATA_DIR or .cascade)")
    up.add_argument("--port", type=int, help="api / web UI port (default: CASCADE_HTTP_PORT or 8080)")
    up.add_argument("--open", action="store_true", dest="open_browser",
                    help="open the one-time sign-in link in a browser once the stack is up")
    up.add_argument("--log-format", choices=("human", "json"),
                    help="console lines: short lines for people (default) or the services' JSON "
                         "lines as written to their log files (default json when "
                         "CASCADE_LOG_FORMAT=json)")
    up.set_defaults(func=run_up)

    status = subparsers.add_parser(
        "status", help="show which parts of the embedded stack are up",
        description=("A short table of the embedded stack (state, pid, uptime and restarts of "
                     "NATS, S3 and each service, and the URL), found from any folder: "
                     "--data-dir, else CASCADE_DATA_DIR, else .cascade here, else the stack "
                     "`cascade up` recorded in $XDG_STATE_HOME/cascade/stacks.json "
                     "(~/.local/state/cascade). Exit 0 when everything is up, else 1."))
    status.add_argument("--data-dir", help="data directory (default: found as described above)")
    status.add_argument("--json", action="store_true", help="print the full report as JSON")
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
    from programs.embedded.console import ConsoleMode
    from programs.embedded.stack import EmbeddedStack

    settings = _settings(args)
    fmt: ConsoleMode = "json" if (args.log_format or settings.log_format) == "json" else "human"
    configure_logging(settings.replace(log_format="json" if fmt == "json" else "console"),
                      "cascade-up", human=True)
    stack = EmbeddedStack(settings, console=fmt, open_browser=args.open_browser)

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
    """Print the stack's state as a short table (``--json``: the full report); exit 0 when
    every component is up, else 1. The stack is found from any folder (see
    :func:`programs.embedded.locate.locate_data_dir`)."""
    from programs.embedded.locate import locate_data_dir
    from programs.embedded.stack import status_report

    settings = load_settings()
    data_dir, found_by = locate_data_dir(getattr(args, "data_dir", None), settings.data_dir)
    report = status_report(settings.replace(data_dir=str(data_dir)))
    report["found_by"] = found_by
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["running"] else 1
    print(status_table(report))
    return 0 if report["running"] else 1


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def process_uptime(pid: int | None) -> float | None:
    """Seconds since ``pid`` started (Linux ``/proc``; None elsewhere or when gone)."""
    import os
    from pathlib import Path

    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        since_boot = float(Path("/proc/uptime").read_text().split()[0])
        return since_boot - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def status_table(report: dict[str, Any]) -> str:
    """The short ``cascade status`` text: one headline, the data dir, one row per component."""
    start_hint = "start it with `make run` or `cascade up`"
    where = f"data dir : {report['data_dir']}"
    if report.get("found_by") not in (None, "this folder"):
        where += f"  (found through {report['found_by']})"
    if report["status"] == "never started":
        head = f"Cascade: never started (no state in {report['data_dir']}); {start_hint}"
        return f"{head}\n{where}"
    comps = report.get("components") or []
    url = report.get("http_url") or "-"
    if not report.get("supervisor_pid"):
        head = f"Cascade: not running (last at {url}); {start_hint}"
    elif report["running"]:
        up = _duration(process_uptime(report["supervisor_pid"]))
        head = f"Cascade: running at {url}  (cascade up pid {report['supervisor_pid']}, up {up})"
    else:
        down = [c["name"] for c in comps if not c["up"]]
        head = (f"Cascade: {report['status']} at {url}, "
                + (f"down: {', '.join(down)}" if down else "not every component is up")
                + f"  (cascade up pid {report['supervisor_pid']})")
    lines = [head, where]
    if comps:
        lines.append(f"{'component':<14}{'state':<10}{'pid':>8}  {'uptime':>8}  {'restarts':>8}  port")
        for c in comps:
            state = c["state"] if c["up"] or c["state"] in ("stopped", "backoff") else "down"
            lines.append(f"{c['name']:<14}{state:<10}{c['pid'] or '-':>8}  "
                         f"{_duration(process_uptime(c['pid']) if c['up'] else None):>8}  "
                         f"{c['restarts']:>8}  {c['port'] or '-'}")
    api = report.get("api")
    if isinstance(api, dict):
        if "error" in api and len(api) == 1:
            lines.append(f"api      : {api['error']}")
        else:
            services = api.get("services")
            count = len(services) if isinstance(services, list | dict) else 0
            lines.append(f"api      : answering, {count} services reporting (--json for details)")
    return "\n".join(lines)


def run_bootstrap(args: argparse.Namespace) -> int:
    """Ensure bucket, streams and KV buckets exist; retry until ``--wait`` runs out."""
    from cascade.platform.log import configure_logging
    from programs.embedded.stack import bootstrap

    settings = load_settings()
    configure_logging(settings, "cascade-bootstrap")
    outcome = asyncio.run(bootstrap(settings, wait_s=args.wait))
    print(json.dumps(outcome, indent=2))
    return 0
