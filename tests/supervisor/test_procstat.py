"""ProcSampler builds every root's tree from one pass over /proc (``_children_map``): the trees it
reports must be exactly what psutil's own per-root walk finds."""

from __future__ import annotations

import subprocess
import time

import psutil

from tender_pool.supervisor.procstat import ProcSampler


def test_one_pass_trees_match_psutil_walk_for_several_roots():
    a = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & sleep 30 & wait"])
    b = subprocess.Popen(["/bin/sh", "-c", "(sleep 30 & wait) & wait"])  # a grandchild below a subshell
    try:
        deadline = time.monotonic() + 5
        while (len(psutil.Process(a.pid).children()) < 2 or len(psutil.Process(b.pid).children(recursive=True)) < 2) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        s = ProcSampler()
        dead = subprocess.Popen(["/bin/true"])
        dead.wait()
        s.sample([a.pid, b.pid, dead.pid])
        for root in (a, b):
            want = {root.pid, *(p.pid for p in psutil.Process(root.pid).children(recursive=True))}
            assert set(s.trees[root.pid]) == want and s.trees[root.pid][0] == root.pid
            assert len(want) >= 3
        assert dead.pid not in s.trees  # a root that is gone has no tree
        cpu, rss, heaviest = s.tree_usage(a.pid)
        assert rss and rss > 0 and heaviest in ("sh", "sleep", "dash")
        first = s._procs[a.pid]
        s.sample([a.pid])
        assert s._procs[a.pid] is first  # the same Process object: its CPU baseline carries over
    finally:
        for p in (a, b):
            for c in psutil.Process(p.pid).children(recursive=True):
                c.kill()
            p.kill()
            p.wait()
