"""The admin web without a browser: Starlette's test client against the app, a real daemon on a real
Redis behind it. Auth (deny by default, 401/403, read-only), CSRF, escaping, headers, mounting under
a prefix, clamped parameters, and the JSON endpoints against the CLI's own --json."""

from __future__ import annotations

import json
import re

import pytest
from starlette.testclient import TestClient

from conftest import wait_until
from tender_pool.web import Principal, allow_all_insecure, create_app, local_only
from .webhelp import client_for, csrf_of

XSS = '"><img src=x onerror=alert(1)>'
XSS2 = "</script><script>alert(2)</script>"
SAME = {"Sec-Fetch-Site": "same-origin"}


def viewer(request):
    return Principal("viewer", frozenset({"view"}))


def operator(request):
    return Principal("operator", frozenset({"view", "act"}))


def nobody(request):
    return None


@pytest.fixture
def pool(h):
    (h.tmp / "in").mkdir()
    d = h.daemon(workers=2, input_roots=[str(h.tmp / "in")])
    d.wait_slots(2)
    c = client_for(h)
    wait_until(lambda: c.status().online == 2, 15, what="2 slots online")
    yield c
    c.close()


def web(client, auth=operator, **kw) -> TestClient:
    return TestClient(create_app(client, auth=auth, **kw), follow_redirects=False)


def doc(h, name: str) -> str:
    """A file inside the pool's input root (file jobs outside it fail ``outside_roots``)."""
    f = h.tmp / "in" / name
    f.write_text("x")
    return str(f)


def running_job(h, client, **payload) -> str:
    jid = h.submit("behave", payload={"sleep": 30, **payload})
    wait_until(lambda: client.job(jid).state == "running", 15, what=f"{jid} running")
    return jid


ROUTES_GET = ["/", "/api/status", "/api/history", "/live/status", "/runs", "/history", "/jobs/x", "/runs/r1",
              "/runs/r1/events", "/metrics"]
ROUTES_POST = ["/jobs/x/cancel", "/runs/r1/cancel", "/runs/r1/retry", "/pool/drain", "/pool/scale"]


def test_auth_is_required_and_denies_by_default(pool):
    with pytest.raises(TypeError):
        create_app(pool)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        create_app(pool, auth=None)
    w = web(pool, auth=nobody)
    for path in ROUTES_GET:
        r = w.get(path)
        assert r.status_code == 401, (path, r.status_code)
        assert "csrf" not in r.text or 'content=""' in r.text
    for path in ROUTES_POST:
        assert w.post(path, headers=SAME).status_code == 401, path
    # async auth works the same way
    async def anon(request):
        return None
    assert web(pool, auth=anon).get("/").status_code == 401
    # the test client is not loopback: local_only refuses it; behind a proxy header too
    assert web(pool, auth=local_only).get("/").status_code == 401
    assert web(pool, auth=allow_all_insecure).get("/").status_code == 200


def test_local_only_takes_loopback_without_proxy_headers(pool):
    app = create_app(pool, auth=local_only)
    lo = TestClient(app, client=("127.0.0.1", 5555))
    assert lo.get("/").status_code == 200
    assert lo.get("/", headers={"X-Forwarded-For": "203.0.113.9"}).status_code == 401
    assert lo.get("/", headers={"Forwarded": "for=203.0.113.9"}).status_code == 401
    assert TestClient(app, client=("::1", 5555)).get("/").status_code == 200
    assert TestClient(app, client=("10.0.0.5", 5555)).get("/").status_code == 401


