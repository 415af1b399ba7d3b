"""A wall-clock limit for the Python readers without threads: the soft half of the timeout.

Why SIGALRM: the runner executes inside a forked slot process that must not start threads; an
interval timer interrupts a runaway parser (a pathological PDF, a huge sheet) with ``timeout``.
Soft: the handler only runs between bytecodes, so a long C call (zlib inflating a bomb, lxml parsing
a huge part) runs on past it. The hard limit is a process killed from outside: the slot's runner for
a daemon job, ``isolated`` for the CLI. Only usable from the main thread; elsewhere the limit is left
to the caller.

``expired`` records that the alarm fired, so the caller reports ``timeout`` even when a reader
caught the exception and turned it into something else (``corrupt``), or swallowed it and went on.
"""

from __future__ import annotations

import signal
import threading

from tender_pool.extract.errors import ExtractError


class Deadline:
    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.expired = False
        self._old = None

    def error(self) -> ExtractError:
        return ExtractError("timeout", f"extraction took longer than {self.seconds:g} s")

    def _on_alarm(self, signum, frame):
        self.expired = True
        raise self.error()

    def __enter__(self) -> "Deadline":
        s = self.seconds
        if s and s > 0 and threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, s)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
            self._old = None
