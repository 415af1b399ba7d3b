"""CPU and memory of the slots and their jobs' process trees, from /proc (psutil), for ``status``.

Sampled about once a second from the status thread (``ProcSampler.sample``), so a request gets a
one-second CPU figure without sleeping. Reads only; never signals anything.
"""

from __future__ import annotations

import threading

import psutil


def process_kind(name: str) -> str:
    """python / java / the process name: what an operator needs to know about a CPU hog."""
    n = name.lower()
    if "java" in n:
        return "java"
    if n.startswith("python") or n.startswith("pypy"):
        return "python"
    return name


def _children_map() -> dict[int, list[int]]:
    """ppid → child pids of every process, from one read of each /proc/<pid>/stat. psutil's
    ``children()`` makes that whole pass once per call: with 4 slots and their jobs as roots, 8 passes
    a sample, the supervisor's largest cost per job at 1000 jobs/s. (``/proc/<pid>/task/*/children``
    would avoid the pass but needs CONFIG_PROC_CHILDREN, which some kernels, this VM's among them,
    lack.) Uses psutil's own one-pass map where the platform module has it."""
    ppids = getattr(psutil._psplatform, "ppid_map", None)
    if ppids is None:  # pragma: no cover - psutil's Linux module has had it since 5.x
        ppids = lambda: {p.pid: p.info["ppid"] for p in psutil.process_iter(["ppid"])}  # noqa: E731
    out: dict[int, list[int]] = {}
    for pid, ppid in ppids().items():
        out.setdefault(ppid, []).append(pid)
    return out


def _descendants(root: int, kids: dict[int, list[int]]) -> list[int]:
    """``root`` (if it is alive) and everything below it, root first."""
    if root not in kids and not psutil.pid_exists(root):
        return []
    out, todo = [root], [root]
    while todo:
        for child in kids.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


class ProcSampler:
    """CPU% (since the previous sample, psutil's ``cpu_percent(None)``) and RSS of the given roots and
    their descendants. Thread-safe: the status thread samples, the housekeeper's slot-table write
    reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._procs: dict[int, psutil.Process] = {}
        self.stats: dict[int, tuple[float, int, str]] = {}  # pid → (cpu %, rss, name)
        self.trees: dict[int, list[int]] = {}  # root pid → pids of root + descendants

    def sample(self, roots: list[int]) -> None:
        with self.lock:
            seen: dict[int, psutil.Process] = {}
            stats: dict[int, tuple[float, int, str]] = {}
            trees: dict[int, list[int]] = {}
            kids = _children_map()  # one pass over /proc for every root, not one per root
            for root in roots:
                pids = []
                for pid in _descendants(root, kids):
                    proc = self._procs.get(pid) or seen.get(pid)  # the same object keeps its CPU baseline
                    try:
                        if proc is None or not proc.is_running():  # new, or its pid was reused
                            proc = psutil.Process(pid)
                        with proc.oneshot():
                            stats[pid] = (proc.cpu_percent(None), proc.memory_info().rss, proc.name())
                    except psutil.Error:
                        continue
                    seen[pid] = proc
                    pids.append(pid)
                if pids and pids[0] == root:
                    trees[root] = pids
            self._procs, self.stats, self.trees = seen, stats, trees

    def usage(self, pid: int | None) -> tuple[float | None, int | None]:
        s = self.stats.get(pid or -1)
        return (round(s[0], 1), s[1]) if s else (None, None)

    def jvm_rss(self, root: int | None, exclude: int | None = None) -> int | None:
        """RSS of the Java processes in ``root``'s tree outside ``exclude``'s (a slot's warm JVM is
        its own child, beside the job's child), or None when there is none."""
        pids = self.trees.get(root or -1) or []
        skip = set(self.trees.get(exclude or -1) or [])
        sizes = [self.stats[p][1] for p in pids if p not in skip and p in self.stats
                 and process_kind(self.stats[p][2]) == "java"]
        return sum(sizes) if sizes else None

    def tree_usage(self, root: int | None) -> tuple[float | None, int | None, str | None]:
        pids = self.trees.get(root or -1)
        if not pids:
            return None, None, None
        stats = self.stats
        rows = [stats[p] for p in pids if p in stats]
        if not rows:
            return None, None, None
        heavy = max(rows, key=lambda r: (r[0], r[1]))
        return round(sum(r[0] for r in rows), 1), sum(r[1] for r in rows), process_kind(heavy[2])
