"""A forked job child reports its exit code before it exits (``runner._report``), and the slot settles
on that report: the kernel's teardown of the child's copy of the slot runs beside the settle instead
of before it (issue 22, the pool's own time around a document). The child is ended after the settle
(``runner.end_reported``: its group SIGKILLed, reaped, orphans swept), before the slot runs anything
else. A child that reports and then hangs instead of exiting (the ``child_reported`` checkpoint stops
it) holds nothing: its run returns, its job is stored, and it is killed after the settle."""

import json
import os
import signal
import time

import psutil
import pytest

from conftest import wait_until
from tender_pool.slots import faults, runner


@pytest.fixture
def hang_after_report(tmp_path, monkeypatch):
    """Arm ``child_reported`` in this process: a child forked from it stops itself after its report."""
    monkeypatch.setattr(faults, "_ARMED", frozenset({"child_reported"}))
    monkeypatch.setattr(faults, "_DIR", str(tmp_path))
    return tmp_path / "child_reported"


@pytest.mark.timeout(30)
def test_a_child_that_reports_and_then_hangs_is_run_to_its_outcome_and_ended_after(hang_after_report):
    # Given a forked child whose body leaves a grandchild in its group, prints its result and returns
    # 3, and which then stops itself instead of exiting
    def body() -> int:
        import subprocess

        # in the child's process group, holding none of its pipes (one that did would keep the run
        # reading until the exit, as any descendant holding a stream does)
        subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.write(1, b'{"error": {"kind": "x"}}')
        return 3

    proc = runner.fork_call(body, {})
    res = runner.run(proc, b"", deadline=time.monotonic() + 10, kill_grace=0.5, marker=("TENDER_POOL_T", "none"),
                     tick=lambda: None)
    # Then the run returns its whole outcome without waiting for an exit that would never come
    assert res.stopped is None and res.returncode == 3 and res.stdout == b'{"error": {"kind": "x"}}', res
    assert res.lingering is proc
    wait_until(lambda: hang_after_report.exists() and hang_after_report.read_text(), 5, what="the checkpoint")
    assert int(hang_after_report.read_text()) == proc.pid
    wait_until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, 5, what="stopped")
    members = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == proc.pid]
    assert len(members) == 2  # the child and its grandchild
    # When it is ended (after the settle): its group is SIGKILLed, and the child reaped
    assert runner.end_reported(proc, wait=5)
    assert proc.returncode == -signal.SIGKILL
    wait_until(lambda: all(_dead(p) for p in members), 5, what="the group gone")


def _dead(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


@pytest.mark.timeout(90)
def test_a_document_whose_child_hangs_after_its_report_is_stored_and_the_child_ended_before_the_next(h, tmp_path):
    # Given a slot whose next job child stops itself after its report instead of exiting
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.csv").write_text("name,amount\nalpha,1\n")
    d = h.daemon(workers=1, faults="child_reported", input_roots=[str(root)],
                 extra=f'results_dir = "{tmp_path / "results"}"')
    first = h.submit(kind="parse_markdown", payload={"file": str(root / "a.csv")})
    # Then its job is stored all the same (a settle waiting for the exit would wait out the timeout)
    h.wait_state(first, timeout=30)
    assert "alpha" in h.client().markdown(first)
    # When the next document comes
    second = h.submit(kind="parse_markdown", payload={"file": str(root / "a.csv")})
    h.wait_state(second, timeout=30)
    # Then the first child was settled before it was reaped, and ended before the next job started
    (child,) = [e["pid"] for e in d.log_events("job_started", job_id=first)]
    wait_until(lambda: not _exists(child), 5, what="the first child reaped")
    events = [(e["event"], e.get("job_id")) for e in map(json.loads, _json_lines(d.logs()))
              if e.get("event") in ("settled", "job_ran", "job_started")]
    assert events.index(("settled", first)) < events.index(("job_ran", first)) < events.index(("job_started", second))
    (ran,) = d.log_events("job_ran", job_id=first)
    assert ran["returncode"] == 0 and ran["leftovers"] == [] and "sweep" in ran["steps_ms"], ran


def _exists(pid: int) -> bool:
    """Still a process (a zombie too: not reaped yet)."""
    return os.path.exists(f"/proc/{pid}")


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]
