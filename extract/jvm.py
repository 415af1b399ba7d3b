"""Driver for the Java CLI that reads legacy .doc/.xls (jvm/, built by jvm/build.sh).

Why a separate JVM process at all: POI is the only mature HWPF/HSSF reader, and POI's own security advice is
to parse untrusted files in a separate process with a heap cap and a wall-clock timeout. So every JVM runs in
its own process group (session) and a timeout kills the whole group.

Two ways to run it:

* ``run_cold`` – one JVM per document: best isolation, ~0.2-0.3 s start-up per file even with AppCDS.
* ``WarmJvm`` – one long-lived ``serve`` JVM fed paths over stdin: 10-20x cheaper on small files, killed and
  restarted lazily on timeout, crash or garbage, recycled every N documents, and it exits by itself when idle.

Rules for ``WarmJvm`` across ``fork()``: the child inherits the pipes, so a forked child may use the instance,
but only ONE process may talk to a given JVM at a time (requests and answers share one pipe pair). If a
client is killed in the middle of a document, the rest of that document's answer is still in the pipe: the
JVM must then be killed (``pid``/``pgid`` are exposed for that) and the next ``extract`` starts a fresh one.
As a safety net, ``extract`` restarts the JVM if unread output is pending before it sends a request.

Imports only stdlib, msgspec and ``blocks``: the supervisor imports this module, not the reverse.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, ContextManager

import msgspec

from tender_pool.extract.blocks import Block, End, Failure, Meta, decode_line

__all__ = ["JvmError", "WarmJvm", "run_cold", "check_archive", "jvm_dir", "java_command", "heap_error"]

JAR_NAME = "tender-extract.jar"
ARCHIVE_NAME = "tender-extract.jsa"
SYSTEM_DIR = Path("/usr/share/tender-pool/jvm")
MODES = ("doc", "xls")
_HEAP_RE = re.compile(r"^[1-9][0-9]*[kKmMgG]?$")
_REPO_JVM = Path(__file__).resolve().parents[1] / "jvm"


class JvmError(Exception):
    """A failed extraction. ``kind`` is a ``blocks.Failure.kind`` value, or ``"timeout"``."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def jvm_dir() -> Path:
    """Where the jar and archive live: $TENDER_POOL_JVM_DIR, else the checkout's jvm/build, else the system dir."""
    env = os.environ.get("TENDER_POOL_JVM_DIR")
    if env:
        return Path(env)
    repo = _REPO_JVM / "build"
    if (repo / JAR_NAME).is_file() or not (SYSTEM_DIR / JAR_NAME).is_file():
        return repo
    return SYSTEM_DIR


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


# Memory caps beside the heap (four warm JVMs share an 8 GiB host with the platform's API). A C1-only
# POI JVM compiles little and loads ~1,000 classes, so code cache and metaspace are bounded well below their
# defaults (240 MiB / unlimited); one compiler thread; the heap starts small and SerialGC gives memory back
# after the full collection the serve loop asks for once a large document is done (see Main.serve).
MEMORY_FLAGS = [
    "-Xms8m",
    "-XX:MaxMetaspaceSize=96m",
    "-XX:ReservedCodeCacheSize=32m",
    "-XX:CICompilerCount=1",
    "-XX:MinHeapFreeRatio=10",
    "-XX:MaxHeapFreeRatio=25",
    "-XX:MaxDirectMemorySize=16m",
    "-XX:CompressedClassSpaceSize=64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
]


