"""redis.url = "embedded": a private redis-server the supervisor starts, keeps, and stops."""


import psutil
import pytest
import redis

from conftest import wait_until


def redis_children(d):
    try:
        return [c for c in psutil.Process(d.pid).children() if c.name() == "redis-server"]
    except psutil.Error:
        return []


@pytest.mark.timeout(60)
def test_embedded_redis_lives_and_dies_with_the_daemon(h):
    cfg = h.config(workers=2)
    cfg.write_text(cfg.read_text().replace(f'url = "{h.redis.url}"', 'url = "embedded"'))
    d = h.daemon()
    d.wait_slots(2)
    state = h.tmp / "state-a"
    sock = state / "redis" / "redis.sock"
    [srv] = wait_until(lambda: redis_children(d), 10, what="embedded redis-server")
    r = redis.Redis(unix_socket_path=str(sock))
    assert r.config_get("appendonly")["appendonly"] == "yes"
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    assert r.config_get("port")["port"] == "0"  # no TCP listener
    # a job through the CLI, which finds the same server through the same config
    out = h.cli("submit", "--user", "e", "--kind", "behave", "--wait", "--timeout", "15")
    assert out.returncode == 0, out.stderr
    # a slot crash mid-job: the orphan sweep kills the job's leftovers, not our Redis
    j = h.submit(kind="long", payload={"sleep": 30, "sleep_once": True, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    slot = psutil.Process(psutil.Process(int(__import__("json").loads((h.records / f"{j}.1.start").read_text())["pid"])).ppid())
    slot.kill()
    h.wait_state(j, timeout=15)
    assert srv.is_running() and srv.status() != psutil.STATUS_ZOMBIE
    assert [c.pid for c in redis_children(d)] == [srv.pid]
    # the server itself dies: the supervisor starts a new one, work goes on
    srv.kill()
    wait_until(lambda: (lambda c: c and c[0].pid != srv.pid)(redis_children(d)), 15, what="restarted redis-server")
    def answers():
        try:
            return r.ping()
        except redis.RedisError:
            return False
    wait_until(answers, 10, what="the new server to answer")
    h.wait_state(h.submit(user="after"), timeout=20)
    assert (state / "redis" / "appendonlydir").is_dir()
    [srv2] = redis_children(d)
    # stopped on exit, nothing of ours left running
    assert d.stop() == 0
    assert not psutil.pid_exists(srv2.pid) or srv2.status() == psutil.STATUS_ZOMBIE
    left = [p for p in psutil.process_iter(["cmdline"]) if str(state) in " ".join(p.info["cmdline"] or [])]
    assert left == [], left
