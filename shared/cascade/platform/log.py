"""structlog configuration shared by every Cascade process.

Configured once per process by :func:`configure_logging` (called from a
service's ``run()`` or a CLI command, never at import time):
``merge_contextvars`` first, a console renderer on a TTY and JSON lines
otherwise, the ``service`` name bound into the context. Standard-library
loggers (nats, aiohttp, botocore) are rendered by the same processors.

:func:`human_line` is the short form ``cascade up`` prints on its console, for its own
lines and for the JSON lines its services write to their log files:
``16:42:01 info    api           sample loaded  created=10 existing=0``.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog

from cascade.platform.settings import Settings

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _use_json(fmt: str, stream: TextIO) -> bool:
    if fmt == "json":
        return True
    if fmt == "console":
        return False
    isatty = getattr(stream, "isatty", None)
    return not (isatty is not None and isatty())


#: Keys :func:`human_line` never prints as fields (they are in the line's columns, or noise).
_HUMAN_SKIP = frozenset({"timestamp", "level", "logger", "service", "event", "component",
                         "stack", "exc_info", "_record", "_from_structlog"})
#: Most fields, and longest value, :func:`human_line` prints.
HUMAN_MAX_FIELDS = 5
HUMAN_MAX_VALUE = 80


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value) if not isinstance(value, (int, float, bool)) \
        else str(value)
    text = text.replace("\n", " ")
    if " " in text and isinstance(value, str):
        text = f'"{text}"' if len(text) <= HUMAN_MAX_VALUE else f'"{text[:HUMAN_MAX_VALUE - 1]}…"'
    elif len(text) > HUMAN_MAX_VALUE:
        text = text[:HUMAN_MAX_VALUE - 1] + "…"
    return text


def _clock(stamp: Any) -> str:
    if isinstance(stamp, str):
        try:
            return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone().strftime("%H:%M:%S")
        except ValueError:
            pass
    return dt.datetime.now().strftime("%H:%M:%S")


def human_line(event: Mapping[str, Any], *, service: str | None = None) -> str:
    """One short line for people: time, level, service, the event, a few ``key=value`` fields
    (and an exception's last line)."""
    who = str(event.get("component") or service or event.get("service") or event.get("logger") or "")
    level = str(event.get("level", "info")).lower()
    fields = [f"{k}={_short(v)}" for k, v in event.items()
              if k not in _HUMAN_SKIP and k != "exception" and v is not None and v != ""]
    extra = len(fields) - HUMAN_MAX_FIELDS
    fields = fields[:HUMAN_MAX_FIELDS] + ([f"(+{extra} more)"] if extra > 0 else [])
    line = f"{_clock(event.get('timestamp'))} {level:<7} {who:<12} {event.get('event', '')}"
    if fields:
        line += "  " + " ".join(fields)
    exc = event.get("exception")
    if isinstance(exc, str) and exc.strip():
        line += "  error=" + _short(exc.strip().splitlines()[-1])
    return line


def _human_renderer(_logger: Any, _name: str, event_dict: dict[str, Any]) -> str:
    return human_line(event_dict)


def configure_logging(
    settings: Settings, service: str, *, stream: TextIO | None = None, human: bool = False
) -> structlog.stdlib.BoundLogger:
    """Configure structlog and stdlib logging for this process; bind ``service``.

    ``human``: when not JSON, render :func:`human_line` instead of structlog's console form.
    Returns a logger for the caller. Calling it again reconfigures (the last call wins).
    """
    out = stream if stream is not None else sys.stderr
    level = _LEVELS[settings.log_level]
    json_output = _use_json(settings.log_format, out)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if json_output:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    elif human:
        shared.append(structlog.processors.format_exc_info)
        renderer = _human_renderer
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=bool(getattr(out, "isatty", lambda: False)()))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_cascade", False):
            root.removeHandler(old)
    handler._cascade = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("aiohttp.access", "botocore", "aiobotocore", "urllib3"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))

    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)
    return get_logger(service)


def get_logger(name: str | None = None, **bound: Any) -> structlog.stdlib.BoundLogger:
    """A structlog logger (optionally named, with extra bound keys)."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger.bind(**bound) if bound else logger
