"""Job kinds as strategies: what one attempt of a kind launches, and what its run means.

The slot's loop is kind-agnostic (``attempt.Attempt.run``): it asks the job's kind to ``prepare`` a
``Launch`` (or a pre-run rejection), starts it through ``runner``, and asks the kind to ``conclude``
an ``Outcome`` from the ``RunResult``. Per-kind state lives here, in the slot process:

- ``CommandKind``: a configured command handler (CONTRACT.md "Command handlers"), posix_spawn'ed
  with the job as JSON on stdin.
- ``ExtractionKind`` (``parse_markdown``): a forked copy of the slot runs ``extract`` and writes
  the result files. It owns the slot's warm POI JVM (started here, before the fork, so the JVM is
  the slot's child and outlives the job), its recycling (every ``JVM_RECYCLE_AFTER`` documents,
  counted in the slot: a count kept in the forked child would be thrown away with it) and the
  preloading of the format's reader. Nothing of the document is read in the slot: the reader
  to preload and whether the JVM is needed are guessed from the file name's extension; the
  format is sniffed in the job's child, under the job's timeout (a zip bomb inflates there).
  An idle slot forks its next child ahead (``ready_next``: a spare waiting for its order), so a
  document arriving at an idle slot does not wait for the fork.
- ``FunctionKind``: a configured function handler, imported once in the slot, called in a forked
  copy of the slot per attempt (``functions.py``).

This is the seam per-kind concurrency and runs build on: a new kind is one class here.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable, Protocol

import msgspec

from tender_pool.store.config import FUNCTION_CHECK_TIMEOUT, Config, HandlerConfig
from tender_pool.store.outcomes import Status
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.records import JobError, JobRecord
from tender_pool.store.handler_io import Outcome

from tender_pool.slots import forkserver, functions, groups, handlers, runner
from tender_pool.slots.function_import import ImportProblem
from tender_pool.slots.runner import RunResult

_enc = msgspec.json.Encoder()


@dataclass
class Launch:
    """How to start one attempt: a command (``argv``, posix_spawn'ed), a callable run in a forked
    copy of the slot (``call``) or a function the slot's fork server forks (``start``, given the
    attempt's environment), with its stdin bytes and the environment it adds."""

    env: dict[str, str]
    stdin: bytes = b""
    argv: list[str] | None = None
    call: Callable[[], int] | None = None
    start: Callable[[dict[str, str]], "runner.Child | forkserver.ServedChild"] | None = None  # starts it elsewhere
    file: str | None = None  # the checked input file, for the Busy report


@dataclass
class Rejected:
    """A failure before any process started: not an attempt (settle takes the start back out of
    ``attempts``). Final (no handler, bad input: not a try either), or not (``storage``: the results
    disk is full or read-only; it counts as a try, retried up to ``max_tries``)."""

    error: JobError
    final: bool = True

    def outcome(self) -> Outcome:
        return Outcome(Status.FAILED, error=self.error, final=self.final, ran=not self.final)


MIN_FREE_BYTES = 1 << 20
ROOM_PER_INPUT_BYTE = 4  # a rule of thumb: the Markdown and its JSON, with margin


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def storage_problem(out_dir: str, input_bytes: int) -> str | None:
    """Why a result could not be written under ``out_dir`` now (read-only, not writable, nearly full),
    or None. Checked before the attempt, so a full disk is reported as such instead of as a crash.
    The room asked for is a rule of thumb (4 × the input, at least 1 MiB), not the result's size: a
    nearly full small disk fails jobs whose result would have fit, so the message gives the figures
    and the rule, for whoever has to choose between freeing space and a larger disk."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        st = os.statvfs(out_dir)
    except OSError as e:
        return f"results directory {out_dir}: {e.strerror}"
    if st.f_flag & os.ST_RDONLY or not os.access(out_dir, os.W_OK):
        return f"results directory {out_dir} is not writable"
    free = st.f_bavail * st.f_frsize
    need = max(MIN_FREE_BYTES, ROOM_PER_INPUT_BYTE * input_bytes)
    if free < need:
        return (f"results directory {out_dir}: {free} bytes free ({_mib(free)}), {need} bytes needed "
                f"({_mib(need)}): before an attempt the pool asks for {ROOM_PER_INPUT_BYTE} × the input's size "
                f"({input_bytes} bytes), at least {_mib(MIN_FREE_BYTES)}, whatever the result's own size; "
                f"free space there or use a larger disk")
    return None


class Kind(Protocol):
    name: str
    timeout: float

    def prepare(self, job: JobRecord, attempt: int) -> Launch | Rejected: ...

    def conclude(self, job: JobRecord, attempt: int, res: RunResult) -> Outcome: ...

    def keep(self) -> set[int]:
        """Pids of this kind's own long-lived children (not leftovers of a job)."""
        ...

    def groups(self) -> list[int]:
        """Process groups to SIGKILL if the slot must die at once."""
        ...

    def discard(self, job: JobRecord, attempt: int, outcome: Outcome) -> None:
        """Undo what a fenced attempt left (its job belongs to a newer attempt)."""
        ...

    def child_steps(self, res: RunResult) -> list[tuple[str, float]]:
        """The attempt's child's own steps, in order: (name, monotonic time it ended); [] if unknown."""
        ...

    def record_steps(self, job: JobRecord, attempt: int, outcome: Outcome, steps: dict[str, float]) -> None:
        """Keep the pool's step timings of a settled attempt with its result, where the kind has a place."""
        ...

    def ready_next(self) -> None:
        """The slot is idle after an attempt of this kind: get ready for the next one now (fork its
        child ahead)."""
        ...

    def close(self) -> None: ...


def _input(job: JobRecord, cfg: Config) -> str | None | Rejected:
    try:
        return handlers.input_file(job, cfg)
    except handlers.InputRejected as e:
        return Rejected(e.error)


@dataclass
class CommandKind:
    name: str
    argv: list[str]
    timeout: float
    cfg: Config
    base_env: dict[str, str] = field(default_factory=dict)

    def prepare(self, job: JobRecord, attempt: int) -> Launch | Rejected:
        path = _input(job, self.cfg)
        if isinstance(path, Rejected):
            return path
        return Launch(env=dict(self.base_env), stdin=handlers.handler_stdin(job, attempt), argv=self.argv, file=path)

    def conclude(self, job: JobRecord, attempt: int, res: RunResult) -> Outcome:
        return handlers.outcome_of(res, self.timeout)  # success: stored as result.value (CONTRACT)

    def keep(self) -> set[int]:
        return set()

    def groups(self) -> list[int]:
        return []

    def discard(self, job: JobRecord, attempt: int, outcome: Outcome) -> None:
        pass  # a command's side effects are its own

    def child_steps(self, res: RunResult) -> list[tuple[str, float]]:
        return []

    def record_steps(self, job: JobRecord, attempt: int, outcome: Outcome, steps: dict[str, float]) -> None:
        pass  # its result is the handler's object (CONTRACT): the steps are in the job_ran log line only

    def ready_next(self) -> None:
        pass  # posix_spawn'ed: ~1 ms, nothing to fork ahead

    def close(self) -> None:
        pass


# The reader modules to import in the slot before forking, by file-name extension: a warm child
# never pays an import per job. A guess only: the child sniffs the content and imports what it needs.
PRELOAD_BY_EXTENSION: dict[str, tuple[str, ...]] = {
    ".docx": ("tender_pool.extract.docx",),
    ".xlsx": ("tender_pool.extract.xlsx", "openpyxl"),
    ".pdf": ("tender_pool.extract.pdf", "pypdfium2"),
    ".rtf": ("tender_pool.extract.rtf", "striprtf.striprtf"),
    ".html": ("tender_pool.extract.html",),
    ".htm": ("tender_pool.extract.html",),
    ".mht": ("tender_pool.extract.html",),
    ".mhtml": ("tender_pool.extract.html",),
    ".csv": ("tender_pool.extract.delimited",),
    ".doc": ("tender_pool.extract.legacy", "olefile"),
    ".dot": ("tender_pool.extract.legacy", "olefile"),
    ".xls": ("tender_pool.extract.legacy", "olefile", "xlrd"),
    ".xlt": ("tender_pool.extract.legacy", "olefile", "xlrd"),
}
JVM_EXTENSIONS = frozenset({".doc", ".dot", ".xls", ".xlt"})  # legacy OLE2 formats: POI in the warm JVM


# What every job's child runs whatever the format: the extraction's entry point, its rendering and page
# estimate. Left to the child, each child imported them anew (the slot never did): 40-100 ms a
# document, most of the pool's time around a small .doc (bench/bench_doc_overhead.py).
PRELOAD_ALWAYS = ("tender_pool.extract.runner",)


def preload(path: str) -> None:
    for mod in (*PRELOAD_ALWAYS, *PRELOAD_BY_EXTENSION.get(os.path.splitext(path)[1].lower(), ())):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass


def result_dir_name(job_id: str) -> str:
    """The job's directory under ``results_dir``: its id (a run job's ``<run>/<n>`` nests under its
    run), except the ids ``.`` and ``..`` — valid job ids (CONTRACT: letters, digits and ``._:-``)
    that as a path would be results_dir itself or its parent: they get a ``~`` in front, a
    character no job id has, so no other job's directory can be the same."""
    return "~" + job_id if job_id in (".", "..") else job_id

class ExtractionKind:
    name = "parse_markdown"
    JVM_RECYCLE_AFTER = 200

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.timeout = cfg.extract.timeout
        self.jvm = None  # extract.jvm.WarmJvm, started on the first legacy document
        self.jvm_docs = 0  # documents sent to the current JVM (counted here, in the slot)
        self.spare: _Spare | None = None  # the next attempt's child, forked ahead (``ready_next``)
        self.dropped: set[int] = set()  # stale spares told to exit, not reaped yet

    def prepare(self, job: JobRecord, attempt: int) -> Launch | Rejected:
        path = _input(job, self.cfg)
        if isinstance(path, Rejected):
            return path
        if path is None:
            return Rejected(JobError(ErrorKind.FILE_NOT_FOUND.value, "parse_markdown needs payload.file"))
        out_dir, stem = self._files(job, attempt)
        problem = storage_problem(out_dir, os.path.getsize(path))
        if problem:
            return Rejected(JobError(ErrorKind.STORAGE.value, problem), final=False)
        preload(path)
        jvm = self._warm_jvm() if os.path.splitext(path)[1].lower() in JVM_EXTENSIONS else None
        timeout, heap = self.timeout, self.cfg.extract.jvm_heap
        call = lambda: extraction_child(path, out_dir, stem, timeout, heap, jvm)  # noqa: E731
        spare = self._take_spare(jvm)
        if spare is None:
            return Launch(env={}, call=call, file=path)
        order = _Order(path, out_dir, stem, jvm is not None)

        def start(env: dict[str, str]) -> runner.Child:
            order.env = env
            try:
                spare.order(_enc.encode(order))
                return spare
            except OSError:  # it died meanwhile (killed from outside): the job gets a fresh fork
                spare.close_pipes()
                return runner.fork_call(call, env)

        return Launch(env={}, start=start, file=path)

    def conclude(self, job: JobRecord, attempt: int, res: RunResult) -> Outcome:
        if self.jvm is not None and (res.stopped or res.returncode not in (0, 3)):
            self.jvm.kill()  # it may be mid-document: never hand it to the next job
        out = handlers.outcome_of(res, self.timeout, success=_job_output)
        if out.error is not None and out.error.kind == ErrorKind.STORAGE.value:
            out.final = False  # the results disk, not the document: another try may find room
        path = (out.result or {}).get("markdown_path") if out.status == Status.COMPLETED else None
        limit = self.cfg.pool.inline_result_max
        if isinstance(path, str) and limit:
            try:
                if os.path.getsize(path) <= limit:
                    with open(path, encoding="utf-8") as f:
                        out.inline = f.read()
            except (OSError, UnicodeDecodeError):
                pass  # the file stays the only copy; Client.markdown reads it where it is reachable
        return out

    def _warm_jvm(self):
        """The slot's warm JVM, recycled every JVM_RECYCLE_AFTER documents."""
        from tender_pool.extract.jvm import WarmJvm

        if self.jvm is None:
            self.jvm = WarmJvm(
                heap=self.cfg.extract.jvm_heap,
                kill_grace=self.cfg.pool.kill_grace,
                kill_group=groups.kill_group,  # the one owner of process-group signals
            )
        if self.jvm_docs >= self.JVM_RECYCLE_AFTER:
            self.jvm.kill()
            self.jvm_docs = 0
        self.jvm_docs += 1
        self.jvm.ensure_started()
        return self.jvm

    def ready_next(self) -> None:
        """Fork the next attempt's child now (``runner.fork_spare``), unless one is waiting already."""
        if self.spare is not None:
            return
        try:
            child = runner.fork_spare(self._serve)
        except OSError:  # out of processes or fds: the next attempt forks then, as without a spare
            return
        self.spare = _Spare(child, len(sys.modules), self.jvm.pid if self.jvm is not None else None)

    def _take_spare(self, jvm) -> runner.Child | None:
        """The waiting child, if it is still a copy of the slot as it is now: no module imported since
        (a document of a format it had not preloaded), the same warm JVM (none started, killed or
        recycled since) when this document needs one, and alive. A stale one is told to exit."""
        sp, self.spare = self.spare, None
        if sp is None:
            return None
        if (len(sys.modules) == sp.modules and (jvm is None or (jvm.pid is not None and jvm.pid == sp.jvm_pid))
                and not _gone(sp.child.pid)):
            return sp.child
        sp.child.close_pipes()  # an empty order: it exits by itself, reaped later (``keep``), never waited for
        self.dropped.add(sp.child.pid)
        return None

    def _serve(self, order: bytes) -> int:
        """In the spare child, once its order came: the job's environment, then ``extraction_child``
        with this copy's JVM (the slot's, as it was at the fork: checked by ``_take_spare``)."""
        o = _order_dec.decode(order)
        os.environ.update({k: v for k, v in o.env.items() if k != "TENDER_POOL_PROGRESS_FD"})
        return extraction_child(o.path, o.out_dir, o.stem, self.timeout, self.cfg.extract.jvm_heap,
                                self.jvm if o.jvm else None)

    def _files(self, job: JobRecord, attempt: int) -> tuple[str, str]:
        return os.path.join(self.cfg.pool.results_dir, result_dir_name(job.id)), f"attempt-{attempt}"

    def keep(self) -> set[int]:
        """The JVM, the spare, and dropped spares not yet exited (reaped here once they have: a spare
        is never one of a job's leftovers)."""
        for pid in list(self.dropped):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.dropped.discard(pid)
            except ChildProcessError:
                self.dropped.discard(pid)
        pids = {self.jvm.pid if self.jvm is not None else None, self.spare.child.pid if self.spare else None}
        return {p for p in pids if p} | self.dropped

    def groups(self) -> list[int]:
        return sorted(self.keep())

    def child_steps(self, res: RunResult) -> list[tuple[str, float]]:
        """The child's marks (``extraction_child``): its start, the extraction's end, the files written."""
        if res.returncode != 0 or not res.stdout:
            return []
        try:
            marks = _marks_dec.decode(res.stdout).child_marks
        except msgspec.DecodeError:
            return []
        return list(zip(CHILD_STEPS, marks))

    def record_steps(self, job: JobRecord, attempt: int, outcome: Outcome, steps: dict[str, float]) -> None:
        """A completed attempt's steps go into its metadata file's ``timings`` (``pool_<step>``, seconds
        like the extraction's own), rewritten whole under a new name and renamed over it: a reader sees
        the file with or without them, never half of it. A file that is gone (discarded) stays gone."""
        if outcome.status != Status.COMPLETED or not steps:
            return
        path = (outcome.result or {}).get("metadata_path")
        if not isinstance(path, str):
            return
        from tender_pool.extract.runner import atomic_write

        try:
            with open(path, "rb") as f:
                meta = msgspec.json.decode(f.read())
            meta.setdefault("timings", {}).update({f"pool_{k}": round(v, 5) for k, v in steps.items()})
            atomic_write(path, _enc.encode(meta))
        except (OSError, msgspec.DecodeError, AttributeError):
            pass  # the timings are a diagnosis: a result never fails for want of them

    def discard(self, job: JobRecord, attempt: int, outcome: Outcome) -> None:
        """A fenced attempt's files are deleted, never published (README, "Never twice at once")."""
        out_dir, stem = self._files(job, attempt)
        for ext in (".md", ".json"):
            try:
                os.unlink(os.path.join(out_dir, stem + ext))
            except OSError:
                pass

    def close(self) -> None:
        if self.spare is not None:  # first: it holds the JVM's pipes too
            self.spare.child.close_pipes()
            self.dropped.add(self.spare.child.pid)
            self.spare = None
        for pid in self.dropped:
            groups.killpg(pid, signal.SIGKILL)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.dropped.clear()
        if self.jvm is not None:
            self.jvm.close()
            self.jvm = None


CHILD_STEPS = ("child_start", "extract", "write")  # what each of the child's marks ends


@dataclass
class _Spare:
    """A forked child waiting for its order, and what the slot was when it was forked."""

    child: runner.Child
    modules: int  # len(sys.modules)
    jvm_pid: int | None


class _Order(msgspec.Struct):
    path: str
    out_dir: str
    stem: str
    jvm: bool
    env: dict[str, str] = {}


_order_dec = msgspec.json.Decoder(_Order)


def _gone(pid: int) -> bool:
    """Has our child ``pid`` exited? (Looked at, not reaped.)"""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True




class _Marks(msgspec.Struct):
    child_marks: list[float] = []


_marks_dec = msgspec.json.Decoder(_Marks)


def _job_output(value: dict) -> dict:
    """parse_markdown stores the child's ``JobOutput`` object itself as the result (CONTRACT), without
    the child's step marks (read by ``child_steps``)."""
    value.pop("child_marks", None)
    return value


def extraction_child(path: str, out_dir: str, stem: str, timeout: float, heap: str, jvm) -> int:
    """Runs in the job's forked child: extract, write the files, speak the handler protocol on stdout
    (exit 0 + the ``JobOutput`` object, or exit 3 + {"error": …}), so one code path reads both kinds."""
    import sys
    import time

    from tender_pool.extract.errors import ExtractError
    from tender_pool.extract.runner import run_job

    marks = [time.monotonic()]  # then the extraction's end and the files' (the slot's step timings)
    try:
        out = run_job(path, out_dir, stem, timeout=timeout, jvm_heap=heap, jvm=jvm, marks=marks)
    except ExtractError as e:
        sys.stdout.buffer.write(_enc.encode(e.to_dict()))
        return 3
    except OSError as e:
        if not str(e.filename or "").startswith(out_dir):
            raise
        msg = f"writing the result: {e.strerror}: {e.filename}"  # conclude() makes it a retried failure
        sys.stdout.buffer.write(_enc.encode({"error": {"kind": ErrorKind.STORAGE.value, "message": msg}}))
        return 3
    sys.stdout.buffer.write(_enc.encode({**msgspec.structs.asdict(out), "child_marks": marks}))
    return 0


class FunctionKind:
    """A function handler (``[handlers.NAME] function = "module:qualname"``, ``functions.py``): the
    function is imported once per slot, in the slot's fork server (``preload``, before the first
    claim), and each attempt is a child the server forks (``forkserver.function_child``), run by
    ``runner`` like parse_markdown's child. Every function kind of a slot shares one server."""

    def __init__(self, name: str, h: HandlerConfig, cfg: Config, server: forkserver.ForkServer, log=None):
        self.name = name
        self.timeout = h.timeout
        self.handler = h
        self.cfg = cfg
        self.server = server
        self.log = log
        self.loaded = False

    def preload(self, tick: Callable[[], None] | None = None) -> None:
        """Import the function now, in the fork server. Raises ``function_import.ImportProblem``.
        ``tick``: called while the import runs (the slot beats); it may take up to the config
        check's own limit (``FUNCTION_CHECK_TIMEOUT``), then it is the problem."""
        h = self.handler
        assert h.function is not None
        try:
            problem = self.server.load(self.name, h.function, h.after_fork, list(h.path), tick=tick,
                                       limit=FUNCTION_CHECK_TIMEOUT)
        except forkserver.ServerGone as e:
            problem = f"the fork server exited: {e}"
        if problem is not None:
            raise ImportProblem(problem)
        self.loaded = True

    def prepare(self, job: JobRecord, attempt: int) -> Launch | Rejected:
        path = _input(job, self.cfg)  # a payload's file obeys input_roots, as for a command
        if isinstance(path, Rejected):
            return path
        if not self.loaded:
            self.preload()  # the slot preloads every function before claiming; this is a safety net
        server, name = self.server, self.name
        return Launch(env={}, start=lambda env: server.launch(name, job, env), file=path)

    def conclude(self, job: JobRecord, attempt: int, res: RunResult) -> Outcome:
        return functions.conclude(res, self.timeout, self.log, job, attempt)

    def keep(self) -> set[int]:
        return {self.server.pid} if self.server.pid else set()  # the server: the slot's child, not leftover

    def groups(self) -> list[int]:
        return []

    def discard(self, job: JobRecord, attempt: int, outcome: Outcome) -> None:
        pass  # a function's side effects are its own: it asks ctx.owns() before committing them

    def child_steps(self, res: RunResult) -> list[tuple[str, float]]:
        return []

    def record_steps(self, job: JobRecord, attempt: int, outcome: Outcome, steps: dict[str, float]) -> None:
        pass  # its result is the function's value (CONTRACT): the steps are in the job_ran log line only

    def ready_next(self) -> None:
        pass  # its children are the fork server's

    def close(self) -> None:
        self.server.stop()  # shared: the first kind's close stops it, the others find it stopped


def build(cfg: Config, base_env: dict[str, str], log=None) -> dict[str, Kind]:
    """Every kind this slot can run, by name: parse_markdown and the configured command and function
    handlers (not yet imported: the slot calls each function kind's ``preload``)."""
    out: dict[str, Kind] = {"parse_markdown": ExtractionKind(cfg)}
    server: forkserver.ForkServer | None = None
    for name, h in cfg.handlers.items():
        if h.function is not None:
            if server is None:  # one per slot; its stdout and stderr: the slot's log stream
                server = forkserver.ForkServer(_enc.encode(cfg), os.dup(2))
            out[name] = FunctionKind(name, h, cfg, server, log)
        else:
            out[name] = CommandKind(name, list(h.command or ()), h.timeout, cfg, base_env)
    return out
