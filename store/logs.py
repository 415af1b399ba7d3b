"""structlog set-up: JSON lines when stderr is not a TTY (journald, shippers), console on a TTY.

Called once per process after fork (slots must not inherit the supervisor's logger state).
"""

from __future__ import annotations

import json
import logging
import os
import sys

import msgspec
import structlog


class LineLogger:
    """Writes each event as ONE write(2) of the whole line. The supervisor and its slots share
    stderr; print()'s separate writes of text and newline let two processes' lines interleave."""

    def __init__(self, fd: int = 2):
        self.fd = fd

    def msg(self, message: str | bytes) -> None:
        data = message + b"\n" if isinstance(message, bytes) else (message + "\n").encode("utf-8", "replace")
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


_ENCODER = msgspec.json.Encoder(enc_hook=repr)  # anything it cannot encode is logged as its repr


def json_line(_logger: object, _name: str, event: dict) -> bytes:
    """The JSON renderer: msgspec instead of ``json.dumps`` (structlog's JSONRenderer). A slot writes
    three lines a job; this halves their cost (24 → 13 µs a line) and keeps UTF-8 as it is
    (a Chinese file name stays readable in the journal rather than ``\\u`` escapes)."""
    try:
        return _ENCODER.encode(event)
    except (TypeError, ValueError, OverflowError):  # e.g. a dict keyed by tuples: never lose the line
        return json.dumps(event, default=repr).encode()


def configure(component: str, as_json: bool | None = None, level: int = logging.INFO) -> structlog.stdlib.BoundLogger:
    if as_json is None:
        as_json = not sys.stderr.isatty()
    renderer = json_line if as_json else structlog.dev.ConsoleRenderer(colors=False)
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
