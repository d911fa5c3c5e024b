"""`cascade traces` / `cascade runs`: list the app's traces or runs, newest first, a page at a time.

Filters: ``--state``, ``--name`` (text in the name or id, case-insensitive); ``--limit`` entries
per page (default 20), ``--cursor`` continues after the page that printed it, ``--all`` walks
every page. Which app and token: as `cascade import` (``--url``, else the stack `cascade up`
runs; reads need no token).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from typing import Any

TRACE_STATES = ("receiving", "preparing", "ready", "incomplete", "failed")
RUN_STATES = ("queued", "running", "completed", "partial", "failed", "cancelled")


def register(subparsers: Any) -> None:
    for what, states in (("traces", TRACE_STATES), ("runs", RUN_STATES)):
        text = f"list the app's {what}, newest first (paged; --state, --name, --all)"
        p = subparsers.add_parser(what, help=text, description=text)
        p.add_argument("--state", choices=states, help=f"only {what} in this state")
        p.add_argument("--name", default="", help="only those whose name or id contains this text")
        p.add_argument("--limit", type=int, default=20, help="entries per page (default 20, at most 1000)")
        p.add_argument("--cursor", default=None, help="continue after the page that printed this cursor")
        p.add_argument("--all", action="store_true", help="every page, not only the first")
        p.add_argument("--json", action="store_true", help="print the page(s) as JSON")
        p.add_argument("--url", "--app", dest="app", default=None,
                       help="the app's base URL (default: the stack `cascade up` runs)")
        p.add_argument("--token", default=None, help="bearer token (reads need none)")
        p.set_defaults(func=main, what=what)


def _when(ts: float) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def row(what: str, entry: dict[str, Any]) -> str:
    """One printed line of a trace or a run."""
    if what == "traces":
        kernels = entry.get("bundle_kernels") or entry.get("kernels_total") or 0
        return (f"{entry['id']:<24} {entry['state']:<10} {kernels:>9} {_when(entry['created_at'])}  "
                f"{entry.get('name', '')}")
    return (f"{entry['id']:<24} {entry['state']:<10} {len(entry.get('sim_ids', [])):>5} "
            f"{_when(entry['created_at'])}  {entry.get('trace_id', '')}  {entry.get('name', '')}")


async def fetch(args: argparse.Namespace, url: str, token: str | None) -> list[dict[str, Any]]:
    """The page(s) asked for."""
    from programs.client import CascadeClient

    pages = []
    cursor = args.cursor
    async with CascadeClient(url, token, timeout=30.0) as api:
        while True:
            page = await api.list_page(args.what, limit=args.limit, cursor=cursor,
                                       state=args.state, name=args.name)
            pages.append(page)
            cursor = page.get("next_cursor")
            if not args.all or not cursor:
                return pages


def main(args: argparse.Namespace) -> int:
    """Entry point of ``cascade traces`` and ``cascade runs``."""
    from programs.cli.importer import default_url
    from programs.client import ApiError, AppUnreachableError

    if not 1 <= args.limit <= 1000:
        print(f"cascade {args.what}: --limit must be from 1 to 1000", file=sys.stderr)
        return 2
    url = args.app or default_url()
    try:
        pages = asyncio.run(fetch(args, url, args.token))
    except AppUnreachableError as exc:
        print(f"cascade {args.what}: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"cascade {args.what}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(pages if args.all else pages[0], indent=1))
        return 0
    head = ("id", "state", "kernels" if args.what == "traces" else "sims", "created (UTC)",
            "name" if args.what == "traces" else "trace  name")
    width = 9 if args.what == "traces" else 5
    print(f"{head[0]:<24} {head[1]:<10} {head[2]:>{width}} {head[3]:<19}  {head[4]}")
    shown = 0
    for page in pages:
        for entry in page[args.what]:
            print(row(args.what, entry))
            shown += 1
    last = pages[-1]
    more = f"; next page: --cursor {last['next_cursor']}" if last.get("next_cursor") else ""
    print(f"{shown} of {last.get('total', shown)} {args.what}{more}")
    return 0
