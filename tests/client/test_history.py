"""`tender-pool history`: filters and pagination against known jobs; it lives in Redis."""

import json

from tender_pool.client import Client
from tender_pool.client.history import HistoryFilter, query


def ids(h, *args):
    out = h.cli("history", "--json", *args)
    assert out.returncode == 0, out.stderr
    page = json.loads(out.stdout)
    return [j["id"] for j in page["items"]], page["total"]


def sec(ms: int) -> str:
    return f"{ms / 1000:.3f}"


def test_history_filters_and_pagination(h, tmp_path):
    roots = tmp_path / "in"
    roots.mkdir()
    (roots / "Lot-A.pdf").write_bytes(b"a")
    (roots / "lot-b.docx").write_bytes(b"b")
    h.daemon(workers=2, input_roots=[str(roots)])
    # Given four jobs that finish one after the other
    plan = [("j1", "noop", "alice", {"file": str(roots / "Lot-A.pdf")}, "completed"),
            ("j2", "noop", "bob", {"file": str(roots / "lot-b.docx")}, "completed"),
            ("j3", "behave", "alice", {"final_error": "corrupt"}, "failed"),
            ("j4", "noop", "carol", {}, "completed")]
    jobs = {}
    for jid, kind, user, payload, state in plan:
        h.submit(kind=kind, user=user, payload=payload, id=jid)
        jobs[jid] = h.wait_state(jid, states=(state,))
    running = h.submit(kind="long", user="dave", payload={"sleep": 58})  # not finished (within its 60 s timeout): not history
    h.wait_state(running, states=("running",))

    # Then: newest first, every filter, and pages
    assert ids(h) == (["j4", "j3", "j2", "j1"], 4)
    assert ids(h, "--status", "failed") == (["j3"], 1)
    assert ids(h, "--status", "failed", "--status", "completed", "--user", "alice") == (["j3", "j1"], 2)
    assert ids(h, "--file", "lot-a") == (["j1"], 1)
    assert ids(h, "--kind", "behave") == (["j3"], 1)
    assert ids(h, "--kind", "noop", "--user", "alice") == (["j1"], 1)
    assert ids(h, "--kind", "noop", "--status", "failed") == ([], 0)
    assert ids(h, "--file", ".DOCX") == (["j2"], 1)
    assert ids(h, "--job-id", "j2") == (["j2"], 1)
    assert ids(h, "--job-id", running) == ([], 0)
    assert ids(h, "--page-size", "3") == (["j4", "j3", "j2"], 4)
    assert ids(h, "--page-size", "3", "--page", "2") == (["j1"], 4)
    assert ids(h, "--page-size", "3", "--page", "3") == ([], 4)
    j2_end, j2_start = jobs["j2"].finished_at, jobs["j2"].started_at
    assert ids(h, "--ended-after", sec(j2_end)) == (["j4", "j3", "j2"], 3)
    assert ids(h, "--ended-before", sec(j2_end)) == (["j1"], 1)
    assert ids(h, "--started-after", sec(j2_start), "--started-before", sec(jobs["j4"].started_at)) == (["j3", "j2"], 2)
    assert ids(h, "--user", "alice", "--ended-after", sec(j2_end)) == (["j3"], 1)
    page = json.loads(h.cli("history", "--json", "--job-id", "j3").stdout)["items"][0]
    assert page["error"]["kind"] == "corrupt" and page["state"] == "failed" and page["finished_at"].endswith("Z")
    text = h.cli("history", "--page-size", "2")
    assert "page 1 of 2, 4 job(s) match" in text.stdout and "Lot-A.pdf" not in text.stdout and "j4" in text.stdout
    assert h.cli("history", "--ended-after", "yesterday-ish").returncode == 2

    # It lives in Redis: with the daemon gone, the library call an admin page uses gives the same
    h.daemons[0].kill()
    res = query(h.r, h.k, HistoryFilter(user="alice"), page=1, page_size=1)
    assert res.total == 2 and [j.id for j in res.items] == ["j3"]
    assert ids(h, "--page", "2", "--page-size", "2") == (["j2", "j1"], 4)
    client = Client(h.redis.url, prefix=h.prefix)
    assert [j.id for j in client.history(kind="noop").items] == ["j4", "j2", "j1"]
