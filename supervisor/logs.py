"""structlog set-up: JSON lines when stderr is not a TTY (journald, shippers), console on a TTY.

Called once per process after fork (slots must not inherit the supervisor's logger state).
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(component: str, json: bool | None = None, level: int = logging.INFO) -> structlog.stdlib.BoundLogger:
    if json is None:
        json = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger().bind(component=component)