def test_view_only_and_read_only_get_403_and_no_buttons(h, pool):
    jid = running_job(h, pool)
    run = pool.submit_run("u2", "behave", [{"key": "a", "payload": {"sleep": 30}}])
    for w in (web(pool, auth=viewer), web(pool, auth=operator, read_only=True)):
        for path in (f"/jobs/{jid}", f"/runs/{run.id}", "/"):
            page = w.get(path)
            assert page.status_code == 200
            assert "<form method=\"post\"" not in page.text and "<button" not in page.text.split("<main>")[1], path
        token = csrf_of(w.get("/").text)
        for path in (f"/jobs/{jid}/cancel", f"/runs/{run.id}/cancel", f"/runs/{run.id}/retry", "/pool/drain"):
            assert w.post(path, data={"csrf": token}, headers=SAME).status_code == 403, path
    assert pool.job(jid).state == "running" and pool.run(run.id).state != "cancelled"
    # the operator sees the buttons
    page = web(pool).get(f"/jobs/{jid}").text
    assert f'action="/jobs/{jid}/cancel"' in page and 'data-confirm=' in page


def test_actions_need_same_origin_and_the_token(h, pool):
    jid = running_job(h, pool)
    w = web(pool)
    token = csrf_of(w.get(f"/jobs/{jid}").text)
    path = f"/jobs/{jid}/cancel"
    assert w.get(path).status_code == 405  # GET on an action
    refused = [
        ({"Sec-Fetch-Site": "cross-site"}, {"csrf": token}),
        ({"Sec-Fetch-Site": "same-site"}, {"csrf": token}),
        ({"Origin": "http://evil.example"}, {"csrf": token}),
        ({}, {"csrf": token}),  # neither header
        (SAME, {}),  # no token
        (SAME, {"csrf": "0" * 64}),  # a wrong one
        (SAME, {"csrf": csrf_of(web(pool).get("/").text)}),  # another app's (another secret)
    ]
    for headers, form in refused:
        r = w.post(path, data=form, headers=headers)
        assert r.status_code == 403, (headers, form, r.status_code)
    assert pool.job(jid).state == "running"
    # Origin equal to our own works where the browser sends no Sec-Fetch-Site
    ok = w.post(path, data={"csrf": token}, headers={"Origin": "http://testserver"})
    assert ok.status_code == 303 and ok.headers["location"] == f"/jobs/{jid}?done=cancel_job:signalled"
    wait_until(lambda: pool.job(jid).state == "cancelled", 15, what="cancelled")


def test_run_actions_and_json_answers(h, pool):
    run = pool.submit_run("u3", "behave", [{"key": k, "payload": {"exit": 1} if k == "bad" else {}}
                                           for k in ("ok", "bad")])
    wait_until(lambda: pool.run(run.id).finished, 30, what="run finished")
    w = web(pool)
    token = csrf_of(w.get(f"/runs/{run.id}").text)
    assert "Retry failed" in w.get(f"/runs/{run.id}").text
    r = w.post(f"/runs/{run.id}/retry", data={"csrf": token}, headers={**SAME, "Accept": "application/json"})
    assert r.status_code == 200 and r.json()["result"]["outcome"] == "retried" and r.json()["result"]["retried"] == 1
    r = w.post(f"/runs/{run.id}/cancel", data={"csrf": token}, headers=SAME)
    assert r.status_code == 303
    wait_until(lambda: pool.run(run.id).state == "cancelled", 15, what="run cancelled")
    # an unknown job is a 404 page, a drain without a reachable socket a 503
    assert w.post("/jobs/nope/cancel", data={"csrf": token}, headers=SAME).status_code == 404


