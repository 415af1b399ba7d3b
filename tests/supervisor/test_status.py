"""`tender-pool status`: busy / idle / dead slots, queue figures, exit codes, the Redis-only view."""

import json
import os
import signal
import socket

import pytest
from conftest import wait_until

from tender_pool.client.status_client import request


def status(h, *args):
    out = h.cli("status", "--json", *args)
    return out.returncode, json.loads(out.stdout)


@pytest.mark.timeout(120)
def test_status_idle_busy_deferred_and_a_killed_slot(h, tmp_path):
    # Given a pool of three slots and an input file inside the roots
    roots = tmp_path / "in"
    roots.mkdir()
    doc = roots / "tender-42.docx"
    doc.write_bytes(b"x" * 10)
    d = h.daemon(workers=3, input_roots=[str(roots)])
    d.wait_slots(3)
    code, st = wait_until(lambda: (lambda r: r if r[1].get("idle") == 3 else None)(status(h)), 10, what="3 idle")
    assert code == 0 and st["configured"] == 3 and st["online"] == 3 and st["busy"] == 0 and st["offline"] == 0
    assert st["redis_ok"] is True and st["queue_depth"] == 0 and st["deferred"] == 0
    assert [s["state"] for s in st["slots"]] == ["idle"] * 3 and all(s["pid"] for s in st["slots"])

    # When two long jobs run, one for a user whose next job parks, one a dependency of another
    a = h.submit(kind="long", user="alice", payload={"sleep": 30, "file": str(doc)})
    b = h.submit(kind="long", user="bob", payload={"sleep": 30})
    wait_until(lambda: all(h.job(j).state.value == "running" for j in (a, b)), 10, what="2 running")
    parked_user = h.submit(user="alice")
    parked_dep = h.submit(user="carol", after=[b])
    wait_until(lambda: all(h.job(j).state.value == "waiting" for j in (parked_user, parked_dep)), 10, what="parked")
    c = h.submit(kind="long", user="dave", payload={"sleep": 30})
    wait_until(lambda: h.job(c).state.value == "running", 10, what="third running")
    queued = [h.submit(user=f"q{i}") for i in range(2)]

    # Then status shows three busy slots with their jobs, the queue, and the parked jobs
    code, st = wait_until(lambda: (lambda r: r if r[1]["busy"] == 3 else None)(status(h)), 10, what="3 busy")
    assert code == 0, st["problems"]
    # queue_depth is every unfinished job (the old pool's meaning), waiting = depth − busy; beside them
    # the precise parts
    assert (st["queue_depth"], st["waiting"]) == (7, 4), st
    assert (st["queued"], st["running"], st["delayed"], st["deferred"]) == (2, 3, 0, 2), st
    rows = {s["job_id"]: s for s in st["slots"]}
    ra = rows[a]
    assert ra["state"] == "busy" and ra["kind"] == "long" and ra["user"] == "alice" and ra["file"] == str(doc)
    assert ra["started_at"].endswith("Z") and ra["elapsed_s"] >= 0 and ra["heartbeat_age_s"] < 2
    assert ra["rss_bytes"] > 0 and ra["tree_rss_bytes"] > 0 and ra["heaviest"] == "python"
    assert ra["cpu_percent"] is not None and ra["tree_cpu_percent"] is not None
    # the slot's own Redis busy state names the job
    busy_key = h.k.busy(ra['id'])
    assert json.loads(h.r.get(busy_key))["job_id"] == a
    text = h.cli("status")
    assert text.returncode == 0 and "alice" in text.stdout and "tender-42.docx" in text.stdout
    assert "estimate" in text.stdout

    # When alice's slot is SIGKILLed
    os.kill(ra["pid"], signal.SIGKILL)
    # Then it is respawned (counted), its job goes back, and the new incarnation cleared the stale state
    code, st = wait_until(lambda: (lambda r: r if r[1]["counters"]["slot_restarts"] == 1 else None)(status(h)),
                          10, what="restart counted")
    assert st["counters"]["reclaimed"] >= 1
    (requeued,) = [x for x in map(json.loads, filter(lambda x: x.startswith("{"), d.logs().splitlines()))
                   if x["event"] == "requeued" and x["job_id"] == a]
    assert (requeued["kind"], requeued["user"], requeued["slot"], requeued["attempt"]) == ("long", "alice", ra["id"], 1)
    row = next(s for s in st["slots"] if s["id"] == ra["id"])
    assert row["pid"] != ra["pid"]
    def stale_gone():  # (the new incarnation may already run alice's job again: attempt 2)
        raw = h.r.get(busy_key)
        return raw is None or (lambda b: b["job_id"] != a or b["attempt"] > 1)(json.loads(raw))
    wait_until(stale_gone, 10, what="stale busy state cleared")

    # --redis: what Redis alone knows, from the host's heartbeat
    for j in (b, c):  # 30 s jobs hold every slot: make room for the queued ones (alice's still runs)
        assert h.cli("cancel", j).returncode == 0
    for j in queued:
        h.wait_state(j)
    code, st = status(h)
    out = h.cli("status", "--redis", "--json")
    view = json.loads(out.stdout)
    assert out.returncode == 0 and view["redis_ok"] and view["queue_depth"] == st["queue_depth"]
    (host,) = view["hosts"]
    assert host["host_id"] == f"ha-{h.prefix}" and len(host["slots"]) == 3
    # the slots' own busy states in Redis name exactly the jobs the daemon says are running
    wait_until(lambda: {x["job_id"] for x in json.loads(h.cli("status", "--redis", "--json").stdout)["busy"]}
               == {s["job_id"] for s in status(h)[1]["slots"] if s["job_id"]} != set(), 10, what="busy states")
    assert "host ha-" in h.cli("status", "--redis").stdout
    # a dead host's table expires with its heartbeat
    d.kill()
    wait_until(lambda: json.loads(h.cli("status", "--redis", "--json").stdout)["hosts"] == [], 10,
               what="host table expired")


