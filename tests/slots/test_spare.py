"""A parse_markdown attempt's child forked ahead (``runner.fork_spare``, ``kinds.ExtractionKind``):
it waits for its order and runs nothing before; it is a job's process like a freshly forked one (its
own session, timed out and killed with its group); a stale one (a module imported since its fork)
is never used; the slot's next document runs in it, and none is left behind."""

import os
import signal
import time

import psutil
import pytest

from conftest import wait_until
from tender_pool.slots import runner

MARKER = ("TENDER_POOL_TEST_NONE", "x")


def _run(proc, timeout: float = 20):
    return runner.run(proc, b"", deadline=time.monotonic() + timeout, kill_grace=0.5, marker=MARKER,
                      tick=lambda: None)


@pytest.mark.timeout(30)
def test_a_spare_runs_nothing_before_its_order_then_serves_it_in_its_own_session(tmp_path):
    seen = tmp_path / "served"

    def serve(order: bytes) -> int:
        seen.write_bytes(order)
        os.write(1, f'{{"pgid": {os.getpgid(0)}, "fd": "{os.environ["TENDER_POOL_PROGRESS_FD"]}"}}'.encode())
        return 0

    spare = runner.fork_spare(serve)
    try:
        time.sleep(0.2)
        assert not seen.exists()  # waiting: nothing of the job ran
        assert psutil.Process(spare.pid).status() != psutil.STATUS_ZOMBIE
        spare.order(b'{"job": 1}')
        assert spare.stdin == -1  # closed with the order: the child reads to its end
        res = _run(spare)
    finally:
        spare.close_pipes()
    assert res.returncode == 0 and seen.read_bytes() == b'{"job": 1}', res
    out = __import__("json").loads(res.stdout)
    assert out["pgid"] == spare.pid and out["fd"].isdigit()  # a session of its own, its progress pipe named


@pytest.mark.timeout(30)
def test_a_spare_told_nothing_exits_without_serving(tmp_path):
    seen = tmp_path / "served"
    spare = runner.fork_spare(lambda order: seen.write_bytes(order) and 0)
    spare.close_pipes()  # an empty order: dropped
    _, status = os.waitpid(spare.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and not seen.exists()


@pytest.mark.timeout(30)
def test_a_spare_past_its_deadline_is_killed_with_its_group():
    def serve(order: bytes) -> int:
        import subprocess
        kid = subprocess.Popen(["sleep", "60"])  # in the spare's group
        os.write(1, str(kid.pid).encode())
        time.sleep(60)
        return 0

    spare = runner.fork_spare(serve)
    spare.order(b"go")
    t0 = time.monotonic()
    res = runner.run(spare, b"", deadline=t0 + 1.0, kill_grace=0.5, marker=MARKER, tick=lambda: None)
    assert res.stopped == "timeout" and res.returncode is not None and res.returncode < 0, res
    kid = int(res.stdout)
    wait_until(lambda: not psutil.pid_exists(kid) or psutil.Process(kid).status() == psutil.STATUS_ZOMBIE, 5,
               what="the spare's grandchild killed with its group")
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(30)
def test_an_order_to_a_dead_spare_raises_so_the_job_forks_afresh():
    spare = runner.fork_spare(lambda order: 0)
    os.kill(spare.pid, signal.SIGKILL)
    os.waitpid(spare.pid, 0)
    with pytest.raises(OSError):
        spare.order(b"x" * 100)
    spare.close_pipes()


def _spares(slot: psutil.Process) -> list[int]:
    return [c.pid for c in slot.children() if "java" not in c.name()]


def _slot(d) -> psutil.Process:
    return next(c for c in psutil.Process(d.proc.pid).children() if "slot" in " ".join(c.cmdline()))


@pytest.mark.timeout(90)
def test_the_next_document_runs_in_the_child_forked_ahead_and_a_stale_one_is_dropped(h, tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.csv").write_text("name,amount\nalpha,1\n")
    (root / "b.csv").write_text("name,amount\nbeta,2\n")
    (root / "c.rtf").write_text(r"{\rtf1\ansi gamma}")
    d = h.daemon(workers=1, input_roots=[str(root)], extra=f'results_dir = "{tmp_path / "results"}"')
    first = h.submit(kind="parse_markdown", payload={"file": str(root / "a.csv")})
    h.wait_state(first, timeout=30)
    slot = _slot(d)
    # Then, idle, the slot has one child forked ahead for its next document
    wait_until(lambda: len(_spares(slot)) == 1, 5, what="a spare child")
    spare = _spares(slot)[0]
    second = h.submit(kind="parse_markdown", payload={"file": str(root / "b.csv")})
    h.wait_state(second, timeout=30)
    started = d.log_events("job_started", job_id=second)
    assert started and started[0]["pid"] == spare, (started, spare)  # the document ran in it
    assert h.client().markdown(second) and "beta" in h.client().markdown(second)
    # When the next document's format needs a reader the slot had not imported (its spare is stale)
    wait_until(lambda: len(_spares(slot)) == 1, 5, what="a new spare child")
    stale = _spares(slot)[0]
    third = h.submit(kind="parse_markdown", payload={"file": str(root / "c.rtf")})
    h.wait_state(third, timeout=30)
    started = d.log_events("job_started", job_id=third)
    # Then it ran in a fresh fork, and the stale spare is gone (reaped, not a zombie or a leftover)
    assert started and started[0]["pid"] != stale, (started, stale)
    assert "gamma" in h.client().markdown(third)
    wait_until(lambda: not psutil.pid_exists(stale), 5, what="the stale spare reaped")
    assert not d.log_events("job_ran", job_id=third)[0]["leftovers"]


@pytest.mark.timeout(90)
def test_a_document_past_its_timeout_in_a_spare_is_killed_and_the_slot_goes_on(h, tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "small.csv").write_text("name,amount\nalpha,1\n")
    big = root / "big.csv"
    with big.open("w") as f:  # several seconds of reading: past a 0.5 s timeout
        f.write("a,b,c,d,e,f,g,h\n")
        row = ",".join(["x" * 20] * 8) + "\n"
        f.write(row * 400_000)
    d = h.daemon(workers=1, input_roots=[str(root)], extra=f'results_dir = "{tmp_path / "results"}"',
                 extract="timeout = 0.5")
    h.wait_state(h.submit(kind="parse_markdown", payload={"file": str(root / "small.csv")}), timeout=30)
    slot = _slot(d)
    wait_until(lambda: len(_spares(slot)) == 1, 5, what="a spare child")
    spare = _spares(slot)[0]
    slow = h.submit(kind="parse_markdown", payload={"file": str(big)})
    job = h.wait_state(slow, states=("failed",), timeout=30)
    assert job.error.kind == "timeout", job.error
    assert d.log_events("job_started", job_id=slow)[0]["pid"] == spare
    wait_until(lambda: not psutil.pid_exists(spare), 5, what="the timed-out child gone")
    # and the slot's next document is extracted as before
    h.wait_state(h.submit(kind="parse_markdown", payload={"file": str(root / "small.csv")}), timeout=30)
