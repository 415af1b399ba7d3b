"""The status socket under hostile and heavy use: a client that trickles its
request, clients that say nothing, a burst of 200 at once, and a config that points the socket at
someone's file."""

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import wait_until

from tender_pool.client.status_client import StatusUnavailable, control, request


def started(h, workers=1):
    d = h.daemon(workers=workers)
    d.wait_slots(workers)
    sock = str(h.tmp / "state-a" / "status.sock")
    wait_until(lambda: h.cli("status").returncode == 0, 15, what="healthy")
    return d, sock


def timed_request(sock, timeout=3.0):
    t0 = time.monotonic()
    reply = request(sock, timeout=timeout)
    return reply, time.monotonic() - t0


@pytest.mark.timeout(60)
def test_a_client_trickling_its_request_stalls_nobody(h):
    # Given a daemon, and a client that sends its request one byte every 0.8 s
    d, sock = started(h)
    body = b'{"version": 1, "op": "status"}'
    frame = len(body).to_bytes(4, "big") + body
    trickle = socket.socket(socket.AF_UNIX)
    trickle.connect(sock)
    stop = threading.Event()

    def drip():
        for b in frame:
            if stop.wait(0.8):
                return
            try:
                trickle.send(bytes([b]))
            except OSError:
                return  # the server gave up on it (its deadline): that is allowed

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    try:
        time.sleep(1.0)  # the trickle is well under way
        # When others ask for status and scale the pool meanwhile
        # Then each answers at once (before: every request timed out, `status` exited 2)
        for _ in range(3):
            reply, took = timed_request(sock)
            assert reply.ok and took < 1.0, took
        assert h.cli("status").returncode == 0
        res = control(sock, "scale", 2)
        assert res.ok, res
        d.wait_slots(2)
    finally:
        stop.set()
        trickle.close()
        t.join(5)
    assert d.stop() == 0


@pytest.mark.timeout(60)
def test_silent_connections_do_not_delay_others(h):
    # Given 15 clients that connect and never send anything
    d, sock = started(h)
    silent = []
    for _ in range(15):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        silent.append(s)
    try:
        # Then a status request right behind them answers at once (before: 1 s per silent client, 15 s)
        reply, took = timed_request(sock, timeout=10)
        assert reply.ok and took < 1.0, took
        # and the silent ones are cut off at their deadline, not held for ever
        silent[0].settimeout(10)
        t0 = time.monotonic()
        assert silent[0].recv(10) == b"" and time.monotonic() - t0 < 5
    finally:
        for s in silent:
            s.close()
    assert d.stop() == 0


@pytest.mark.timeout(90)
def test_200_concurrent_status_requests_all_succeed(h):
    # Given a daemon with two slots
    d, sock = started(h, workers=2)

    def one(_):
        try:
            r = request(sock)  # the CLI's own timeout (3 s)
            return "ok" if r.ok and r.status and r.status.configured == 2 else f"bad reply {r}"
        except StatusUnavailable as e:
            return str(e)

    # When 200 clients ask at the same moment
    barrier = threading.Barrier(200)

    def at_once(i):
        barrier.wait()
        return one(i)

    with ThreadPoolExecutor(200) as ex:
        results = list(ex.map(at_once, range(200)))
    # Then every one gets an answer (before: 23 of 200 failed with EAGAIN on a backlog of 16)
    failures = [r for r in results if r != "ok"]
    assert not failures, f"{len(failures)} of 200 failed: {failures[:3]}"
    assert d.stop() == 0


@pytest.mark.timeout(60)
def test_socket_path_at_a_regular_file_is_refused_and_the_file_kept(h):
    # Given a config whose status.socket names an existing regular file
    h.config()
    path = h.tmp / "state-a" / "status.sock"
    path.write_text("someone's notes\n")
    # When the daemon starts
    out = h.cli("run", timeout=30)
    # Then it refuses with a clear error (config exit 2) and the file is untouched (before: deleted)
    assert out.returncode == 2, out
    assert "status.socket" in out.stderr and "regular file" in out.stderr and "not a socket" in out.stderr, out.stderr
    assert path.read_text() == "someone's notes\n"

