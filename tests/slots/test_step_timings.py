"""The pool's own time around a job (issue 22): each attempt's steps, from the start stamp to the settle,
in the job_ran log line, and for parse_markdown in its metadata file's ``timings`` (``pool_<step>``).
Through a real daemon: the steps exist, none is negative, and the job's own claim → stored (Redis's
``finished_at − started_at``, whole ms: 1 ms allowed for that) falls within the last one, the settle:
the steps before it add up to no more than claim → stored, all of them to no less (the settle step also
holds the reply's way back and what the slot does after it, the release and its reports)."""

import json
import time
from pathlib import Path

import pytest

from conftest import wait_until
from tender_pool.slots.attempt import Steps

# (a forked child reports its outcome before its exit: ``exit`` ends there, and the exit is waited for
# after the settle, with the orphan sweep and the job_ran line: ``sweep``, not in claim → stored)
EXTRACTION_STEPS = ("take", "prepare", "spawn", "report", "child_start", "extract", "write", "exit", "reap",
                    "conclude", "settle", "sweep")
RESULT_KEYS = {"markdown_path", "metadata_path", "pages", "format"}  # CONTRACT: exactly these


def _claim_stored_s(h, jid: str) -> float:
    started, finished = h.r.hmget(h.k.job(jid), "started_at", "finished_at")
    return (int(finished) - int(started)) / 1000


def _within(steps: dict, claim_stored: float, slack: float = 0.001) -> None:
    before = sum(v for k, v in steps.items() if k not in ("settle", "sweep"))
    assert before <= claim_stored + slack <= before + steps["settle"] + 2 * slack, (steps, claim_stored)


def _pool_timings(path: str) -> dict:
    """The metadata file's pool steps, once the slot has added them (right after the settle)."""
    def ready():
        t = json.loads(Path(path).read_text())["timings"]
        return t if "pool_settle" in t else None
    return wait_until(ready, 10, what="the pool's steps in the metadata file")


@pytest.mark.timeout(90)
def test_parse_markdown_metadata_has_the_pools_steps_adding_up_to_claim_to_stored(h, tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.csv").write_text("name,amount\nalpha,1\nbeta,2\n")
    h.daemon(workers=1, input_roots=[str(root)], extra=f'results_dir = "{tmp_path / "results"}"')
    for _ in range(3):  # the first one alone, then one after another: the settle starts no next job
        jid = h.submit(kind="parse_markdown", payload={"file": str(root / "a.csv")})
        h.wait_state(jid, timeout=30)
        result = h.client().job(jid).result
        assert set(result) == RESULT_KEYS, result  # the child's marks never reach the stored result
        timings = _pool_timings(result["metadata_path"])
        steps = {k.removeprefix("pool_"): v for k, v in timings.items() if k.startswith("pool_")}
        assert list(steps) == list(EXTRACTION_STEPS), steps
        assert all(v >= 0 for v in steps.values()), steps
        _within(steps, _claim_stored_s(h, jid))
        assert {"extraction", "conversion"} <= set(timings)  # the extraction's own stay beside them


@pytest.mark.timeout(90)
def test_steps_of_a_job_the_settle_started_are_recorded_once_the_next_child_runs(h, tmp_path):
    # Given two documents of one user queued together: the first one's settle starts the second
    root = tmp_path / "in"
    root.mkdir()
    for name in ("a", "b", "c"):
        (root / f"{name}.csv").write_text(f"name,amount\n{name},1\n")
    d = h.daemon(workers=1, input_roots=[str(root)], extra=f'results_dir = "{tmp_path / "results"}"', start=False)
    ids = [h.submit(kind="parse_markdown", payload={"file": str(root / f"{n}.csv")}) for n in ("a", "b", "c")]
    d.start()
    for jid in ids:
        h.wait_state(jid, timeout=30)
    # Then every one has its steps in its file, and the job_ran lines carry them too
    for jid in ids:
        timings = _pool_timings(h.client().job(jid).result["metadata_path"])
        steps = {k.removeprefix("pool_"): v for k, v in timings.items() if k.startswith("pool_")}
        assert all(v >= 0 for v in steps.values()) and list(steps) == list(EXTRACTION_STEPS), steps
        _within(steps, _claim_stored_s(h, jid))
    ran = d.log_events("job_ran", job_id=ids[1])
    assert ran and set(ran[0]["steps_ms"]) == set(EXTRACTION_STEPS), ran  # logged after the sweep


@pytest.mark.timeout(60)
def test_a_command_jobs_steps_are_in_its_job_ran_line(h):
    d = h.daemon(workers=1)
    jid = h.submit(payload={})
    h.wait_state(jid)
    wait_until(lambda: d.log_events("job_ran", job_id=jid), 5, what="job_ran")
    steps = d.log_events("job_ran", job_id=jid)[0]["steps_ms"]
    assert list(steps) == ["take", "prepare", "spawn", "report", "run", "reap", "conclude", "orphans"], steps
    assert all(v >= 0 for v in steps.values())
    assert sum(steps.values()) <= _claim_stored_s(h, jid) * 1000 + 1  # the settle is not in the line
    assert "value" in h.client().job(jid).result  # a command's result is untouched


def test_the_childs_marks_are_clamped_to_the_slots_timeline_and_add_up():
    s = Steps(0)  # no start stamp: no take
    t0 = s.last
    time.sleep(0.002)
    s.mark("prepare")
    # a child mark before the slot's last mark (it ran while the slot reported), one after the end
    s.child([("child_start", t0 - 1.0), ("extract", time.monotonic() - 0.0005), ("write", time.monotonic() + 5)],
            exited_at=time.monotonic() + 10)
    steps = s.done()
    assert list(steps) == ["prepare", "child_start", "extract", "write", "exit", "reap"]
    assert steps["child_start"] == 0 and all(v >= 0 for v in steps.values()), steps
    assert sum(steps.values()) == pytest.approx(s.last - t0, abs=1e-9)


def test_a_run_stopped_before_its_exit_is_one_run_step():
    s = Steps(int(time.time() * 1000) - 50)
    s.child([], exited_at=None)
    steps = s.done()
    assert list(steps) == ["take", "run"] and steps["take"] >= 0.049, steps


def test_a_settle_without_a_run_still_records_the_previous_attempts_steps():
    # Given an attempt whose steps wait for the next child (its settle started the next job), and
    # that next job is settled without running (decided at its start), the slot then idle
    from types import SimpleNamespace

    from tender_pool.slots.attempt import Attempt, Ran
    from tender_pool.store.handler_io import Outcome

    recorded = []

    class Kind:
        def record_steps(self, job, attempt, outcome, steps):
            recorded.append((job.id, steps))

        def ready_next(self):
            pass

    a = Attempt.__new__(Attempt)  # only what ``settled`` reads
    a.kinds, a.aborting, a.last = {"k": Kind()}, (lambda: False), None
    nxt = SimpleNamespace(job=SimpleNamespace(kind="k", id="j1"), started=SimpleNamespace(attempt=1))
    a.pending = (nxt, Ran(Outcome("completed"), launched=True), {"take": 0.001, "settle": 0.002})
    a.settled(busy_next=False)
    # Then the waiting steps are recorded now, not left for a next run that may never come
    assert recorded == [("j1", {"take": 0.001, "settle": 0.002})] and a.pending is None