@pytest.mark.timeout(60)
def test_an_idle_slot_dying_fast_three_times_is_crash_looping(h, tmp_path):
    # Given a pool of two idle slots
    d = h.daemon(workers=2)
    d.wait_slots(2)
    sock = str(tmp_path / "state-a" / "status.sock")
    wait_until(lambda: status(h)[0] == 0, 15, what="healthy")
    victim = request(sock).status.slots[0].id

    def victim_row():
        return next(s for s in request(sock).status.slots if s.id == victim)

    # When it is killed within seconds of each spawn, again and again (the first kill may hit a slot
    # that lived longer than a fast death's limit)
    for kills in range(1, 5):
        pid = wait_until(lambda: (lambda r: r.pid if r.state in ("idle", "starting") and r.pid else None)(victim_row()),
                         10, what="victim up")
        os.kill(pid, signal.SIGKILL)
        row = wait_until(lambda: (lambda r: r if r.pid != pid else None)(victim_row()), 10, interval=0.005,
                         what="victim reaped")
        if row.state == "crash-looping":
            break
    # Then it shows crash-looping (not merely offline) after the third fast death, named in the
    # problems: degraded
    assert row.state == "crash-looping" and kills in (3, 4), (row, kills)
    reply = request(sock)
    assert f"{victim} crash-looping" in reply.status.problems, reply.status.problems
    # and healthy again once it is back
    wait_until(lambda: status(h)[0] == 0, 15, what="healthy again")


def test_unreachable_exit_2_with_json_and_redis_down_degraded(h, tmp_path):
    cfg = h.config()
    sock = tmp_path / "state-a" / "status.sock"
    code, st = status(h)
    assert code == 2 and st["error"] and str(sock) in st["error"] and st["configured"] == 2 and st["slots"] == []
    assert h.cli("status").returncode == 2
    # a stale socket file (a SIGKILLed daemon's) is unlinked at start; the daemon then answers
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    d = h.daemon()
    d.wait_slots(2)
    wait_until(lambda: status(h)[0] == 0, 10, what="healthy")
    assert oct(os.stat(sock).st_mode & 0o777) == "0o660"
    # the protocol: versioned, read requests only, size-capped
    from tender_pool.client.status_protocol import REQUEST_CAP
    assert request(str(sock), op="status").ok
    bad = request(str(sock), op="drain")
    assert not bad.ok and "unknown request" in bad.error
    v2 = b'{"version": 2, "op": "status"}'
    for frame in (len(v2).to_bytes(4, "big") + v2, (REQUEST_CAP + 1).to_bytes(4, "big")):
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(3)
        c.connect(str(sock))
        c.sendall(frame)
        reply = c.recv(4096)
        c.close()
        assert b"not supported" in reply if b'"version": 2' in frame else reply == b""
    assert status(h)[0] == 0  # still serving
    # a second daemon (another host_id) on the same socket is refused
    other = h.tmp / "b.toml"
    other.write_text(cfg.read_text().replace(f'host_id = "ha-{h.prefix}"', f'host_id = "hb-{h.prefix}"'))
    out = h.cli("run", name="b")
    assert out.returncode == 2 and "status.socket" in out.stderr and "live daemon" in out.stderr
    # Redis down: degraded, still valid JSON
    h.redis.stop()
    code, st = status(h)
    assert code == 1 and st["redis_ok"] is False and st["queue_depth"] is None
    assert "redis unreachable" in st["problems"]
    h.redis.start()
    wait_until(lambda: status(h)[0] == 0, 15, what="healthy after Redis is back")
    assert d.stop() == 0
    assert not sock.exists()
    assert status(h)[0] == 2


def test_status_watch_refreshes_in_place_until_interrupted(h):
    import signal as _signal
    import subprocess as _sp
    from conftest import TENDER_POOL
    d = h.daemon(workers=1)
    d.wait_slots(1)
    wait_until(lambda: h.cli("status").returncode == 0, 15, what="healthy status")
    # (^C as a terminal sends it: SIGINT at its default, not ignored as a run in the background inherits it)
    p = _sp.Popen([TENDER_POOL, "status", "--watch", "--interval", "0.3", "-c", str(h.tmp / "a.toml")],
                  stdout=_sp.PIPE, text=True, env=h.env(),
                  preexec_fn=lambda: _signal.signal(_signal.SIGINT, _signal.SIG_DFL))
    # Interrupt once three frames are out (a fixed sleep races a slow start on a loaded machine)
    lines: list[str] = []
    import threading as _th
    reader = _th.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
    reader.start()
    wait_until(lambda: sum("● tender-pool" in x for x in lines) >= 3, 30, what="three frames")
    p.send_signal(_signal.SIGINT)
    p.wait(timeout=20)
    reader.join(10)
    out = "".join(lines)
    # (click drops the clear-screen codes when stdout is not a terminal; each frame starts with ●)
    frames = out.split("● tender-pool")[1:]
    assert len(frames) >= 3, out  # redrawn several times
    assert all("slots" in f and "1 configured" in f for f in frames)
    assert p.returncode == 0  # the last frame's health
