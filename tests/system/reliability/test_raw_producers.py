"""For producers that can only LPUSH a JSON message onto a ready list: the
same rules as `submit` (ids, users, payloads), and a dependency cycle closed by a raw entry is a
dead letter naming the cycle, not jobs that wait for ever."""

import json
import time

import pytest
from conftest import wait_until


def _dead(h):
    return [json.loads(x) for x in h.r.lrange(h.k.dead, 0, -1)]


@pytest.mark.timeout(60)
def test_a_raw_entry_closing_a_dependency_cycle_is_dead_lettered_with_the_cycle(h):
    h.config()
    # Given job B waits for job A, whose record is gone since (submit refuses an unknown `after` id,
    # so only a dependency that vanished after B's submit leaves B waiting for an id that is free)
    h.submit(kind="behave", user="u0", id="cyc-A")
    b = h.submit(kind="behave", user="u1", id="cyc-B", after=["cyc-A"])
    h.r.delete(h.k.job("cyc-A"))
    h.r.lrem(h.k.ready_lo, 0, "cyc-A")
    h.r.hdel(h.k.inready, "u0")
    h.r.lrem(h.k.ready_lo, 0, b)  # not claimable yet: the raw A must be looked at first
    # When a raw producer pushes A, after B
    h.r.rpush(h.k.ready_hi, json.dumps({"kind": "behave", "user": "u1", "id": "cyc-A", "after": ["cyc-B"]}))
    d = h.daemon()
    d.wait_slots(2)
    # Then A is a dead letter whose reason names the cycle
    dead = wait_until(lambda: _dead(h), 15, what="a dead letter")
    assert "dependency_cycle: cyc-A -> cyc-B -> cyc-A" in dead[0]["reason"], dead
    assert h.job("cyc-A") is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fields, says", [
    ({"id": "~wake"}, "job id"),
    ({"id": "a b"}, "job id"),
    ({"user": "a{b}"}, "user"),
    ({"id": "self-1", "after": ["self-1"]}, "cannot wait for itself"),
])
def test_raw_entries_breaking_the_submit_rules_are_dead_lettered(h, fields, says):
    d = h.daemon()
    d.wait_slots(2)
    h.r.lpush(h.k.ready_lo, json.dumps({"kind": "behave", "user": "u1", **fields}))
    dead = wait_until(lambda: _dead(h), 15, what="a dead letter")
    assert says in dead[0]["reason"], dead
    ok = h.submit(kind="behave", user="u2")  # and the pool keeps serving
    assert h.wait_state(ok).state.value == "completed"
    time.sleep(0.1)
