"""structlog configuration shared by every Cascade process.

Configured once per process by :func:`configure_logging` (called from a
service's ``run()`` or a CLI command, never at import time):
``merge_contextvars`` first, a console renderer on a TTY and JSON lines
otherwise, the ``service`` name bound into the context. Standard-library
loggers (nats, aiohttp, botocore) are rendered by the same processors.
"""

from __future__ import annotations

import logging
import sys
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


def configure_logging(
    settings: Settings, service: str, *, stream: TextIO | None = None
) -> structlog.stdlib.BoundLogger:
    """Configure structlog and stdlib logging for this process; bind ``service``.

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
