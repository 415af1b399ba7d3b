"""A slot's start, in a real forked slot process on a real Redis: it registers its processing list
itself before its first claim (beating while Redis is down), and a slot that cannot be built exits
``SlotExit.BOOT_ERROR``."""

import os
import signal
import time

import pytest

from conftest import wait_until
from tender_pool.slots.reports import ReportReader
from tender_pool.store.config import load
from support.keyspace import keys
from tender_pool.store.keys import Owner
from tender_pool.slots.reports import Beat, SlotExit


def _fork_slot(cfg, proc: str, owner: str, before=None) -> tuple[int, int]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = SlotExit.ERROR
        try:
            os.close(rfd)
            if before:
                before()
            from tender_pool.slots.slot import slot_main
            code = slot_main(cfg, 1, "w-slot1", proc, "test-marker:1", wfd, owner)
        finally:
            os._exit(int(code))
    os.close(wfd)
    os.set_blocking(rfd, False)
    return pid, rfd


def _reports(rfd: int, reader: ReportReader) -> list:
    try:
        return reader.feed(os.read(rfd, 65536))
    except BlockingIOError:
        return []


@pytest.mark.timeout(60)
def test_the_slot_registers_its_list_before_claiming_and_beats_while_redis_is_down(h):
    cfg = load(str(h.config()), {})
    k = keys(cfg.redis.prefix, cfg.pool.queue)
    proc = k.proc("hx", "inc1", 1, 1)
    owner = Owner("hx", "inc1", "boot", os.getpid()).encode()
    # Given Redis down when the slot starts, and a job already queued
    jid = h.submit(kind="noop")
    h.redis.stop()
    pid, rfd = _fork_slot(cfg, proc, owner)
    try:
        reader, beats = ReportReader(), 0
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            beats += sum(isinstance(r, Beat) for r in _reports(rfd, reader))
            time.sleep(0.05)
        # Then it keeps beating meanwhile
        assert beats >= 3
        # When Redis is back
        h.redis.start()
        # Then its list is registered under its owner, and only then does it claim and run the job
        wait_until(lambda: h.r.hget(k.proclists, proc) == owner.encode(), 10, what="the list registered")
        h.wait_state(jid, timeout=15)
        assert h.job(jid).worker == "w-slot1"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(rfd)


@pytest.mark.timeout(30)
def test_a_slot_that_cannot_be_built_exits_boot_error(h):
    cfg = load(str(h.config()), {})

    def broken():
        from tender_pool.slots import kinds

        def fail(*a, **k):
            raise RuntimeError("no way to build this slot's kinds")

        kinds.build = fail

    pid, rfd = _fork_slot(cfg, "p", "", before=broken)
    _, status = os.waitpid(pid, 0)
    os.close(rfd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == SlotExit.BOOT_ERROR