def test_job_data_is_shown_escaped(h, pool):
    # XSS in the user, the file name, the payload, and the error message (a handler's own final error)
    err = json.dumps({"error": {"kind": "corrupt", "message": f"broken {XSS} {XSS2}"}})
    inbox = h.tmp / "in"
    (inbox / f"{XSS}<").mkdir()
    doc = inbox / f"{XSS}<" / "script>.doc"  # the path holds both payloads: …"><img …><…/script>.doc
    doc.write_text("x")
    jid = h.submit("behave", user=f"u{XSS}", payload={"file": str(doc), "note": XSS2, "stdout": err, "exit": 3})
    h.wait_state(jid, ("failed",))
    assert pool.job(jid).error.kind == "corrupt"
    running = h.submit("behave", user=f"v{XSS2}", payload={"file": str(doc), "sleep": 30})
    wait_until(lambda: pool.job(running).state == "running", 15, what="running")
    w = web(pool)
    # the overview's slot table comes from the supervisor's status, which learns of the start from the
    # slot's report a moment after Redis says running: wait for the row, then check the pages
    wait_until(lambda: "v&lt;/script&gt;" in w.get("/").text, 10, what="the running slot's row on the overview")
    pages = [w.get("/"), w.get(f"/jobs/{jid}"), w.get("/history"), w.get(f"/history?user=u{XSS}"),
             w.get(f"/jobs/{running}")]
    for page in pages:
        assert page.status_code == 200
        body = page.text
        assert "<img src=x" not in body and "<script>alert" not in body and "</script><script>" not in body
    job_page = pages[1].text
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in job_page  # the user, the file, the error
    assert "&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in job_page
    assert "broken &#34;&gt;&lt;img" in job_page  # the error message itself
    assert "u&#34;&gt;&lt;img" in pages[3].text  # the filtered history shows the user
    assert "v&lt;/script&gt;" in pages[0].text  # the running slot's user on the overview
    # the only scripts are ours, from /static
    for page in pages:
        assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/static/app.js" defer>']


def test_security_headers(pool):
    w = web(pool)
    for path in ("/", "/history", "/runs", "/api/status", "/api/history"):
        r = w.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["cache-control"] == "no-store"
    static = w.get("/static/app.js")
    assert static.status_code == 200 and "javascript" in static.headers["content-type"]
    assert static.headers["x-content-type-options"] == "nosniff"
    assert w.get("/static/../app.py").status_code == 404


def test_mounted_under_a_prefix_every_url_has_it(h, pool):
    from fastapi import FastAPI

    other = h.tmp / "b.toml"
    h.config("b")  # a second pool config: another prefix is not needed, another queue is
    other.write_text(other.read_text().replace("[pool]", '[pool]\nqueue = "other_queue"'))
    second = client_for(h, "b")
    host = FastAPI()
    host.mount("/a/b/tender-parse", create_app(pool, auth=operator))
    host.mount("/other", create_app(second, auth=operator))
    jid = running_job(h, pool)
    run = pool.submit_run("u4", "behave", [{"key": "k", "payload": {}}])
    h.submit("behave", payload={})
    w = TestClient(host, follow_redirects=False)
    prefix = "/a/b/tender-parse"
    for path in ("/", "/runs", f"/runs/{run.id}", "/history", f"/jobs/{jid}", "/history?page_size=1"):
        page = w.get(prefix + path)
        assert page.status_code == 200, path
        urls = re.findall(r'(?:href|src|action|data-live|data-events)="([^"]*)"', page.text)
        assert urls, path
        assert all(u.startswith(prefix + "/") for u in urls), (path, [u for u in urls if not u.startswith(prefix)])
        assert f'data-root="{prefix}"' in page.text
    assert w.get(prefix + "/static/app.css").status_code == 200
    token = csrf_of(w.get(f"{prefix}/jobs/{jid}").text)
    r = w.post(f"{prefix}/jobs/{jid}/cancel", data={"csrf": token}, headers=SAME)
    assert r.status_code == 303 and r.headers["location"].startswith(f"{prefix}/jobs/")
    # the second mount's client sees its own queue, not the first one's jobs
    assert w.get(f"/other/jobs/{jid}").status_code == 404
    pool.wait(jid, timeout=15)  # the cancelled job has ended: the first mount's history holds it
    assert w.get(f"{prefix}/api/history").json()["total"] >= 1
    assert w.get("/other/api/history").json()["total"] == 0
    second.close()


