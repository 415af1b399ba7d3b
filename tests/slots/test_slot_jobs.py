"""What a slot makes of a job's end, through a real daemon: refused handler error kinds, a handler
that closes its pipes, waits past max_waits, rejected inputs, fenced extraction files, and a zip
bomb that must never be opened in the slot itself."""

import os
import signal
import zipfile

import psutil
import pytest

from conftest import wait_until


@pytest.mark.timeout(60)
def test_a_handler_may_not_set_pool_owned_or_unknown_error_kinds(h):
    h.daemon(workers=2)
    for kind in ("cancelled", "crash_cap", "undecodable", "no_such_kind"):
        jid = h.submit(payload={"final_error": kind})
        job = h.wait_state(jid, states=("failed", "cancelled"), timeout=20)
        # Then the job failed as handler_failed, at once (final), naming the refused kind
        assert job.state.value == "failed", (kind, job.state)
        assert job.error.kind == "handler_failed" and repr(kind) in job.error.message, (kind, job.error)
        assert job.attempts == 1 and job.tries == 1, (kind, job)
    ok = h.wait_state(h.submit(payload={"final_error": "encrypted"}), states=("failed",))
    assert ok.error.kind == "encrypted"  # a handler kind is still taken as it is


@pytest.mark.timeout(60)
def test_a_handler_that_closes_stdout_and_stderr_is_still_timed_out(h):
    d = h.daemon(workers=1)
    jid = h.submit(kind="slow", payload={"close_pipes": True, "sleep": 60, "record": str(h.records)})
    job = h.wait_state(jid, states=("failed",), timeout=20)
    assert job.error.kind == "timeout" and job.attempts == 1, job.error
    assert d.log_events("job_ran", stopped="timeout")


@pytest.mark.timeout(60)
def test_reaching_max_waits_is_waited_too_long_not_timeout(h):
    h.daemon(workers=2, extra="max_waits = 1")
    blocker = h.submit(user="u", payload={"sleep": 1.5, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{blocker}.1.start").exists(), 15, what="blocker start")
    second = h.submit(user="u", payload={})
    job = h.wait_state(second, states=("failed",), timeout=20)
    assert job.error.kind == "waited_too_long" and job.attempts == 0, job.error


@pytest.mark.timeout(60)
def test_rejected_inputs_show_no_attempt(h, tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    h.daemon(workers=1, input_roots=[str(root)])
    for payload, kind in (({"file": str(root / "missing.pdf")}, "file_not_found"),
                          ({"file": "/etc/hostname"}, "outside_roots")):
        job = h.wait_state(h.submit(payload=payload), states=("failed",), timeout=15)
        assert job.error.kind == kind and job.attempts == 0 and job.tries == 0, job
    job = h.wait_state(h.submit(kind="parse_markdown", payload={}), states=("failed",), timeout=15)
    assert job.error.kind == "file_not_found" and job.attempts == 0, job


@pytest.mark.timeout(60)
def test_a_fenced_parse_markdown_attempts_files_are_deleted(h, tmp_path):
    # Given a parse_markdown attempt that wrote its files and stopped just before settling
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.csv").write_text("name,amount\nalpha,1\nbeta,2\n")
    results = tmp_path / "results"
    h.daemon(workers=1, input_roots=[str(root)], faults="before_ack", extra=f'results_dir = "{results}"')
    jid = h.submit(kind="parse_markdown", payload={"file": str(root / "a.csv")})
    pid = h.fault_pid("before_ack")
    files = [results / jid / "attempt-1.md", results / jid / "attempt-1.json"]
    assert all(f.exists() for f in files)
    # When the job was reclaimed elsewhere meanwhile (a newer attempt's token)
    h.r.hset(h.k.job(jid), "token", "9.elsewhere")
    os.kill(pid, signal.SIGCONT)
    # Then its settle is fenced and its files are deleted, never published
    wait_until(lambda: h.daemons[0].log_events("settled", verdict="fenced"), 10, what="fenced settle")
    wait_until(lambda: not any(f.exists() for f in files), 5, what="the fenced attempt's files deleted")
    assert h.job(jid).token == "9.elsewhere"


def _peak_rss(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.timeout(120)
def test_a_zip_bomb_is_never_opened_in_the_slot(h, tmp_path):
    # Given a .docx whose [Content_Types].xml inflates to 200 MiB (about 200 KiB on disk)
    root = tmp_path / "in"
    root.mkdir()
    bomb = root / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("[Content_Types].xml", "w") as f:
            block = b" " * (1 << 20)
            for _ in range(200):
                f.write(block)
    assert bomb.stat().st_size < 2 << 20
    d = h.daemon(workers=1, input_roots=[str(root)], extract="timeout = 5")
    h.wait_state(h.submit(kind="noop"), timeout=15)
    slot = d.wait_slots(1)[0]
    before = _peak_rss(slot)
    # When it is submitted
    job = h.wait_state(h.submit(kind="parse_markdown", payload={"file": str(bomb)}),
                       states=("failed", "completed"), timeout=60)
    # Then whatever became of it, the slot itself never inflated it: its peak RSS barely moved
    assert d.slot_pids() == [slot] and psutil.pid_exists(slot)
    grew = _peak_rss(slot) - before
    assert grew < 50 << 20, f"the slot's peak RSS grew by {grew >> 20} MiB (job: {job.state} {job.error})"
