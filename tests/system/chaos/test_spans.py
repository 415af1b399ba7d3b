"""The span checker itself: an overlap that only a killed attempt shows is found, and a clean
hand-over is not one. (The old soak read start/end records and skipped attempts without an end: an
overlap followed by a kill was invisible to it.)"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from .spans import by_job, by_user, overlaps, proven_ends, read_trails


def trail(d, job, token, user, ticks, end=None):
    lines = ['# {"user": "%s", "pid": 1, "attempt": %s}' % (user, token.split(".")[0])]
    lines += [repr(t) for t in ticks]
    if end is not None:
        lines.append(f"end {end!r}")
    (d / f"{job}@{token}.ticks").write_text("\n".join(lines) + "\n")


def test_a_killed_attempt_that_ran_on_after_its_rerun_started_is_an_overlap(tmp_path):
    # attempt 1 was reclaimed and killed without an end line; its last tick comes after attempt 2's first
    trail(tmp_path, "j1", "1.aa", "u", [10.0, 10.05, 10.10, 10.15])
    trail(tmp_path, "j1", "2.bb", "u", [10.12, 10.17], end=10.2)
    [o] = overlaps(read_trails(tmp_path), by_job)
    assert (o.first.n, o.second.n) == (1, 2) and abs(o.seconds - 0.08) < 1e-9
    # what a check over finished attempts only would have seen: nothing
    assert not overlaps([a for a in read_trails(tmp_path) if a.ended], by_job)


def test_the_kill_time_bounds_a_killed_attempt_and_a_clean_handover_is_no_overlap(tmp_path):
    trail(tmp_path, "j1", "1.aa", "u", [10.0, 10.05])  # killed at 10.06 by the test
    trail(tmp_path, "j1", "2.bb", "u", [10.08], end=10.09)
    trail(tmp_path, "j2", "1.cc", "u", [10.095], end=10.1)  # the user's next job, after j1 ended
    assert not overlaps(read_trails(tmp_path, killed={("j1", "1.aa"): 10.06}), by_job)
    assert overlaps(read_trails(tmp_path), by_job)  # without the kill time: last tick + 50 ms > 10.08
    assert not overlaps(read_trails(tmp_path, killed={("j1", "1.aa"): 10.06}), by_user)


def test_two_jobs_of_one_user_at_once_are_found_even_when_one_contains_the_other(tmp_path):
    trail(tmp_path, "long", "1.aa", "u", [1.0, 5.0], end=5.0)
    trail(tmp_path, "short1", "1.bb", "u", [2.0], end=2.1)
    trail(tmp_path, "short2", "1.cc", "u", [3.0], end=3.1)
    trail(tmp_path, "other", "1.dd", "v", [2.0], end=2.1)
    found = overlaps(read_trails(tmp_path), by_user)
    assert sorted(o.second.job for o in found) == ["short1", "short2"]


def test_closest_is_the_narrowest_handover(tmp_path):
    from .spans import closest

    trail(tmp_path, "j1", "1.aa", "u", [1.0], end=1.1)
    trail(tmp_path, "j1", "2.bb", "u", [1.3], end=1.4)
    trail(tmp_path, "j2", "1.cc", "u", [1.45], end=1.5)
    assert abs(closest(read_trails(tmp_path), by_job) - 0.2) < 1e-9
    assert abs(closest(read_trails(tmp_path), by_user) - 0.05) < 1e-9


def log_line(event: str, job: str, attempt: int, t: float) -> str:
    ts = datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")
    return json.dumps({"event": event, "job_id": job, "attempt": attempt, "timestamp": ts})


def test_the_pools_own_lines_prove_when_a_stopped_attempt_ended(tmp_path):
    # attempt 1 stopped by its slot (job_ran logged once reaped, 10.065), re-run at 10.07: inside the
    # one-tick estimate (10.05 + 0.05) but after the proven end; j2's slot was SIGKILLed (slot_exited
    # after its group was killed, 20.01) and j2 re-run at 20.03
    trail(tmp_path, "j1", "1.aa", "u", [10.0, 10.05])
    trail(tmp_path, "j1", "2.bb", "u", [10.07], end=10.08)
    trail(tmp_path, "j2", "1.cc", "v", [20.0])
    trail(tmp_path, "j2", "2.dd", "v", [20.03], end=20.04)
    logs = "\n".join([log_line("job_ran", "j1", 1, 10.065), log_line("slot_exited", "j2", 1, 20.01),
                      log_line("job_ran", "j9", 1, 1.0), "not json", log_line("settled", "j2", 2, 20.0)])
    ends = proven_ends([logs], read_trails(tmp_path), killed={("j1", "1.aa"): 10.2})
    assert ends == {("j1", "1.aa"): 10.065, ("j2", "1.cc"): 20.01}  # the earlier of kill and line
    assert not overlaps(read_trails(tmp_path, killed=ends), by_job)
    assert len(overlaps(read_trails(tmp_path), by_job)) == 2  # the estimate alone: both overlap
