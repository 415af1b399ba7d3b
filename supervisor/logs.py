"""structlog set-up: JSON lines when stderr is not a TTY (journald, shippers), console on a TTY.

Called once per process after fork (slots must not inherit the supervisor's logger state).
"""

from __future__ import annotations

import logging
import os
import sys

import structlog


class LineLogger:
    """Writes each event as ONE write(2) of the whole line. The supervisor and its slots share
    stderr; print()'s separate writes of text and newline let two processes' lines interleave."""

    def __init__(self, fd: int = 2):
        self.fd = fd

    def msg(self, message: str) -> None:
        data = (message + "\n").encode("utf-8", "replace")
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            pass

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = msg


class LineLoggerFactory:
    def __call__(self, *args: object) -> LineLogger:
        return LineLogger()


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
        logger_factory=LineLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger().bind(component=component)
