"""Run Spin on model/protocol.pml in a scratch directory and read its verdict.

By hand (what ``run`` does): ``spin -a -DERRS=1 ... protocol.pml && tcc -DSAFETY -DNOCLAIM -o pan
pan.c && ./pan -m3000000``; a counterexample is replayed with ``spin -DERRS=1 ... -t -p -g
protocol.pml`` (``summarize`` turns that replay into one line per step that changes Redis, a lease,
a handler or a budget)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "model" / "protocol.pml"
# Every budget at 0 and all three jobs: a run names the budgets it raises.
ZERO = dict(CRASHES=0, ERRS=0, LAPSES=0, CANCELS=0, LATES=0, FREEZES=0, RETRIES=0, DUPS=0, JOBS=3)

STATES = {0: "none", 1: "queued", 2: "waiting", 3: "running", 4: "completed", 5: "failed", 6: "cancelled"}
LEASES = {0: "FRESH", 1: "STALE", 2: "EXPIRED"}
NJ = 3
# tcc builds pan.c in ~0.2 s where gcc -O0 takes 6-10 s (35 builds a suite run), and the pan it builds
# runs within ~15 % of gcc -O0's; gcc where tcc is missing (make deps installs it)
CC = ["tcc", "-w"] if shutil.which("tcc") else ["gcc", "-O0", "-w"]


@dataclass
class Verdict:
    errors: int
    stored: int  # states stored
    depth: int  # depth reached
    seconds: float  # pan's wall time
    cpu: float  # pan's CPU time (user + system)
    prop: str  # the property a counterexample violates ("" if none)
    trail_steps: int  # length of the counterexample, 0 if none
    trail: str  # the counterexample, summarized (one line per step that changes something), "" if none
    output: str


@dataclass(frozen=True)
class Spec:
    """One check: the budgets it raises, the seeded faults it compiles in, and how it searches."""
    budgets: tuple[tuple[str, int], ...]
    flags: tuple[str, ...] = ()
    liveness: bool = False
    shortest: bool = False


def spec(budgets: dict[str, int], flags: tuple[str, ...] = (), liveness: bool = False,
         shortest: bool = False) -> Spec:
    return Spec(tuple(sorted(budgets.items())), tuple(flags), liveness, shortest)


class _Steps:
    """The processes of one check, one at a time: each may be reniced (or killed) from another thread."""

    def __init__(self, nice: int) -> None:
        self.nice = nice
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.killed = False

    def call(self, args: list[str], cwd: Path, out: Path | None = None) -> tuple[int, float]:
        """Run ``args`` (stdout to ``out``, a file: no pipe to fill), → (exit status, CPU seconds)."""
        with self.lock:
            if self.killed:
                raise RuntimeError("the model farm was stopped")
            with open(out or os.devnull, "wb") as f:
                self.proc = subprocess.Popen(args, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
            if self.nice:
                _renice(self.proc.pid, self.nice)
        _, status, ru = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.proc.returncode, ru.ru_utime + ru.ru_stime

    def hurry(self) -> None:
        with self.lock:
            self.nice = 0
            if self.proc is not None and self.proc.returncode is None:
                _renice(self.proc.pid, 0)

    def kill(self) -> None:
        with self.lock:
            self.killed = True
            if self.proc is not None and self.proc.returncode is None:
                self.proc.kill()


def _renice(pid: int, nice: int) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError:  # lowering a niceness needs root; the check then finishes at 19
        pass


def run(tmp: Path, budgets: dict[str, int], flags: tuple[str, ...] = (), liveness: bool = False,
        shortest: bool = False, steps: _Steps | None = None) -> Verdict:
    """Safety (assertions, the Monitor's invariant, Quiesce, invalid end states) or, with
    ``liveness``, the ``settles`` LTL property under weak fairness. ``shortest``: breadth-first, so
    a counterexample is a shortest one (for the runs that expect one: their state spaces are small)."""
    steps = steps or _Steps(0)
    defs = [f"-D{k}={v}" for k, v in {**ZERO, **budgets}.items()] + [f"-D{f}" for f in flags]
    defs += ["-DSHOWN"] if shortest else []
    shutil.copy(MODEL, tmp / "protocol.pml")

    def must(args: list[str]) -> None:
        code, _ = steps.call(args, tmp, tmp / "build.out")
        if code != 0:
            raise RuntimeError(f"{' '.join(args)} exited {code}: {(tmp / 'build.out').read_text()[-2000:]}")
    must(["spin", "-a", *defs, "protocol.pml"])
    cc = ["-DNFAIR=4"] if liveness else ["-DSAFETY", "-DNOCLAIM"] + (["-DBFS"] if shortest else [])
    must([*CC, *cc, "-o", "pan", "pan.c"])
    args = ["./pan", "-m3000000"] + (["-a", "-f"] if liveness else [])
    t0 = time.monotonic()
    _, cpu = steps.call(args, tmp, tmp / "pan.out")
    seconds = time.monotonic() - t0
    out = (tmp / "pan.out").read_text()
    errors = int(re.search(r"errors: (\d+)", out).group(1))
    stored = int(re.search(r"(\d+) states, stored", out).group(1))
    depth = int(re.search(r"depth reached (\d+)", out).group(1))
    prop, n, trail = "", 0, ""
    if errors:
        steps.call(["spin", *defs, "-t", "-p", "-g", "protocol.pml"], tmp, tmp / "trail.out")
        sim = (tmp / "trail.out").read_text()
        n = max((int(m.group(1)) for m in re.finditer(r"^\s*(\d+):\s+proc", sim, re.M)), default=0)
        prop = violated(sim, out)
        trail = "\n".join(summarize(sim))
    return Verdict(errors, stored, depth, seconds, cpu, prop, n, trail, out)


class Farm:
    """The session's checks, run one after another in a thread at nice 19 while the rest of the
    suite runs. The checks are CPU-bound (~3 min of CPU here) and most of the suite waits on
    daemons and timers, so they fill idle CPU instead of adding their time to the run's; the model's
    tests run last (tests/model/conftest.py) and mostly find their verdict waiting. A test that asks
    for a check the farm has not started runs it itself; one the farm is running is reniced to 0."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cv = threading.Condition()
        self.pending: list[Spec] = []
        self.done: dict[Spec, Verdict | BaseException] = {}
        self.running: tuple[Spec, _Steps] | None = None
        self.inline: list[_Steps] = []
        self.stopped = False
        self.thread: threading.Thread | None = None

    def start(self, specs: list[Spec]) -> None:
        with self.cv:
            self.pending = list(dict.fromkeys(s for s in specs if s not in self.done))
        if self.pending and self.thread is None:
            self.thread = threading.Thread(target=self._work, name="model-farm", daemon=True)
            self.thread.start()

    def _run(self, s: Spec, steps: _Steps) -> Verdict:
        tmp = Path(tempfile.mkdtemp(prefix="check-", dir=self.root))
        try:
            return run(tmp, dict(s.budgets), s.flags, s.liveness, s.shortest, steps)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _work(self) -> None:
        while True:
            with self.cv:
                if self.stopped or not self.pending:
                    return
                s = self.pending.pop(0)
                steps = _Steps(19)
                self.running = (s, steps)
            try:
                v: Verdict | BaseException = self._run(s, steps)
            except BaseException as e:  # noqa: BLE001 - handed to the test that asks
                v = e
            with self.cv:
                self.done[s] = v
                self.running = None
                self.cv.notify_all()

    def verdict(self, s: Spec) -> Verdict:
        with self.cv:
            if s in self.pending:
                self.pending.remove(s)
            elif self.running is not None and self.running[0] == s:
                self.running[1].hurry()
                self.cv.wait_for(lambda: s in self.done)
            if s not in self.done:
                steps = _Steps(0)
                self.inline.append(steps)
            else:
                steps = None
        if steps is not None:
            v = self._run(s, steps)
            with self.cv:
                self.done[s] = v
        got = self.done[s]
        if isinstance(got, BaseException):
            raise got
        return got

    def stop(self) -> None:
        with self.cv:
            self.stopped = True
            self.pending.clear()
            for steps in ([self.running[1]] if self.running else []) + self.inline:
                steps.kill()
        shutil.rmtree(self.root, ignore_errors=True)


FARM = Farm(Path(tempfile.mkdtemp(prefix="tender-model-")))


def violated(sim: str, pan_out: str) -> str:
    """The property a counterexample breaks: the ``/* property: ... */`` comment on the failing
    assertion's line (the SETSTATE macro's check is 'one terminal state'), or the LTL claim."""
    if "acceptance cycle" in pan_out:
        return "settles (LTL, weak fairness): an acceptance cycle"
    m = re.search(r"spin: protocol\.pml:(\d+), Error: assertion violated", sim)
    if not m:
        return "invalid end state" if "invalid end state" in pan_out else "?"
    text = re.search(r"text of failed assertion: (.*)", sim)
    if text and text.group(1).replace(" ", "").startswith("assert(!((js["):
        return "one terminal state per job"
    line = MODEL.read_text().splitlines()[int(m.group(1)) - 1]
    c = re.search(r"/\* property: (.*?) \*/", line)
    return c.group(1) if c else line.strip()


def _name(var: str, value: int) -> str:
    """A global's value in the protocol's words."""
    m = re.fullmatch(r"(js|jt|jc|jw|jx|jr|rdy|pl|wt|dp|dl|lk|wu)\[(\d+)\]", var)
    if m:
        f, i = m.group(1), int(m.group(2))
        if f == "js":
            return f"job {i} {STATES.get(value, value)}"
        if f == "jt":
            return f"job {i} token {value or chr(39) * 2}"
        if f == "pl":
            return f"list {i // NJ} holds job {i % NJ} x{value}"
        if f == "lk":
            lock = "free" if value == 0 else (f"r:{value - 100}" if value >= 100 else f"token {value}")
            return f"lock:{i} {lock}"
        what = {"rdy": "ready", "wt": "wait", "dp": "deps", "dl": "delayed", "jc": "cancel", "jw": "waits",
                "jx": "crashes", "jr": "tries", "wu": "waitusers"}.get(f, f)
        return f"job {i} {what} x{value}" if f != "wu" else f"waitusers has user {i}: {value}"
    m = re.fullmatch(r"lease\[(\d+)\]", var)
    if m:
        return f"host {m.group(1)} lease {LEASES.get(value, value)}"
    m = re.fullmatch(r"(jk|jp|bj|bt)\[(\d+)\]", var)
    if m:
        f, i = m.group(1), int(m.group(2))
        if f == "jk":
            return f"job {i} worker slot {value}"
        if f == "jp":
            return f"job {i} proc list {value - 1}" if value else ""
        if f == "bj":
            return f"busy:slot {i} names job {value - 1}" if value else f"busy:slot {i} cleared"
        return f"busy:slot {i} token {value}" if value else ""
    m = re.fullmatch(r"running\[(\d+)\]", var)
    if m:
        return f"handlers of job {m.group(1)}: {value}"
    m = re.fullmatch(r"hdead\[(\d+)\]", var)
    if m:
        return f"supervisor {m.group(1)} dies" if value else f"supervisor {m.group(1)} alive"
    m = re.fullmatch(r"sdead\[(\d+)\]", var)
    if m:
        return f"slot {m.group(1)} dead" if value else f"slot {m.group(1)} respawned"
    m = re.fullmatch(r"fk\[(\d+)\]", var)
    if m and value:
        return f"fence stops host {m.group(1)}'s attempt"
    if var == "frozen":
        return "replica freezes" if value else "replica catches up / fails over"
    if var == "errs":
        return "a Redis call fails or its reply is lost"
    if var == "crashes":
        return "crash"
    if var == "lates":
        return "reaper judges an entry far past its deadline"
    if var == "dups":
        return "a duplicate entry appears"
    if var in ("lapses", "cancels", "freezes", "retries"):
        return ""
    return ""


WATCH = re.compile(r"(js|jt|jc|jw|jx|jr|rdy|pl|wt|dp|dl|lk|wu|jk|jp|bj|bt)\[\d+\]|lease\[\d\]|running\[\d\]|"
                   r"hdead\[\d\]|sdead\[\d\]|fk\[\d\]|frozen|errs|crashes|lapses|lates|cancels|freezes|retries|dups")
SCRIPTS = {"TAKE_JOB": "take_job", "START_JOB": "start_job", "SETTLE_JOB": "settle_job", "REQUEUE": "requeue.lua",
           "CANCEL": "cancel.lua", "ENQUEUE": "enqueue.lua", "PROMOTE_DUE": "promote_due.lua", "UNSTICK": "unstick.lua",
           "RELEASE_LOCK": "release_lock", "DEADLETTER": "deadletter.lua"}


def _regions() -> tuple[dict[int, str], dict[int, str]]:
    """Model line → the inline (Lua function) it is in; model line → the step it belongs to (the
    nearest label or comment above it inside a proctype)."""
    inline_of: dict[int, str] = {}
    step_of: dict[int, str] = {}
    name, where = "", ""
    for n, ln in enumerate(MODEL.read_text().splitlines(), 1):
        m = re.match(r"inline (\w+)\(", ln)
        if m:
            name = m.group(1)
        elif ln.startswith("}"):
            name = ""
        if name:
            inline_of[n] = name
        if re.match(r"(active )?proctype (\w+)", ln):
            where = ""
        m = re.match(r"(\w+):", ln)
        if m and m.group(1) != "end":
            where = {"endloop": "claim", "enddead": "dead", "boot": "boot"}.get(m.group(1), m.group(1))
        step_of[n] = where
    return inline_of, step_of


def summarize(sim: str, limit: int = 0) -> list[str]:
    """``spin -t -p -g`` output → one line per model step that changed a watched global: 'step
    process [what step, which Lua functions] what changed'. -g lists every global touched so far
    after each statement, so a change is a difference between consecutive listings; a step starts
    at a statement on a line that opens an atomic block (or a SLOT_CRASH option)."""
    inline_of, step_of = _regions()
    src = MODEL.read_text().splitlines()
    cur: dict[str, int] = {}
    lines: list[str] = []
    group: dict | None = None

    def flush() -> None:
        if group and group["changes"]:
            fns = "+".join(dict.fromkeys(SCRIPTS[f] for f in group["inlines"] if f in SCRIPTS))
            what = " ".join(x for x in (group["step"], f"[{fns}]" if fns else "") if x)
            lines.append(f"{group['n']:>4} {group['proc']:<13} {what}: " + "; ".join(dict.fromkeys(group["changes"])))

    stmt = re.compile(r"^\s*(\d+):\s+proc\s+(\d+) \(.*?\) protocol\.pml:(\d+) ")
    val = re.compile(r"^\t\t([\w.\[\]]+) = (-?\d+)$")
    procs: dict[int, str] = {}
    started: dict[str, int] = {}
    last: tuple[str, int] | None = None
    for ln in sim.splitlines():
        r = re.match(r"Starting (\w+) with pid (\d+)", ln)
        if r:  # init's `run Slot(0); run Slot(1); run Supervisor(0); ...`: the k-th of a kind has argument k
            k = started.get(r.group(1), 0)
            started[r.group(1)] = k + 1
            procs[int(r.group(2))] = f"{r.group(1)}({k})"
            continue
        m = stmt.match(ln)
        if m:
            n, pid, line = int(m.group(1)), int(m.group(2)), int(m.group(3))
            proc = procs.get(pid) or re.search(r"\((\S+?)(:\d+)?\)", ln).group(1).strip(":")
            text = src[line - 1] if line <= len(src) else ""
            head = "atomic {" in text or "SLOT_CRASH" in text
            new = head and line not in inline_of and last != (proc, line)  # a step's first statement
            if group is None or group["proc"] != proc or new:
                flush()
                group = dict(proc=proc, n=n, step=step_of.get(line, ""), inlines=[], changes=[])
            last = (proc, line)
            if line in inline_of:
                group["inlines"].append(inline_of[line])
            continue
        v = val.match(ln)
        if v and WATCH.fullmatch(v.group(1)):
            var, value = v.group(1), int(v.group(2))
            if cur.get(var, 0) != value:
                cur[var] = value
                if group and group["proc"] not in ("init", "Monitor", "Quiesce"):
                    text = _name(var, value)
                    if text:
                        group["changes"].append(text)
    flush()
    return lines[-limit:] if limit else lines
