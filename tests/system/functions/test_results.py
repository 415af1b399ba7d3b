"""Function handlers: what a function returns, raises or does becomes the job's outcome; the
context it gets; after_fork and module state per attempt; progress and chunks."""

from __future__ import annotations

import pytest

from .fnhelp import events, fn_handlers

KINDS = ("echo", "aecho", "final", "boom", "unencodable", "exit9", "counter", "progress")


@pytest.mark.timeout(120)
def test_returns_raises_and_exits(h):
    h.daemon(workers=2, handlers=fn_handlers(*KINDS, extra='after_fork = "fnjobs:after_fork"'))

    # Sync: the context carries the job; after_fork ran once, in this attempt's own process
    j = h.submit(kind="echo", user="u1", payload={"record": str(h.records), "a": [1, "ü"]})
    job = h.wait_state(j)
    v = job.result["value"]
    assert (v["id"], v["kind"], v["user"], v["payload"]["a"]) == (j, "echo", "u1", [1, "ü"])
    assert v["attempt"] == v["env_attempt"] and v["attempt"].startswith("1.")  # the attempt's token
    assert v["run_id"] is None and v["key"] is None
    assert v["after_fork"] == [v["pid"]]

    # Every JSON type comes back as it was returned, as result.value
    values = [{"k": {"n": [1, 2.5, None, True]}}, [1, "a", None], "text", 42, 2.5, True, False, None, {}, []]
    ids = [h.submit(kind="echo", user=f"v{i}", payload={"value": val}) for i, val in enumerate(values)]
    for jid, val in zip(ids, values):
        got = h.wait_state(jid)
        assert got.result == {"value": val} and got.attempts == 1, (val, got.result)

    # Async: on a fresh event loop in the child; after_fork ran there too, once
    a = h.wait_state(h.submit(kind="aecho", payload={"value": {"x": 1}}))
    assert a.result["value"]["value"] == {"x": 1} and len(a.result["value"]["after_fork"]) == 1

    # Final: that kind, final at once; a pool-owned kind is refused as handler_failed (final too)
    f = h.wait_state(h.submit(kind="final", payload={"kind": "corrupt", "message": "empty template"}),
                     states=("failed",))
    assert (f.error.kind, f.error.message, f.attempts) == ("corrupt", "empty template", 1)
    f = h.wait_state(h.submit(kind="final", payload={"kind": "cancelled"}), states=("failed",))
    assert f.error.kind == "handler_failed" and "only the pool sets" in f.error.message and f.attempts == 1

    # A plain exception: handler_failed, retried to max_tries; type, message and last frames
    b = h.wait_state(h.submit(kind="boom", payload={"record": str(h.records)}), states=("failed",), timeout=30)
    assert b.error.kind == "handler_failed" and b.attempts == 3 and b.tries == 3
    assert b.error.message.startswith("ValueError: boom 7 (at fnjobs.py:")
    assert "in _inner" in b.error.message and "in boom" in b.error.message and len(b.error.message) <= 2000
    tb = h.daemons[0].log_events("function_raised", job_id=b.id)
    assert len(tb) == 3 and "Traceback (most recent call last)" in tb[0]["traceback"]
    assert 'raise ValueError(f"boom {n}")' in tb[0]["traceback"]

    # A return value that does not encode: bad_output (retried, as for a command's bad stdout)
    u = h.wait_state(h.submit(kind="unencodable"), states=("failed",), timeout=30)
    assert u.error.kind == "bad_output" and "does not encode" in u.error.message and u.attempts == 3

    # os._exit(9): handler_failed with the status, retried; its print went to the slot's log
    e = h.wait_state(h.submit(kind="exit9", payload={"record": str(h.records)}), states=("failed",), timeout=30)
    assert e.error.kind == "handler_failed" and e.error.message.startswith("exit status 9") and e.attempts == 3
    assert h.daemons[0].logs().count("about to exit 9") == 3

    # Module state is a copy per attempt: each attempt of `counter` sees the slot's 0 and returns 1
    counts = [h.submit(kind="counter", user=f"c{i}") for i in range(6)]
    assert [h.wait_state(c).result["value"] for c in counts] == [1] * 6


@pytest.mark.timeout(90)
def test_progress_and_chunks_in_order_and_coalesced(h):
    h.daemon(workers=1, handlers=fn_handlers("progress", "aecho"))
    k = h.k
    j = h.submit(kind="progress", payload={"n": 150, "gap": 0.01})
    job = h.wait_state(j, timeout=30)
    assert job.result == {"value": {"chunks": 150}}
    evs = [e for e in events(h, k.events) if e["job_id"] == j]
    types = [e["type"] for e in evs]
    prog = [e for e in evs if e["type"] == "job_progress"]
    assert types.index("job_started") < types.index("job_progress")
    assert max(i for i, t in enumerate(types) if t == "job_progress") < types.index("job_completed")
    # 152 calls over ~1.5 s became at most ~10 events a second (plus the final flush)
    assert 2 <= len(prog) <= 25, len(prog)
    ms = [int(e["id"].split("-")[0]) for e in prog]
    assert all(sum(1 for t in ms if a <= t < a + 1000) <= 11 for a in ms), ms
    assert "".join(e["chunk"] or "" for e in prog) == "".join(f"<{i}>" for i in range(150))
    assert prog[0]["progress"] == 0.1 and prog[-1]["progress"] == 1.0 and prog[-1]["message"] == "done"
    # the async function's chunks too
    a = h.submit(kind="aecho")
    h.wait_state(a)
    assert "".join(e["chunk"] or "" for e in events(h, k.events)
                   if e["job_id"] == a and e["type"] == "job_progress") == "async works"


def test_error_message_is_bounded_and_names_the_frames():
    from tender_pool.slots.functions import MESSAGE_CAP, describe

    def deep(n: int):
        if n == 0:
            raise KeyError("k" * 10_000)
        deep(n - 1)

    try:
        deep(5)
    except KeyError as e:
        msg = describe(e)
    assert len(msg) == MESSAGE_CAP and msg.startswith("KeyError: 'kkk")
    assert msg.count(" in deep") == 3 and "k… (at test_results.py:" in msg
    try:
        raise RuntimeError
    except RuntimeError as e:
        assert describe(e) == f"RuntimeError (at test_results.py:{e.__traceback__.tb_lineno} in " \
                              "test_error_message_is_bounded_and_names_the_frames)"


def test_job_context_outside_a_slot():
    from tender_pool.client import JobContext

    ctx = JobContext("j", "k", "u", {"a": 1}, "1.t", progress_fd=-1)
    ctx.progress(0.5, "half")  # no pipe: nothing to report to, no error
    ctx.chunk("text")
    for bad in (lambda: ctx.progress("half"), lambda: ctx.progress(True), lambda: ctx.chunk(b"x"),
                lambda: ctx.progress(0.1, 5)):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(RuntimeError):
        ctx.owns()
