"""sd_notify: READY only once slots are up and Redis answered, STATUS figures, RELOADING/STOPPING in
order, and WATCHDOG=1 pings that stop while the housekeeper thread is wedged."""

import os
import signal
import time

import pytest

from conftest import wait_until
from .fake_systemd import NotifySocket


@pytest.fixture
def ns(tmp_path):
    s = NotifySocket(tmp_path / "notify.sock")
    yield s
    s.close()


def start(h, ns, watchdog_s=None, **kw):
    d = h.daemon(start=False, **kw)
    d.env = ns.env(d.env, watchdog_s)
    return d.start()


def test_datagrams_in_order(h, ns):
    # Given Redis down at start: the daemon waits and says so, but is not READY
    h.config(workers=2)
    h.redis.stop()
    d = start(h, ns, watchdog_s=1.5)
    wait_until(lambda: any("waiting for Redis" in m.get("STATUS", "") for m in ns.messages()), 10, what="waiting STATUS")
    time.sleep(1.0)
    assert "READY" not in ns.kinds()
    # When Redis comes up: READY=1, sent with every slot reported idle
    h.redis.start()
    wait_until(lambda: "READY" in ns.kinds(), 15, what="READY=1")
    ready = next(m for m in ns.messages() if "READY" in m)
    assert ready["READY"] == "1" and ready["STATUS"].startswith("0 busy, 2 idle of 2 slots"), ready
    assert len(d.slot_pids()) == 2
    # STATUS= follows the slots and the queue
    j = h.submit(payload={"sleep": 1.0})
    wait_until(lambda: any(m.get("STATUS", "").startswith("1 busy, 1 idle") for m in ns.messages()), 10, what="busy STATUS")
    h.wait_state(j)
    wait_until(lambda: any("queue 0" in m.get("STATUS", "") for m in ns.messages()), 10, what="queue figure")
    # WATCHDOG=1 about three times per window
    n = ns.kinds().count("WATCHDOG")
    time.sleep(1.6)
    assert ns.kinds().count("WATCHDOG") - n >= 2
    # SIGHUP: RELOADING=1 (with MONOTONIC_USEC) then READY=1
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: ns.kinds().count("READY") == 2, 10, what="READY after reload")
    # SIGTERM: STOPPING=1, and the daemon exits cleanly
    assert d.stop() == 0
    kinds = [k for k in ns.kinds() if k != "WATCHDOG"]
    assert kinds.count("READY") == 2 and kinds.count("RELOADING") == 1 and kinds.count("STOPPING") == 1
    r1, rl, r2, st = (kinds.index("READY"), kinds.index("RELOADING"), len(kinds) - 1 - kinds[::-1].index("READY"),
                      kinds.index("STOPPING"))
    assert r1 < rl < r2 < st, kinds
    reloading = next(m for m in ns.messages() if "RELOADING" in m)
    assert int(reloading["MONOTONIC_USEC"]) > 0
    # nothing after STOPPING claims readiness again
    assert "READY" not in kinds[st:]


def test_notify_variables_do_not_reach_jobs(h, ns):
    # (only the supervisor may speak to systemd; NotifyAccess=main would drop a job's datagrams anyway)
    tail = """
[handlers.envdump]
command = ["/bin/sh", "-c", "cat >/dev/null; printf '{\\"seen\\": \\"%s|%s\\"}' \\"$NOTIFY_SOCKET\\" \\"$WATCHDOG_USEC\\""]
timeout = 10
"""
    start(h, ns, watchdog_s=5, workers=1, tail=tail)
    wait_until(lambda: "READY" in ns.kinds(), 15, what="READY=1")
    job = h.wait_state(h.submit(kind="envdump"))
    assert job.result == {"value": {"seen": "|"}}, job.result


def watchdog_times(ns):
    return [t for t, m in ns.timed() if "WATCHDOG" in m]


@pytest.mark.timeout(60)
def test_watchdog_stops_while_housekeeper_is_wedged(h, ns):
    # Given a 2 s watchdog, and Redis calls that hang instead of failing (a long socket_timeout; a
    # SIGSTOPped server accepts connections but never answers: the housekeeper's call blocks)
    h.config(workers=1, heartbeat=5)
    cfg = h.tmp / "a.toml"
    cfg.write_text(cfg.read_text().replace("socket_timeout = 3", "socket_timeout = 30"))
    d = start(h, ns, watchdog_s=2.0)
    wait_until(lambda: "READY" in ns.kinds(), 15, what="READY=1")
    wait_until(lambda: len(watchdog_times(ns)) >= 3, 10, what="pings")
    # When the housekeeper wedges
    os.kill(h.redis.proc.pid, signal.SIGSTOP)
    try:
        t_stop = time.monotonic()
        time.sleep(6.0)
        # the main loop is alive: it still answers a reload...
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: ns.kinds().count("READY") == 2, 5, what="READY after reload while wedged")
        t_cont = time.monotonic()
    finally:
        os.kill(h.redis.proc.pid, signal.SIGCONT)
    # Then no ping came from one window after the housekeeper's last turn until the wedge ended. That
    # turn may start up to 1 s after the SIGSTOP (it reaps every min(1 s, heartbeat), and a turn
    # that finds nothing due makes no Redis call); 0.5 s more for a loaded machine's scheduling.
    # The 2.5 s left would hold three or four pings (every watchdog/3) were the wedge missed.
    silent = [t for t in watchdog_times(ns) if t_stop + 2.0 + 1.0 + 0.5 < t < t_cont]
    assert silent == [], f"{len(silent)} pings while the housekeeper was wedged"
    # ...and they resume once the housekeeper moves again
    n = len(watchdog_times(ns))
    wait_until(lambda: len(watchdog_times(ns)) > n + 1, 40, what="pings to resume")
    assert d.proc.poll() is None
    assert d.stop() == 0
