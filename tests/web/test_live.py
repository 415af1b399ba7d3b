"""Server-sent events against a real uvicorn on loopback, and the standalone `tender-pool web`.

A run's stream dropped mid-way and resumed with Last-Event-ID delivers every event once, in the
stream's own order; ten viewers of the overview share one status reader; the standalone server
refuses what it must and stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import httpx
import pytest

from conftest import TENDER_POOL, wait_until
from tender_pool.web import create_app, local_only
from .webhelp import Server, client_for, free_port


@pytest.fixture
def pool(h):
    d = h.daemon(workers=2)
    d.wait_slots(2)
    c = client_for(h)
    wait_until(lambda: c.status().online == 2, 15, what="2 slots online")
    yield c
    c.close()


def sse(lines, stop_after: int | None = None) -> list[dict]:
    """Parse SSE messages from an iterator of lines; stop after ``stop_after`` messages."""
    out: list[dict] = []
    cur: dict = {}
    for line in lines:
        if line == "":
            if "data" in cur:
                out.append(cur)
                if stop_after is not None and len(out) >= stop_after:
                    return out
            cur = {}
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        cur[field] = value[1:] if value.startswith(" ") else value
    return out


def test_run_events_resume_with_last_event_id_every_event_once(h, pool):
    items = [{"key": f"k{i}", "payload": {"sleep": 0.25, "progress": [{"progress": 0.5, "message": f"half {i}"}]}}
             for i in range(6)]
    run = pool.submit_run("u1", "behave", items)
    stream_key = h.k.run_events(run.id)
    with Server(create_app(pool, auth=local_only)) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        url = f"/runs/{run.id}/events"
        # first connection: the snapshot and a few events, then the connection is dropped
        with http.stream("GET", url) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-store"
            first = sse(r.iter_lines(), stop_after=4)
        assert first[0]["event"] == "snapshot"
        # the run goes on while nobody listens
        wait_until(lambda: pool.run(run.id).counts.completed >= 3, 30, what="3 jobs done")
        with http.stream("GET", url, headers={"Last-Event-ID": first[-1]["id"]}) as r:
            rest = sse(r.iter_lines())  # the server ends the stream after run_finished
        assert rest and rest[-1]["event"] == "run_finished"
        assert rest[0]["event"] != "snapshot"  # resumed, not restarted
        # after the end, a reconnect is told to stop (204: EventSource does not retry)
        assert http.get(url, headers={"Last-Event-ID": rest[-1]["id"]}).status_code == 204
        # ?since= is the same resume (our script's reconnect after going offline)
        again = http.get(url, params={"since": first[-1]["id"]}, headers={"Accept": "text/event-stream"})
        assert [m["id"] for m in sse(again.text.splitlines())] == [m["id"] for m in rest]
    got = [m["id"] for m in first[1:] + rest]
    snapshot_id = first[0]["id"]
    stored = [i.decode() for i, _ in h.r.xrange(stream_key) if _after(i.decode(), snapshot_id)]
    assert got == stored  # every event once, in order, none lost across the drop
    assert len(got) == len(set(got))
    kinds = [m["event"] for m in first[1:] + rest]
    done_before = json.loads(first[0]["data"])["counts"]["completed"]
    assert done_before < 6 and kinds.count("job_completed") == 6 - done_before and "job_progress" in kinds
    for m in first + rest:
        assert json.loads(m["data"])["id"] == m["id"]


def _after(a: str, b: str) -> bool:
    return tuple(map(int, a.split("-"))) > tuple(map(int, b.split("-")))


def test_ten_viewers_share_one_status_reader(h, pool):
    app = create_app(pool, auth=local_only, interval=0.25)
    hub = app.dashboard.hub
    got: list[int] = []
    stop = threading.Event()

    def viewer(url: str) -> None:
        n = 0
        with httpx.Client(timeout=10) as c, c.stream("GET", url + "/live/status") as r:
            for line in r.iter_lines():
                if line.startswith("event: status"):
                    n += 1
                if stop.is_set():
                    break
        got.append(n)

    with Server(app) as srv:
        threads = [threading.Thread(target=viewer, args=(srv.url,)) for _ in range(10)]
        for t in threads:
            t.start()
        wait_until(lambda: hub.viewers == 10, 10, what="10 viewers")
        h.submit("behave", payload={"sleep": 0.5})  # something changes
        reads0, t0 = hub.reads, time.monotonic()
        time.sleep(2.0)
        reads, elapsed = hub.reads - reads0, time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join(10)
        wait_until(lambda: hub.viewers == 0, 10, what="viewers gone")
        # one reader at 4 Hz, not ten: at most a reading per interval (plus one in flight)
        assert reads <= elapsed / 0.25 + 2, reads
        assert reads >= 3
        wait_until(lambda: hub._task is None, 5, what="reader stopped")
        after = hub.reads
        time.sleep(0.6)
        assert hub.reads == after  # nobody watches: nothing is read
    assert len(got) == 10 and all(n >= 2 for n in got), got


def test_standalone_server_token_login_and_clean_stop(h, pool, tmp_path):
    token = "t0ken-" + "x" * 20
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    port = free_port()
    cfg = str(h.tmp / "a.toml")
    # refused at once: a network address without a token, a token too short
    bad = subprocess.run([TENDER_POOL, "web", "-c", cfg, "--listen", f"0.0.0.0:{port}"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "--token-file is required" in bad.stderr
    proc = subprocess.Popen([TENDER_POOL, "web", "-c", cfg, "--listen", f"127.0.0.1:{port}", "--token-file", str(tf)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=h.env(), start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(base + "/api/status", timeout=2).status_code in (200, 401)
            except httpx.HTTPError:
                return False
        wait_until(up, 20, what="tender-pool web to listen")
        assert httpx.get(base + "/api/status").status_code == 401  # loopback is not enough with a token
        page = httpx.get(base + "/")
        assert page.status_code == 401 and 'action="/login"' in page.text
        assert page.headers["www-authenticate"] == "Bearer"
        ok = httpx.get(base + "/api/status", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and ok.json()["configured"] == 2
        assert httpx.get(base + "/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        with httpx.Client(base_url=base, follow_redirects=False) as c:
            assert c.post("/login", data={"token": token}, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
            assert c.post("/login", data={"token": "nope"}, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 401
            r = c.post("/login", data={"token": token}, headers={"Sec-Fetch-Site": "same-origin"})
            assert r.status_code == 303
            cookie = r.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie and token not in cookie
            assert c.get("/").status_code == 200  # the session cookie
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=20)[0].decode()
    assert proc.returncode == 0, out
