"""A wall-clock limit for the Python readers without threads.

Why SIGALRM: the runner executes inside a forked slot process that must not start threads; an
interval timer interrupts a runaway parser (a pathological PDF, a huge sheet) with ``timeout``.
Only usable from the main thread; elsewhere the limit is left to the caller (the daemon kills the
job's process group anyway).
"""

from __future__ import annotations

import contextlib
import signal
import threading

from .errors import ExtractError


@contextlib.contextmanager
def deadline(seconds: float | None):
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise ExtractError("timeout", f"extraction took longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