def test_parameters_are_clamped_or_refused(pool):
    w = web(pool)
    assert w.get("/api/history?page_size=100000").json()["page_size"] == 1000
    assert w.get("/api/history?page_size=0").json()["page_size"] == 1
    assert w.get("/api/history?page=-5").json()["page"] == 1
    assert w.get("/api/history?page=999999999").json()["page"] == 100000
    assert 'value="200"' in w.get("/history?page_size=5000").text
    for bad in ("page=abc", "page_size=1e9", "status=running", "status=completed,bogus", "ended_after=soon",
                "started_before=nan", "user=" + "x" * 201):
        r = w.get("/api/history?" + bad)
        assert r.status_code == 400 and "error" in r.json(), bad
        assert w.get("/history?" + bad).status_code == 400, bad
    assert w.get("/runs?limit=100000").status_code == 200
    assert w.get("/runs?state=nonsense").status_code == 400
    # searches that walk job hashes are bounded per app: past the limit, a 503 instead of a pile-up
    walks = w.app.dashboard.walks
    held = [walks.acquire(blocking=False) for _ in range(2)]
    assert all(held)
    assert w.get("/api/history?file=doc").status_code == 503
    assert w.get("/history?started_after=2000-01-01").status_code == 503
    assert w.get("/api/history?user=u1").status_code == 200  # index reads are not limited
    walks.release()
    assert w.get("/api/history?file=doc").status_code == 200


def test_json_endpoints_match_the_cli(h, pool):
    ids = [h.submit("behave", user=f"u{i % 2}", payload={"file": doc(h, f"doc{i}.doc"), **({"exit": 1} if i == 3 else {})})
           for i in range(6)]
    for jid in ids:
        h.wait_state(jid, ("completed", "failed"), timeout=30)
    w = web(pool)
    for web_q, cli_args in [
        ("", []),
        ("?status=completed", ["--status", "completed"]),
        ("?status=failed&status=completed&page_size=2&page=2", ["--status", "failed", "--status", "completed",
                                                               "--page-size", "2", "--page", "2"]),
        ("?user=u1&kind=behave", ["--user", "u1", "--kind", "behave"]),
        ("?file=DOC3", ["--file", "DOC3"]),
        (f"?job_id={ids[2]}", ["--job-id", ids[2]]),
        ("?ended_after=2000-01-01&started_before=2999-01-01", ["--ended-after", "2000-01-01",
                                                               "--started-before", "2999-01-01"]),
    ]:
        got = w.get("/api/history" + web_q)
        assert got.status_code == 200 and got.headers["content-type"] == "application/json"
        cli = h.cli("history", "--json", *cli_args)
        assert cli.returncode == 0, cli.stderr
        assert got.json() == json.loads(cli.stdout), web_q
    # status: the same document as `status --json` (the same daemon over the same socket), the
    # figures that move with the clock aside
    cli = h.cli("status", "--json")
    api = w.get("/api/status").json()
    mine = json.loads(cli.stdout)
    moving = {"uptime_s", "slots", "counters", "redis_memory"}
    assert set(api) == set(mine)
    assert {k: v for k, v in api.items() if k not in moving} == {k: v for k, v in mine.items() if k not in moving}
    assert [(s["id"], s["state"]) for s in api["slots"]] == [(s["id"], s["state"]) for s in mine["slots"]]
    assert api["counters"]["succeeded"] == mine["counters"]["succeeded"] == 5
    if "redis_memory" in mine:  # used_bytes moves between the two readings
        assert api["redis_memory"]["policy"] == mine["redis_memory"]["policy"]
    # the overview answers JSON too when asked
    assert w.get("/", headers={"Accept": "application/json"}).json()["configured"] == 2


def test_secrets_in_payloads_are_redacted(h, pool):
    jid = h.submit("behave", payload={"file": doc(h, "a.doc"), "api_key": "sk-live-123", "nested": {"password": "pw1"}})
    h.wait_state(jid)
    w = web(pool)
    page = w.get(f"/jobs/{jid}").text
    assert "sk-live-123" not in page and "pw1" not in page and "a.doc" in page
    items = w.get("/api/history").json()["items"]
    assert items[0]["payload"]["api_key"] != "sk-live-123" and items[0]["payload"]["file"].endswith("/a.doc")
    # a host's own hook replaces the default
    page = web(pool, redact=lambda p: {"hidden": len(p)}).get(f"/jobs/{jid}").text
    assert "a.doc" not in page and "&#34;hidden&#34;: 3" in page.replace('"', "&#34;")


