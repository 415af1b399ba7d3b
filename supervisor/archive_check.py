"""The JVM's CDS archive check at start-up, beside the slots rather than before them.

``extract.jvm.check_archive`` (``jvm/build.sh --check``: ~0.3 s on a quiet machine when the archive
is current, seconds when a JDK or jar update makes it rebuild) used to run before the first slot was
forked, and every boot waited for it. A stale or missing archive only makes a JVM start slower (the
slots' JVMs run with ``-Xshare:auto``), and a rebuild renames the new archive into place, so a JVM
started meanwhile maps the old file whole: nothing a slot does needs the verdict. The check now runs
in a thread while the slots start.

Fork safety: slots are forked while the thread runs. It only waits on pipes and its child (the import
of ``extract.jvm`` happens in the caller's thread, before it starts), logs nothing and takes no lock a
forked slot could need; the main loop logs the verdict (``Daemon.finish_archive_check``) and keeps the
child's pid out of its orphan sweep. The verdict comes from the child's output, not its exit status,
which the main loop's ``waitpid(-1)`` may take first. The child and its pipes are made under
``forking.SPAWN_LOCK``, which every slot fork takes too: a slot forked in that instant would hold
the pipes' write ends for its whole life, and the check would never read to their end."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

from tender_pool.supervisor.forking import SPAWN_LOCK


class ArchiveCheck:
    def __init__(self, wake: Callable[[], None], timeout: float = 120.0) -> None:
        self.wake = wake
        self.timeout = timeout
        self.pid = 0
        self.usable: bool | None = None
        self.error: str | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._check, name="jvm-archive-check", daemon=True)

    def start(self) -> "ArchiveCheck":
        from tender_pool.extract.jvm import check_archive

        self._run = check_archive
        self.thread.start()
        return self

    def _on_start(self, pid: int) -> None:
        self.pid = pid

    def _check(self) -> None:
        t0 = time.monotonic()
        try:
            self.usable = self._run(rebuild=True, timeout=self.timeout, on_start=self._on_start,
                                    spawn_lock=SPAWN_LOCK)
        except Exception as e:  # noqa: BLE001 - a missing JDK must not stop the pool
            self.error = str(e)
        finally:
            self.seconds = time.monotonic() - t0
            self.pid = 0
            self.done.set()
            self.wake()

    def stop(self) -> None:
        """The supervisor is exiting before the check ended: kill the check's process group (a
        rebuild renames its files into place, so one cut short leaves the old archive whole)."""
        pid = self.pid
        if pid and not self.done.is_set():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
