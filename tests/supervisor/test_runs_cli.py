"""`tender-pool runs …`: submit's checks (line numbers, exit 2), the JSON shapes, exit codes, and a
live run followed by `runs watch` to its end (with a daemon)."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from conftest import TENDER_POOL, wait_until

RUN_FIELDS = {"id", "user", "kind", "state", "created_at", "finished_at", "counts", "jobs"}
COUNT_FIELDS = {"total", "queued", "waiting", "running", "completed", "failed", "cancelled", "skipped"}


def items(h, *lines: str, name: str = "items.jsonl") -> str:
    p = h.tmp / name
    p.write_text("".join(line + "\n" for line in lines))
    return str(p)


def submit(h, *lines: str, args=()) -> dict:
    r = h.cli("runs", "submit", "--user", "u1", "--kind", "behave", "--items", items(h, *lines), "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def runs_index_exists(h) -> bool:
    return bool(h.r.exists(h.k.runs))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("lines, says", [
    (['{"key": "1.1"}', '{"key": "1.2"}', '{"key": "1.1"}'], "line 3: key '1.1' repeats line 1"),
    (['{"key": "1.1"}', '{"key": "1.2"'], "line 2: not a JSON object"),
    (['{"key": "1.1"}', '{"key": 1.2}'], "line 2: Expected `str`"),
    (['{"key": "1.1"}', '', '{"key": "a{b}"}'], "line 3: key"),
    (['{"key": "1.1", "payload": [1]}'], "line 1"),
    ([], "no items"),
])
def test_submit_refuses_bad_items_with_the_line_number_exit_2(h, lines, says):
    h.config()
    r = h.cli("runs", "submit", "--user", "u1", "--kind", "behave", "--items", items(h, *lines))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not runs_index_exists(h)  # nothing created


@pytest.mark.timeout(60)
def test_submit_json_is_the_whole_run_and_show_list_agree(h):
    h.config()
    run = submit(h, '{"key": "1.1", "payload": {"a": 1}}', '{"key": "1.2"}', args=("--max-parallel", "1"))
    assert set(run) == RUN_FIELDS and set(run["counts"]) == COUNT_FIELDS
    assert run["state"] == "pending" and run["counts"]["total"] == 2 and run["counts"]["queued"] == 2
    assert [(j["key"], j["state"], j["error"]) for j in run["jobs"]] == [("1.1", "queued", None), ("1.2", "queued", None)]
    assert set(run["jobs"][0]) == {"id", "key", "state", "error", "skipped_from"}  # CONTRACT "Runs"
    shown = h.cli("runs", "show", run["id"], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == run
    text = h.cli("runs", "show", run["id"]).stdout
    assert run["id"] in text and "1.2" in text and "0/2 done" in text
    listed = h.cli("runs", "list", "--user", "u1", "--json")
    rows = json.loads(listed.stdout)
    assert [r["id"] for r in rows] == [run["id"]] and set(rows[0]) == RUN_FIELDS - {"jobs"}
    assert json.loads(h.cli("runs", "list", "--state", "completed", "--json").stdout) == []
    plain = h.cli("runs", "submit", "--user", "u1", "--kind", "behave", "--items", items(h, '{"key": "x"}', name="b.jsonl"))
    assert plain.returncode == 0 and plain.stdout.strip().startswith("r")


@pytest.mark.timeout(60)
def test_unknown_runs_exit_2_and_redis_down_exits_4(h):
    h.config()
    for cmd in (["show", "nosuch"], ["watch", "nosuch"], ["cancel", "nosuch"], ["retry", "nosuch"],
                ["show", "bad{id}"], ["watch", "r1", "--since", "later"]):
        r = h.cli("runs", *cmd)
        assert r.returncode == 2, (cmd, r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    h.cli("runs", "submit", "--user", "u1", "--kind", "nokind", "--items", items(h, '{"key": "a"}'))
    assert h.cli("runs", "submit", "--user", "u1", "--kind", "nokind", "--items", items(h, '{"key": "a"}')).returncode == 2
    h.redis.stop(signal.SIGKILL)
    for cmd in (["show", "r1"], ["list"], ["watch", "r1"], ["cancel", "r1"]):
        r = h.cli("runs", *cmd)
        assert r.returncode == 4, (cmd, r.returncode, r.stderr)
        assert "Redis unreachable" in r.stderr and "Traceback" not in r.stderr
    r = h.cli("runs", "submit", "--user", "u1", "--kind", "behave", "--items", items(h, '{"key": "a"}'))
    assert r.returncode == 4 and "Traceback" not in r.stderr


@pytest.mark.timeout(60)
def test_cancel_then_watch_ends_after_the_snapshot_then_retry(h):
    h.config()
    run = submit(h, '{"key": "a"}', '{"key": "b"}')
    r = h.cli("runs", "cancel", run["id"])
    assert r.returncode == 0 and r.stdout.strip() == "cancelled: 2 job(s) ended now, 0 running job(s) being stopped"
    assert h.cli("runs", "cancel", run["id"]).stdout.strip() == "already cancelled"
    w = h.cli("runs", "watch", run["id"], "--json", timeout=10)
    lines = [json.loads(x) for x in w.stdout.splitlines()]
    assert w.returncode == 1 and [e["type"] for e in lines] == ["snapshot"] and lines[0]["state"] == "cancelled"
    assert h.cli("runs", "retry", run["id"]).stdout.strip() == "nothing to retry (run cancelled)"
    r = h.cli("runs", "retry", run["id"], "--cancelled")
    assert r.returncode == 0 and r.stdout.strip() == "retried 2 job(s); run running"
    assert json.loads(h.cli("runs", "show", run["id"], "--json").stdout)["state"] == "running"


@pytest.mark.timeout(90)
def test_watch_follows_a_live_run_to_its_end_and_resumes_with_since(h):
    # Given a run of four short jobs, watched (text and JSON) before the daemon starts
    d = h.daemon(workers=2, start=False)
    run = submit(h, *(json.dumps({"key": f"s{i}", "payload": {"sleep": 0.2}}) for i in range(4)))
    watchers = [subprocess.Popen([TENDER_POOL, "runs", "watch", run["id"], *extra, "-c", str(h.tmp / "a.toml")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=h.env())
                for extra in ([], ["--json"])]
    firsts = [w.stdout.readline() for w in watchers]  # each has its snapshot
    # When the daemon runs it
    d.start()
    text, js = watchers
    out, err = js.communicate(timeout=60)
    w = subprocess.CompletedProcess(js.args, js.returncode, firsts[1] + out, err)
    # Then it ends with the run: exit 0 (completed), the snapshot first, run_finished last
    assert w.returncode == 0, w.stderr
    evs = [json.loads(x) for x in w.stdout.splitlines()]
    assert evs[0]["type"] == "snapshot" and evs[-1]["type"] == "run_finished" and evs[-1]["state"] == "completed"
    kinds = [e["type"] for e in evs[1:]]
    assert kinds.count("job_started") == 4 and kinds.count("job_completed") == 4
    for e in evs:
        c = e["counts"]
        assert sum(c[f] for f in COUNT_FIELDS - {"total"}) == c["total"] == 4
    ids = [tuple(map(int, e["id"].split("-"))) for e in evs]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    out, _ = text.communicate(timeout=30)
    assert text.returncode == 0
    assert firsts[0].startswith("[------------------------]   0%  pending")
    assert out.splitlines()[-1].startswith("[########################] 100%") and "run_finished" in out
    # And --since resumes exactly after an id, without a snapshot
    rest = h.cli("runs", "watch", run["id"], "--json", "--since", evs[3]["id"])
    assert rest.returncode == 0
    assert [json.loads(x)["id"] for x in rest.stdout.splitlines()] == [e["id"] for e in evs[4:]]
    after_end = h.cli("runs", "watch", run["id"], "--json", "--since", evs[-1]["id"])
    assert after_end.returncode == 0 and after_end.stdout == ""


@pytest.mark.timeout(90)
def test_status_shows_active_runs(h):
    h.daemon(workers=1)
    run = submit(h, json.dumps({"key": "long", "payload": {"sleep": 30}}), '{"key": "next"}')
    st = wait_until(lambda: (lambda s: s if s.get("runs") else None)(
        json.loads(h.cli("status", "--json").stdout)), 20, what="status with a run")
    assert st["runs"] == [{"id": run["id"], "user": "u1", "kind": "behave", "counts": st["runs"][0]["counts"]}]
    assert st["runs"][0]["counts"]["total"] == 2
    text = h.cli("status").stdout
    assert "runs     1 active" in text and run["id"] in text
    via_redis = json.loads(h.cli("status", "--redis", "--json").stdout)
    assert [r["id"] for r in via_redis["runs"]] == [run["id"]]
    h.cli("runs", "cancel", run["id"])
    wait_until(lambda: json.loads(h.cli("status", "--json").stdout).get("runs") == [], 20, what="no active run")


@pytest.mark.timeout(90)
def test_a_watcher_reconnecting_to_a_live_daemon_run_sees_every_event_once(h):
    from tender_pool.client import Client

    h.daemon(workers=2)
    c = Client.from_config(str(h.tmp / "a.toml"))
    run = c.submit_run("u1", "behave", [{"key": f"s{i}", "payload": {"sleep": 0.05}} for i in range(10)])
    since, seen, snap = None, [], None
    while True:  # read three events, drop the connection, come back with the last id
        gen, n, ended = c.events(run.id, since=since, block_ms=200), 0, False
        for ev in gen:
            if ev.type == "snapshot":
                assert snap is None
                snap = ev
            else:
                seen.append(ev.id)
            since, n = ev.id, n + 1
            if ev.type == "run_finished" or ev.final:
                ended = True
                break
            if n == 3:
                break
        gen.close()
        if ended:
            break
    rest = [sid.decode() for sid, _ in c.r.xrange(c.k.run_events(run.id), f"({snap.id}", "+")]
    assert seen == rest and len(set(seen)) == len(seen)
    assert c.run(run.id).state == "completed"