def test_actions_are_logged_and_counted(h, pool, caplog):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    jid = running_job(h, pool)
    w = TestClient(create_app(pool, auth=operator, registry=reg), follow_redirects=False)
    token = csrf_of(w.get("/").text)
    with caplog.at_level("INFO", logger="tender_pool.web"):
        w.post(f"/jobs/{jid}/cancel", data={"csrf": token}, headers={"Sec-Fetch-Site": "cross-site"})
        w.post(f"/jobs/{jid}/cancel", data={"csrf": token}, headers=SAME)
    msgs = [r.getMessage() for r in caplog.records]
    assert any(f"cancel_job {jid} by operator: signalled" in m for m in msgs), msgs
    assert reg.get_sample_value("tender_pool_web_actions_total", {"action": "cancel_job", "outcome": "ok"}) == 1
    assert reg.get_sample_value("tender_pool_web_actions_total", {"action": "cancel_job", "outcome": "refused"}) == 1
    assert "tender_pool_web_actions_total" in w.get("/metrics").text


def test_parse_markdown_job_shows_its_markdown_escaped(h, pool, jvm_build):
    sheet = h.tmp / "in" / "bidders.csv"
    sheet.write_text("bidder,price\nACME <script>alert(3)</script>,312.5\n", encoding="utf-8")
    job = pool.submit("u1", "parse_markdown", {"file": str(sheet)})
    h.wait_state(job.id, timeout=60)
    page = web(pool).get(f"/jobs/{job.id}").text
    assert "<h2>Markdown</h2>" in page and "312.5" in page
    assert "ACME &lt;script&gt;alert(3)&lt;/script&gt;" in page and "<script>alert(3)" not in page
    assert pool.markdown(job.id).strip() in page.replace("&lt;", "<").replace("&gt;", ">")


def test_scale_and_drain_through_the_local_socket(h, pool):
    w = web(pool)
    page = w.get("/").text
    assert 'action="/pool/scale"' in page and 'action="/pool/drain"' in page  # the socket is here
    token = csrf_of(page)
    assert w.post("/pool/scale", data={"csrf": token, "workers": "9"}, headers=SAME).status_code == 400
    r = w.post("/pool/scale", data={"csrf": token, "workers": "1"}, headers=SAME)
    assert r.status_code == 303
    wait_until(lambda: len(pool.status().slots) == 1, 20, what="scaled to 1")
    assert w.post("/pool/drain", data={"csrf": token}, headers=SAME).status_code == 303
    wait_until(lambda: all(s.pid is None for s in pool.status().slots), 20, what="drained")
    # a client without the daemon's socket (another host): no buttons, and the action is a 503
    from tender_pool.client import Client

    cfg = pool.config
    remote = Client(cfg.redis.url, cfg.redis.prefix, cfg.pool.queue)
    wr = web(remote)
    page = wr.get("/").text
    assert "/pool/drain" not in page
    assert wr.post("/pool/drain", data={"csrf": csrf_of(page)}, headers=SAME).status_code == 503
    remote.close()


def test_overview_shows_consumer_lag_and_active_runs(h, pool):
    assert pool.register_consumer_group("platform-db")
    run = pool.submit_run("u5", "behave", [{"key": "k", "payload": {"sleep": 30}}])
    wait_until(lambda: pool.status().runs_active == 1, 15, what="an active run")
    page = web(pool).get("/").text
    rows = page.split('<tbody id="consumers">')[1].split("</tbody>")[0]
    assert "<td>platform-db</td>" in rows
    lag = int(re.search(r"<td>platform-db</td><td>(\d+)</td>", rows).group(1))
    assert lag >= 2  # the run's job_queued and job_started at least, none consumed
    assert 'id="runs-active">(1)' in page and f'href="/runs/{run.id}"' in page
