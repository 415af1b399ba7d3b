"""sd_notify: what the supervisor tells systemd (``Type=notify``, ``NotifyAccess=main``).

A few lines over ``$NOTIFY_SOCKET`` rather than the ``sdnotify`` package: the protocol is one
datagram of ``KEY=VALUE`` lines; the package adds a dependency to hide one ``sendto``, swallows every
error, and does not read ``$WATCHDOG_USEC``/``$WATCHDOG_PID``, which we need anyway.

What is sent and when (the daemon decides; ``Announcer`` keeps what was said and paces it):
- ``READY=1`` once every slot has reported in and Redis answered (and again after each reload);
- ``STATUS=`` busy/idle/queue figures, refreshed by the main loop;
- ``WATCHDOG=1`` from the main loop, only while the housekeeper thread is also making progress, so
  a wedged loop or a wedged thread both stop the pings and systemd restarts the service;
- ``RELOADING=1`` (with ``MONOTONIC_USEC=``, which systemd ≥ 253 wants) / ``STOPPING=1``.

The variables are removed from ``os.environ`` on construction (``sd_notify(unset_environment=1)``):
slots and job handlers forked later must not inherit a socket that is not theirs to speak on.
Without ``$NOTIFY_SOCKET`` (not under systemd) every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, env: dict[str, str] | None = None):
        env = os.environ if env is None else env  # type: ignore[assignment]
        addr = env.pop("NOTIFY_SOCKET", "") or ""
        usec = env.pop("WATCHDOG_USEC", "") or ""
        wpid = env.pop("WATCHDOG_PID", "") or ""
        if addr.startswith("@"):  # abstract namespace
            addr = "\0" + addr[1:]
        self.addr = addr
        self.sock: socket.socket | None = None
        if addr:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        # WatchdogSec= as seconds; 0 = no watchdog (or it is meant for another pid)
        mine = not wpid or (wpid.isdigit() and int(wpid) == os.getpid())
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and mine else 0.0
        self.errors = 0

    @property
    def enabled(self) -> bool:
        return self.sock is not None

    def send(self, **fields: object) -> bool:
        """One datagram, fields in the order given; ``send(READY=1, STATUS="…")``. False when not
        under systemd or the send failed (systemd gone: nothing to tell; never fatal)."""
        if self.sock is None:
            return False
        msg = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            self.sock.sendto(msg, self.addr)
            return True
        except OSError:
            self.errors += 1
            return False

    def ready(self, status: str) -> bool:
        return self.send(READY=1, STATUS=status)

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def reloading(self) -> bool:
        return self.send(RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)

    def stopping(self, status: str) -> bool:
        return self.send(STOPPING=1, STATUS=status)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


STATUS_REFRESH_S = 10.0  # STATUS= at least this often, and whenever its text changes


class Announcer:
    """What the main loop has told systemd so far, and when to tell it more (one ``step`` a loop)."""

    def __init__(self, notifier: Notifier):
        self.n = notifier
        self.ready = False  # READY=1 sent (once all slots reported in; Redis answered before the first fork)
        self.last_ping = 0.0
        self.sent, self.sent_at = "", 0.0

    def step(self, now: float, text: str, all_reported: bool, stopping: bool, healthy: bool, log) -> None:
        """READY once every slot reported in; STATUS= when it changes or every STATUS_REFRESH_S;
        WATCHDOG=1 while the main loop runs and ``healthy`` (the housekeeper makes progress)."""
        if not self.n.enabled:
            return
        if not self.ready and not stopping and all_reported:
            self.ready = True
            self.n.ready(text)
            self.sent, self.sent_at = text, now
            log.info("ready", status=text)
        elif text != self.sent or now - self.sent_at >= STATUS_REFRESH_S:
            self.n.status(text)
            self.sent, self.sent_at = text, now
        wd = self.n.watchdog_s
        if wd and now - self.last_ping >= wd / 3 and healthy:
            self.n.watchdog()
            self.last_ping = now
