"""runner: an attempt ends when its process exits, and the slot keeps beating through a slow kill,
with real processes."""

import sys
import time

import pytest

from tender_pool.slots import runner

IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
CLOSE_PIPES = "import os, time; os.close(1); os.close(2); time.sleep(30)"


def _run(code: str, *, timeout: float, grace: float, beat=None, tick=lambda: None):
    proc = runner.spawn([sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"})
    t0 = time.monotonic()
    kw = {"beat": beat} if beat else {}
    res = runner.run(proc, b"", deadline=t0 + timeout, kill_grace=grace, marker=("TENDER_POOL_TEST_NONE", "x"),
                     tick=tick, tick_every=0.1, **kw)
    return res, time.monotonic() - t0


@pytest.mark.timeout(30)
def test_beats_continue_while_kill_grace_runs_out():
    # Given a job that ignores SIGTERM, so the whole kill_grace is waited out
    beats: list[float] = []
    res, took = _run(IGNORE_TERM, timeout=0.5, grace=1.5, beat=lambda: beats.append(time.monotonic()))
    # Then it was killed at its deadline, and the slot's beat ran all through the grace
    assert res.stopped == "timeout" and "SIGKILL" in res.signals and took >= 2.0
    in_grace = [t for t in beats if t - beats[0] > 0]
    gaps = [b - a for a, b in zip(in_grace, in_grace[1:])]
    assert len(beats) > 20 and max(gaps) < 0.25, (len(beats), max(gaps, default=None))


@pytest.mark.timeout(30)
def test_a_handler_that_closes_its_pipes_is_still_timed():
    # Given a handler that closes stdout and stderr and keeps running
    ticks: list[float] = []

    def tick():
        ticks.append(time.monotonic())
        return None

    res, took = _run(CLOSE_PIPES, timeout=1.0, grace=0.3, tick=tick)
    # Then it is not taken for ended: its deadline is enforced, and ticks (cancel, fence) go on
    assert res.stopped == "timeout", res
    assert res.returncode is not None and res.returncode < 0
    assert took < 2.5
    assert len(ticks) >= 5


def _feed(argv: list[str], stdin: bytes):
    proc = runner.spawn(argv, {"PATH": "/usr/bin:/bin"})
    return runner.run(proc, stdin, deadline=time.monotonic() + 20, kill_grace=1,
                      marker=("TENDER_POOL_TEST_NONE", "x"), tick=lambda: None)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("size", [0, 100, 65536, 3 << 20])
def test_stdin_of_any_size_reaches_the_handler_whole(size):
    # Given a stdin that fits the pipe at once (written before the first poll turn) or not (the rest
    # is written as the handler reads), then the handler sees all of it, once
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    res = _feed(["/bin/sh", "-c", "wc -c"], data)
    assert res.returncode == 0 and int(res.stdout) == size, res


@pytest.mark.timeout(30)
def test_a_handler_that_never_reads_stdin_does_not_hang_the_slot():
    # Given a handler that exits at once without reading a stdin larger than the pipe
    res = _feed(["/bin/true"], b"y" * (3 << 20))
    # Then the attempt ends with the handler's exit (the broken pipe is not an error of ours)
    assert res.returncode == 0 and res.stopped is None
