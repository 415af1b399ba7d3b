"""The partition tool (tests/support/proxy.py) itself: it forwards, black-holes without closing,
lets the queued traffic through on resume, and cuts every connection at once."""

from __future__ import annotations

import socket
import time

import pytest
import redis


@pytest.mark.timeout(30)
def test_proxy_forwards_pauses_resumes_and_cuts(redis_server, make_proxy):
    # Given a client that reaches the tests' Unix-socket Redis only through the proxy
    proxy = make_proxy(redis_server.sock)
    c = redis.Redis.from_url(proxy.url, socket_timeout=0.5, retry=None)
    assert c.set("k", "1") and c.get("k") == b"1" and proxy.forwarded > 0
    assert proxy.connections == 1
    # When it is paused: a call times out (nothing answers, nothing is refused or closed) ...
    proxy.pause()
    t0 = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        c.incr("n")
    assert 0.4 < time.monotonic() - t0 < 2
    # ... the connection is still open, and a new one is accepted but gets no answer either
    assert proxy.connections >= 1
    c2 = redis.Redis.from_url(proxy.url, socket_timeout=0.3, socket_connect_timeout=0.3, retry=None)
    with pytest.raises(redis.TimeoutError):
        c2.ping()
    # ... and the command sent into the black hole did not reach Redis yet
    assert redis_server.client().get("n") is None
    # When it resumes: what was queued reaches Redis (a healed partition), and new calls work
    proxy.resume()
    wait = time.monotonic() + 5
    while redis_server.client().get("n") is None and time.monotonic() < wait:
        time.sleep(0.02)
    assert redis_server.client().get("n") == b"1"
    c3 = redis.Redis.from_url(proxy.url, socket_timeout=1, retry=None)
    assert c3.incr("n") == 2
    # When it cuts: every open connection is reset at once (seen on a raw socket: redis-py would
    # reconnect transparently)
    raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
    raw.sendall(b"PING\r\n")
    assert raw.recv(100) == b"+PONG\r\n"
    proxy.cut()
    assert proxy.connections == 0
    try:
        assert raw.recv(100) == b""
    except ConnectionResetError:
        pass
    # and reconnecting through it works again
    assert c3.ping() and redis.Redis.from_url(proxy.url, socket_timeout=1).ping()


@pytest.mark.timeout(30)
def test_proxy_partitioned_block_and_stop(redis_server, make_proxy):
    proxy = make_proxy(redis_server.sock)
    c = redis.Redis.from_url(proxy.url, socket_timeout=0.3, retry=None)
    assert c.ping()
    t0 = time.monotonic()
    with proxy.partitioned(0.5):
        with pytest.raises(redis.TimeoutError):
            c.ping()
    assert time.monotonic() - t0 >= 0.5 and not proxy.paused
    c = redis.Redis.from_url(proxy.url, socket_timeout=1, retry=None)
    assert c.ping()
    proxy.stop()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(proxy.url, socket_timeout=1, retry=None).ping()