def java_command(heap: str = "512m", tmpdir: str | None = None, *, share: str = "auto") -> list[str]:
    """The JVM argv up to and including the jar; the mode and its arguments follow."""
    if not _HEAP_RE.match(heap):
        raise ValueError(f"heap must look like 512m or 2g, not {heap!r}")
    d = jvm_dir()
    jar = d / JAR_NAME
    if not jar.is_file():
        raise FileNotFoundError(f"{jar} missing: run jvm/build.sh (or set TENDER_POOL_JVM_DIR)")
    argv = [_java()]
    archive = d / ARCHIVE_NAME
    if archive.is_file():
        argv.append(f"-XX:SharedArchiveFile={archive}")
    argv += [
        f"-Xshare:{share}",
        *MEMORY_FLAGS,
        f"-Xmx{heap}",
        "-XX:+ExitOnOutOfMemoryError",
        "-XX:+DisplayVMOutputToStderr",  # its OutOfMemoryError line on stderr, where _crash_error looks
        "-Xss4m",
    ]
    if tmpdir:
        argv.append(f"-Djava.io.tmpdir={tmpdir}")
    argv += ["-jar", str(jar)]
    return argv


def _check_input(path: str | os.PathLike, mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(p)
    return os.path.abspath(p)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, grace: float = 3.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the group (SIGCONT too, so a stopped JVM can act on it), then SIGKILL after ``grace`` s.
    With ``proc`` (our own child) its exit is seen at once; without it a zombie leader counts as alive.
    ``WarmJvm``'s default ``kill_group``; a daemon slot injects its runner's instead."""
    for sig in (signal.SIGTERM, signal.SIGCONT):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None and not _group_alive(pgid):
            return
        if proc is None and not _group_alive(pgid):
            return
        time.sleep(0.02)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, ChildProcessError):
            pass


def heap_bytes(heap: str) -> int:
    """``512m`` / ``2g`` / ``524288k`` / ``536870912`` (the -Xmx spelling) in bytes."""
    if not _HEAP_RE.match(heap):
        raise ValueError(f"heap must look like 512m or 2g, not {heap!r}")
    unit = heap[-1].lower()
    if unit.isdigit():
        return int(heap)
    return int(heap[:-1]) << {"k": 10, "m": 20, "g": 30}[unit]


# A document under this fraction of the heap (32 MiB at 512m) that exhausts it is corrupt, not large:
# real documents stay far below (the research notes' 1.6 MB, 150-page .doc peaks at ~150 MiB RSS, JVM included),
# while a damaged length field (a PLCF's lcb, a record count) makes POI 4.0.1 size one allocation by it. Advice to
# raise jvm_heap cannot help there, and the fallback readers (antiword, xlrd) may still read the text.
CORRUPT_BELOW_HEAP_FRACTION = 16


def heap_error(size: int | None, heap: str) -> JvmError:
    """The error for a JVM that ran out of heap on a document of ``size`` bytes: ``corrupt`` for one under
    1/``CORRUPT_BELOW_HEAP_FRACTION`` of the heap (raising the heap cannot help), else ``too-large``."""
    try:
        limit = heap_bytes(heap)
    except ValueError:
        limit = None
    if size is not None and limit is not None and size * CORRUPT_BELOW_HEAP_FRACTION < limit:
        return JvmError("corrupt", f"POI exhausted the {heap} heap on a {size}-byte document (under "
                                   f"1/{CORRUPT_BELOW_HEAP_FRACTION} of the heap): a damaged structure, not a "
                                   "large document")
    return JvmError("too-large", "JVM ran out of heap (raise [extract] jvm_heap)")


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _crash_error(returncode: int | None, stderr: str, *, size: int | None = None, heap: str = "512m") -> JvmError:
    """What a JVM that exited without an end line means; ``size`` is the document's, ``heap`` the JVM's -Xmx."""
    if "OutOfMemoryError" in stderr:
        return heap_error(size, heap)
    tail = " | ".join(line for line in stderr.strip().splitlines()[-3:])[:300]
    # A JVM that dies without a typed answer was almost always killed by its input (StackOverflow in native
    # code, a JVM crash): retrying the same file would crash again, so it is reported as corrupt.
    return JvmError("corrupt", f"JVM exited with {returncode} without a result: {tail}")


def _collect(lines: list[bytes]) -> tuple[list[Block], bool]:
    """Decodes lines up to End; raises JvmError on a Failure block, returns (blocks, saw_end)."""
    blocks: list[Block] = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            b = decode_line(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise JvmError("corrupt", f"undecodable output from the JVM: {e}") from None
        if isinstance(b, End):
            return blocks, True
        if isinstance(b, Failure):
            raise JvmError(b.kind, b.message)
        blocks.append(b)
    return blocks, False


def run_cold(
    path: str | os.PathLike, mode: str, *, heap: str = "512m", timeout: float, kill_grace: float = 3.0,
    timings: dict | None = None,
) -> list[Block]:
    """Extracts one document in a fresh JVM in its own session; kills the group at ``timeout`` seconds.
    With ``timings``, stores the JVM's start-up (spawn to first line of our main) as ``jvm_start``."""
    p = _check_input(path, mode)
    tmpdir = tempfile.mkdtemp(prefix="tp-jvm-")
    spawned = time.time()
    try:
        proc = subprocess.Popen(
            [*java_command(heap, tmpdir), mode, p],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, kill_grace, proc)
            proc.communicate()
            raise JvmError("timeout", f"no result after {timeout:g} s, JVM process group killed") from None
        except BaseException:
            kill_group(proc.pid, 0, proc)
            raise
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    blocks, ended = _collect(out.splitlines())
    if not ended:
        raise _crash_error(proc.returncode, err.decode("utf-8", "replace"), size=_size(p), heap=heap)
    if timings is not None:
        start = start_up(blocks, spawned)
        if start is not None:
            timings["jvm_start"] = start
    return blocks


def start_up(blocks: list[Block], spawned: float) -> float | None:
    """Seconds from spawning the JVM (``time.time()``) to its beginning the document (Meta.started_at_ms)."""
    meta = next((b for b in blocks if isinstance(b, Meta)), None)
    if meta is None or meta.started_at_ms is None:
        return None
    return max(0.0, meta.started_at_ms / 1000.0 - spawned)


def rss_of(pid: int | None) -> int | None:
    """Resident set size of ``pid`` in bytes from /proc (None when it is gone)."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_PAGE = resource.getpagesize()
MAX_RSS = 192 << 20  # a warm JVM above this after a document is recycled (its heap may be up to jvm_heap)


class WarmJvm:
    """A lazily started ``serve`` JVM; see the module docstring for the one-client-at-a-time rule.

    ``kill_group(pgid, grace)`` is what stops the JVM's process group (TERM, ``grace`` s, KILL); it defaults to
    this module's own and a daemon slot passes its runner's, the one owner of group signals there. After each
    document the JVM is recycled when its RSS passed ``max_rss`` bytes (None: never), so one large workbook
    does not leave a slot holding its peak.
    """

    def __init__(
        self,
        *,
        heap: str = "512m",
        recycle_after: int = 200,
        idle_timeout: float = 300.0,
        kill_grace: float = 3.0,
        kill_group: Callable[[int, float], None] | None = None,
        max_rss: int | None = MAX_RSS,
    ):
        if recycle_after < 1:
            raise ValueError("recycle_after must be >= 1")
        self.heap = heap
        self.recycle_after = recycle_after
        self.idle_timeout = idle_timeout
        self.kill_grace = kill_grace
        self.max_rss = max_rss
        self._kill_group = kill_group
        self._proc: subprocess.Popen | None = None
        self._owner = 0  # pid of the process that started the JVM (a forked child cannot wait() for it)
        self._tmpdir: str | None = None
        self._buf = b""
        self._docs = 0  # documents since start, for recycle_after
        self._last_used = 0.0
        self._spawned: float | None = None
        # JVM start-up paid by the last extract() (None when it ran on an already warm JVM)
        self.last_start: float | None = None

    @property
    def pid(self) -> int | None:
        """The JVM's pid, also its process-group id; None when no JVM is running."""
        return self._proc.pid if self._proc is not None and self._alive() else None

    def _alive(self) -> bool:
        proc = self._proc
        if proc is None:
            return False
        if os.getpid() == self._owner:
            return proc.poll() is None
        try:  # in a forked child: the JVM is our sibling, only signal 0 and /proc tell us about it
            os.kill(proc.pid, 0)
            with open(f"/proc/{proc.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except (ProcessLookupError, FileNotFoundError):
            return False

    def _start(self) -> None:
        self._tmpdir = tempfile.mkdtemp(prefix="tp-jvm-")
        idle = max(1, int(self.idle_timeout)) if self.idle_timeout > 0 else 0
        self._stderr = open(os.path.join(self._tmpdir, "stderr.log"), "w+b")
        self._proc = subprocess.Popen(
            [*java_command(self.heap, self._tmpdir), "serve", "--idle", str(idle)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            bufsize=0,
        )
        self._owner = os.getpid()
        self._buf = b""
        self._docs = 0
        self._last_used = time.monotonic()
        self._spawned = time.time()

    def close(self, *, graceful: bool = True) -> None:
        """Stops the JVM (closing stdin first so it can exit on its own) and removes its temp dir."""
        proc = self._proc
        self._proc = None
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            deadline = time.monotonic() + (1.0 if graceful else 0.0)
            while time.monotonic() < deadline and _group_alive(proc.pid):
                if os.getpid() == self._owner and proc.poll() is not None:
                    break
                time.sleep(0.01)
            owner = os.getpid() == self._owner
            if self._kill_group is None:
                kill_group(proc.pid, self.kill_grace, proc if owner else None)
            else:
                if owner:
                    proc.poll()  # reap an exited leader first, or the injected probe sees its zombie alive
                self._kill_group(proc.pid, self.kill_grace)
                if owner:
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
            proc.stdout.close()
        if getattr(self, "_stderr", None) is not None:
            self._stderr.close()
            self._stderr = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        self._buf = b""

    def ensure_started(self) -> int:
        """Start the JVM now, in the calling process, and return its pid. A daemon slot calls this
        before forking a job's child, so the JVM is the slot's child (it outlives the job and is not
        mistaken for a leftover of it)."""
        if not self._alive():
            if self._proc is not None:
                self.close(graceful=False)
            self._start()
        assert self._proc is not None
        return self._proc.pid

    def rss_bytes(self) -> int | None:
        """The JVM's resident set size in bytes (from /proc), None when none runs; for status and metrics."""
        return rss_of(self.pid)

    def kill(self) -> None:
        """Kills the JVM's whole group at once; the next ``extract`` starts a new one."""
        saved, self.kill_grace = self.kill_grace, 0.0
        try:
            self.close(graceful=False)
        finally:
            self.kill_grace = saved

    def __enter__(self) -> "WarmJvm":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _stderr_text(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-4000:].decode("utf-8", "replace")
        except (OSError, AttributeError, ValueError):
            return ""

    def _pending(self) -> bool:
        if self._buf:
            return True
        r, _, _ = select.select([self._proc.stdout], [], [], 0)
        return bool(r)

    def _readline(self, deadline: float) -> bytes | None:
        """One line, or None at EOF; raises JvmError('timeout') past the deadline."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JvmError("timeout", "")
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def extract(self, path: str | os.PathLike, mode: str, timeout: float) -> list[Block]:
        p = _check_input(path, mode)
        self.last_start = None
        for attempt in (0, 1):
            if self._proc is not None and (
                not self._alive()
                or self._pending()
                or (self.idle_timeout > 0 and time.monotonic() - self._last_used > 0.8 * self.idle_timeout)
            ):
                self.kill()  # dead, left-over output of an interrupted client, or about to idle out
            if self._proc is None:
                self._start()
            try:
                return self._request(p, mode, timeout, retry_ok=attempt == 0)
            except _Retry:
                self.kill()
        raise JvmError("corrupt", "JVM exited twice before answering")

    def _request(self, path: str, mode: str, timeout: float, retry_ok: bool) -> list[Block]:
        deadline = time.monotonic() + timeout
        req = msgspec.json.encode({"mode": mode, "path": path}) + b"\n"
        try:
            self._proc.stdin.write(req)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            if retry_ok:
                raise _Retry() from None
            raise _crash_error(None, self._stderr_text(), size=_size(path), heap=self.heap) from None
        lines: list[bytes] = []
        try:
            while True:
                line = self._readline(deadline)
                if line is None:
                    if not lines and retry_ok:
                        raise _Retry()  # the JVM idled out or died between documents: not this file's fault
                    err = self._stderr_text()
                    rc = self._proc.poll() if os.getpid() == self._owner else None
                    self.kill()
                    raise _crash_error(rc, err, size=_size(path), heap=self.heap)
                lines.append(line)
                if line.startswith(b'{"t":"end"'):
                    break
        except JvmError as e:
            self.kill()
            if e.kind == "timeout":
                raise JvmError("timeout", f"no result after {timeout:g} s, warm JVM killed") from None
            raise
        self._last_used = time.monotonic()
        self._docs += 1
        fresh, self._spawned = self._spawned, None
        try:
            blocks, _ = _collect(lines)
            if fresh is not None:
                self.last_start = start_up(blocks, fresh)
        except JvmError as e:
            if e.message.startswith("undecodable"):
                self.kill()
            raise
        finally:
            if self._docs >= self.recycle_after or (
                self.max_rss is not None and (rss_of(self._proc.pid) or 0) > self.max_rss
            ):
                self.close()
        return blocks


class _Retry(Exception):
    pass


def check_archive(*, rebuild: bool = True, timeout: float = 300.0,
                  on_start: Callable[[int], None] | None = None, spawn_lock: ContextManager | None = None) -> bool:
    """Start-up check: does the JVM still accept the CDS archive (-Xshare:on)? Rebuilds it when it does not.

    A JDK or jar update silently invalidates the archive; under -Xshare:auto that only costs speed, so this
    is an optimisation guard, not a correctness one. Returns True when the archive is usable afterwards.
    ``on_start`` gets each child's pid (the supervisor keeps it out of its orphan sweep). The verdict is
    read from the children's output, never from an exit status alone: the supervisor's ``waitpid(-1)``
    may reap a child first (the status then reads 0). ``spawn_lock`` is held while each child and its
    pipes are made (the supervisor's forks take it too: a process forked then would hold the pipes open).
    """
    build = _REPO_JVM / "build.sh"
    if rebuild and build.is_file() and jvm_dir() == _REPO_JVM / "build":
        out, err = _check_run([str(build), "--check"], timeout, on_start, spawn_lock)
        if b"\narchive: " not in b"\n" + out:  # build.sh prints the paths only once its smoke passed
            return False
        if b"rebuilding" not in err:  # it ran the -Xshare:on smoke itself, and it passed: one JVM
            return True  # start less at every daemon start (~0.3 s of the boot here)
    d = jvm_dir()
    training = next(
        (t for t in (d / "training" / "notice.doc", _REPO_JVM / "training" / "notice.doc") if t.is_file()),
        _REPO_JVM / "training" / "notice.doc",
    )
    if not (d / ARCHIVE_NAME).is_file() or not training.is_file():
        return False
    out, _ = _check_run([*java_command("256m", share="on"), "doc", str(training)], timeout, on_start,
                      spawn_lock)
    return b'{"t":"end"' in out  # a JVM that rejects the archive under -Xshare:on says so on stdout too


def _check_run(argv: list[str], timeout: float, on_start: Callable[[int], None] | None,
               spawn_lock: ContextManager | None = None) -> tuple[bytes, bytes]:
    # its own process group: a supervisor stopping before the check ends kills the check's whole tree
    with spawn_lock or contextlib.nullcontext():
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    if on_start is not None:
        on_start(p.pid)
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return b"", b""
