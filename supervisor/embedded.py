"""The embedded Redis: ``redis.url = "embedded"`` runs a private ``redis-server`` for one daemon.

For a laptop, a CI box or ``make run``: nothing to install or configure beyond the ``redis-server``
binary. Never for production, where several hosts share one Redis (a URL or Sentinel).

The server listens only on a Unix socket in ``<state_dir>/redis/`` (no TCP port), keeps an
append-only file there (``appendfsync everysec``: a killed server loses nothing it acknowledged, a
power cut at most a second) and refuses writes rather than evicting queue keys when full
(``noeviction``). ``config.load`` turns "embedded" into that socket's ``unix://`` URL, so every
command (submit, job, status) finds the same server through the same config.

Ownership and hazards:
- The supervisor starts it, before its own threads exist, with ``PR_SET_PDEATHSIG=SIGTERM``: if the
  supervisor is SIGKILLed the server still shuts down cleanly (AOF flushed) instead of outliving it.
- It is the supervisor's child, so the supervisor's ``waitpid(-1)`` reaps it: the daemon hands that
  status to ``on_exit`` (the server is restarted with backoff, and the slots ride out the gap as they
  do any Redis outage), and passes ``pid`` in ``keep`` to the orphan sweep, which would otherwise
  SIGKILL it as "a dead slot's leftover".
- A server left from a previous incarnation (pid file, same socket) is stopped before a new one starts:
  two servers on one AOF would corrupt it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

RESTART_MAX_S = 30.0
STOP_WAIT_S = 10.0


class EmbeddedError(Exception):
    """The server cannot be started at all (no binary, no writable directory)."""


def _pdeathsig() -> None:  # runs in the forked child before exec
    from tender_pool.slots import groups

    groups.set_pdeathsig(signal.SIGTERM)


class EmbeddedRedis:
    def __init__(self, directory: str | Path, log):
        self.dir = Path(directory)
        self.sock = self.dir / "redis.sock"
        self.pidfile = self.dir / "redis.pid"
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.deaths = 0
        self.restart_at = 0.0
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else 0

    def argv(self, binary: str) -> list[str]:
        return [
            binary, "--port", "0", "--unixsocket", str(self.sock), "--unixsocketperm", "770",
            "--dir", str(self.dir), "--pidfile", str(self.pidfile), "--logfile", str(self.dir / "redis.log"),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--maxmemory-policy", "noeviction", "--daemonize", "no",
        ]

    def start(self) -> None:
        """Start the server (not waiting for it: the supervisor's Redis wait loop does). Raises
        EmbeddedError when it cannot start at all."""
        binary = shutil.which("redis-server")
        if not binary:
            raise EmbeddedError("redis-server is not installed (apt-get install redis-server)")
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as e:
            raise EmbeddedError(f"cannot create {self.dir}: {e.strerror}") from None
        self._stop_leftover()
        self.proc = subprocess.Popen(
            self.argv(binary), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_pdeathsig, close_fds=True,
        )
        self.started_at = time.monotonic()
        self.log.info("embedded_redis_started", pid=self.proc.pid, socket=str(self.sock))

    def _stop_leftover(self) -> None:
        """A predecessor's server (the supervisor was SIGKILLed outside systemd): stop it cleanly."""
        try:
            pid = int(self.pidfile.read_text().strip())
            p = psutil.Process(pid)
            if "redis-server" not in p.name() or str(self.sock) not in " ".join(p.cmdline()):
                return
        except (OSError, ValueError, psutil.Error):
            return
        self.log.warning("embedded_redis_leftover_stopped", pid=pid)
        p.terminate()
        try:
            p.wait(STOP_WAIT_S)
        except psutil.TimeoutExpired:
            p.kill()

    def on_exit(self, status: int, now: float) -> None:
        """The supervisor reaped our server: record it and schedule a restart with backoff."""
        if self.proc is not None:
            self.proc.returncode = os.waitstatus_to_exitcode(status)
        fast = now - self.started_at < 5.0
        self.deaths = self.deaths + 1 if fast else 1
        delay = min(0.5 * 2 ** (self.deaths - 1), RESTART_MAX_S)
        self.restart_at = now + delay
        self.log.error("embedded_redis_died", status=self.proc.returncode if self.proc else None, restart_in=delay,
                       log=str(self.dir / "redis.log"))

    def restart_due(self, now: float) -> None:
        if self.proc is not None and self.proc.returncode is not None and now >= self.restart_at:
            try:
                self.start()
            except EmbeddedError as e:
                self.log.error("embedded_redis_restart_failed", error=str(e))
                self.restart_at = now + RESTART_MAX_S

    def stop(self) -> None:
        """SIGTERM (Redis flushes the AOF and exits), then SIGKILL after STOP_WAIT_S; reaped here."""
        if self.proc is None or self.proc.returncode is not None:
            return
        pid = self.proc.pid
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_WAIT_S
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.02)
        if self.proc.returncode is None:
            self.proc.returncode = -1
        self.log.info("embedded_redis_stopped", pid=pid)
