"""Sentinel, the connection's part: a ``redis+sentinel://`` URL reaches the primary,
follows a switch within a second, and a write acknowledged with ``replicas`` survives a failover.

Every test runs a real primary, replicas and three Sentinels (tests/support/sentinel.py).
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from conftest import wait_until

from tender_pool.store.fastlane import FastLane
from tender_pool.store.replication import NotReplicated, wait_replicated
from tender_pool.store.sentinel import PrimaryMoved
from tender_pool.store.connection import connect

APPEND = "redis.call('RPUSH', KEYS[1], ARGV[1]) return redis.call('LLEN', KEYS[1])"


def port_of(lane: FastLane) -> int:
    return int(lane.call("CONFIG", "GET", "port")[b"port"])


class Writer:
    """A thread appending 0, 1, 2, … to a list through a FastLane with ``replicas``, as fast as it
    can; remembers which appends were acknowledged, which refused, and which server answered when."""

    def __init__(self, url: str, replicas: int):
        self.lane = FastLane(connect(url, 3))
        self.replicas = replicas
        self.acked: list[int] = []
        self.refused: list[int] = []  # NotReplicated
        self.errors: list[str] = []
        self.ports: list[tuple[float, int]] = []  # (monotonic time sent, port that answered)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Writer":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(10)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                self.lane.script(APPEND, ["log"], [i], replicas=self.replicas, timeout_ms=300)
                self.acked.append(i)
            except NotReplicated:  # it reached a primary, which could not get it replicated
                self.refused.append(i)
            except redis.RedisError as e:
                self.errors.append(repr(e))
                time.sleep(0.01)
                i += 1
                continue
            self.ports.append((sent, int(self.lane.conn.port)))  # when sent, and to which server
            i += 1

    def first_on(self, port: int) -> float:
        return next(t for t, p in self.ports if p == port)


class Poller(Writer):
    """A thread asking a redis-py client which server answers it, every 10 ms."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self.ports = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                self.ports.append((sent, int(self.client.config_get("port")["port"])))
            except redis.RedisError:
                pass
            time.sleep(0.01)


@pytest.mark.timeout(60)
def test_a_daemon_on_a_sentinel_url_runs_jobs(sh, sentinels):
    # Given a daemon whose only Redis address is the Sentinel URL (before: its slots' FastLane
    # connected lazily to localhost:6379 and no job ever ran)
    sh.daemon(workers=2)
    # When jobs are submitted through the same URL
    jids = [sh.submit("noop", user=f"u{i}") for i in range(4)]
    # Then they run, and their records are on the primary the Sentinels name
    for jid in jids:
        sh.wait_state(jid, timeout=20)
    direct = sentinels.nodes[sentinels.primary_port()].client()
    assert all(direct.exists(sh.k.job(jid)) for jid in jids)


@pytest.mark.timeout(60)
def test_planned_failover_lane_and_client_follow_within_a_second_and_acked_writes_survive(sentinels):
    # Given a writer acknowledging each append only once 1 replica has it, and a redis-py client
    # polling which server answers it
    client = connect(sentinels.url, 3)
    with Writer(sentinels.url, replicas=1) as w, Poller(client) as poll:
        wait_until(lambda: len(w.acked) > 50, 10, what="writes before the failover")
        # When the Sentinels are asked for a planned failover
        old, new = sentinels.failover()
        switched = sentinels.switch_time(new)
        wait_until(lambda: any(p == new for _, p in w.ports), 5, what="a write on the new primary")
        wait_until(lambda: int(client.config_get("port")["port"]) == new, 5, what="the client on the new primary")
        time.sleep(0.3)
    # Then the lane reached the new primary within a second of +switch-master, and counted the switch
    lag = w.first_on(new) - switched
    print(f"lane on the new primary {lag:.3f} s after +switch-master")
    assert lag < 1.0, lag
    assert w.lane.switches == 1
    client_lag = poll.first_on(new) - switched
    print(f"client on the new primary {client_lag:.3f} s after +switch-master")
    assert client_lag < 1.0, client_lag
    # And every acknowledged append is on the new primary (the old one's unreplicated writes were
    # refused with NotReplicated, never acknowledged)
    on_new = {int(x) for x in sentinels.nodes[new].client().lrange("log", 0, -1)}
    lost = [i for i in w.acked if i not in on_new]
    print(f"acknowledged {len(w.acked)}, refused {len(w.refused)}, errors {len(w.errors)}, lost {len(lost)}")
    assert not lost, f"acknowledged but lost: {lost[:20]}"


@pytest.mark.timeout(60)
def test_killed_primary_lane_follows_within_a_second_and_acked_writes_survive(make_sentinels):
    # Given a primary with two replicas (so WAIT 1 can still be met after one is promoted)
    sentinels = make_sentinels(replicas=2)
    with Writer(sentinels.url, replicas=1) as w:
        wait_until(lambda: len(w.acked) > 50, 10, what="writes before the kill")
        # When the primary is SIGKILLed and a replica promoted
        old, new = sentinels.kill_primary()
        switched = sentinels.switch_time(new)
        wait_until(lambda: any(p == new for _, p in w.ports), 5, what="a write on the new primary")
        time.sleep(0.3)
    lag = w.first_on(new) - switched
    print(f"lane on the new primary {lag:.3f} s after +switch-master; errors {len(w.errors)}")
    # Then writes flow again within a second of the switch, and nothing acknowledged is lost
    assert lag < 1.0, lag
    on_new = {int(x) for x in sentinels.nodes[new].client().lrange("log", 0, -1)}
    assert not [i for i in w.acked if i not in on_new]


@pytest.mark.timeout(60)
def test_a_lane_that_reaches_a_replica_retries_on_the_primary_at_once(sentinels):
    # Given a lane whose cached view names the replica as primary (as after a demotion it has not
    # yet seen: its writes get READONLY)
    client = connect(sentinels.url, 3)
    lane = FastLane(client)
    primary = sentinels.primary_port()
    replica = next(p for p in sentinels.nodes if p != primary)
    manager = client.connection_pool.sentinel_manager
    manager._cached, manager._at = ("127.0.0.1", replica), time.monotonic() + 3600
    # When it writes
    n = lane.script(APPEND, ["ro"], ["x"])
    # Then the READONLY reply re-resolved the primary and the write ran there, once
    assert n == 1 and port_of(lane) == primary
    assert sentinels.nodes[primary].client().lrange("ro", 0, -1) == [b"x"]
    # And a redis-py client in the same state sees PrimaryMoved (a ConnectionError: its retry
    # reconnects), never a plain READONLY ResponseError
    manager._cached, manager._at = ("127.0.0.1", replica), time.monotonic() + 3600
    client.connection_pool.disconnect()
    c = connect(sentinels.url, 3)
    m2 = c.connection_pool.sentinel_manager
    m2._cached, m2._at = ("127.0.0.1", replica), time.monotonic() + 3600
    conn = c.connection_pool.get_connection()
    conn.send_command("SET", "k", "v")
    with pytest.raises(PrimaryMoved):
        conn.read_response()
    assert m2._cached is None  # the next use asks the Sentinels again


@pytest.mark.timeout(30)
def test_not_replicated_when_too_few_replicas_acknowledge(redis_server):
    # Given a server with no replica at all
    client = connect(redis_server.url, 3)
    lane = FastLane(client)
    # When a write asks for one replica's acknowledgement
    t0 = time.monotonic()
    with pytest.raises(NotReplicated) as e:
        lane.script(APPEND, ["l"], ["a"], replicas=1, timeout_ms=200)
    # Then it is refused after the timeout, carrying what the write returned on the primary
    assert 0.15 < time.monotonic() - t0 < 2
    assert (e.value.acked, e.value.wanted, e.value.result) == (0, 1, 1)
    assert "0 of 1 replicas within 200 ms" in str(e.value)
    # And the lane stays in step (both replies were read): the next call answers normally
    assert lane.call("LLEN", "l") == 1
    assert lane.script(APPEND, ["l"], ["b"]) == 2
    # The redis-py path: the write and WAIT share one pipeline (one connection)
    assert wait_replicated(client, 0, 200, lambda p: p.rpush("l", "c")) == [3]
    with pytest.raises(NotReplicated) as e2:
        wait_replicated(client, 1, 200, lambda p: p.rpush("l", "d"))
    assert e2.value.result == [4]


@pytest.mark.timeout(30)
def test_wait_is_met_with_a_replica(sentinels):
    client = connect(sentinels.url, 3)
    lane = FastLane(client)
    assert lane.script(APPEND, ["w"], ["a"], replicas=1, timeout_ms=2000) == 1
    script = client.register_script(APPEND)
    assert wait_replicated(client, 1, 2000, lambda p: script(keys=["w"], args=["b"], client=p)) == [2]



@pytest.mark.timeout(60)
def test_a_write_after_a_replica_was_promoted_is_refused_not_acknowledged(make_sentinels):
    # Given a primary with two replicas and a lane whose writes need 1 replica's acknowledgement
    # (before: WAIT 1, which the replica still following the old primary satisfied)
    sentinels = make_sentinels(replicas=2)
    lane = FastLane(connect(sentinels.url, 3))
    assert lane.script(APPEND, ["log"], ["before"], replicas=1, timeout_ms=1000) == 1
    primary = sentinels.primary_port()
    promoted, follower = [p for p in sentinels.nodes if p != primary]
    # When one replica is promoted, as a failover's first step does (REPLICAOF NO ONE), while the
    # Sentinels still name the old primary and the other replica still follows it
    sentinels.node(promoted).client().execute_command("REPLICAOF", "NO", "ONE")
    # Then a write to the old primary is refused (every replica Sentinel could promote must have
    # it, and the promoted one no longer can), though the follower has it
    with pytest.raises(NotReplicated) as e:
        lane.script(APPEND, ["log"], ["after"], replicas=1, timeout_ms=300)
    assert (e.value.acked, e.value.wanted) == (1, 2)
    assert sentinels.node(follower).client().lrange("log", 0, -1) == [b"before", b"after"]
    assert sentinels.node(promoted).client().lrange("log", 0, -1) == [b"before"]
    # And the redis-py path (submit) too
    with pytest.raises(NotReplicated):
        wait_replicated(connect(sentinels.url, 3), 1, 300, lambda p: p.rpush("log", "after2"))


@pytest.mark.timeout(60)
def test_a_dead_replica_stalls_acknowledgements_until_sentinel_marks_it_down(make_sentinels):
    # The cost of waiting for every replica Sentinel could promote, and (right after the set is
    # ready, while a Sentinel may still list a replica as not linked) that both are waited for.
    # Given a primary with two replicas and writes needing 1 replica's acknowledgement
    sentinels = make_sentinels(replicas=2)
    lane = FastLane(connect(sentinels.url, 3))
    lane.script(APPEND, ["log"], ["x"], replicas=1, timeout_ms=1000)
    replica = next(p for p in sentinels.nodes if p != sentinels.primary_port())
    # When one replica dies
    sentinels.node(replica).kill()
    t0 = time.monotonic()
    refused = 0
    while True:  # Then writes are refused until Sentinel marks it s_down (down-after-milliseconds) …
        try:
            lane.script(APPEND, ["log"], ["y"], replicas=1, timeout_ms=100)
            break
        except NotReplicated:
            refused += 1
    stall = time.monotonic() - t0
    print(f"acknowledgements stalled {stall:.2f} s ({refused} refused) after a replica died; "
          f"down-after-milliseconds {sentinels_down_after()} ms")
    # … and acknowledged again (by the replica left) once it has, a resolution interval later
    assert refused >= 1
    assert stall < sentinels_down_after() / 1000 + 3


def sentinels_down_after() -> int:
    from support.sentinel import DOWN_AFTER_MS

    return DOWN_AFTER_MS


@pytest.mark.timeout(30)
def test_a_dead_sentinel_does_not_slow_the_resolution(sentinels):
    # Given a Sentinel URL whose first Sentinel is not running (nothing listens on its port)
    from support.sentinel import free_port

    dead = free_port()
    url = sentinels.url.replace("redis+sentinel://", f"redis+sentinel://127.0.0.1:{dead},")
    # When a client and a lane reach the primary through it
    t0 = time.monotonic()
    client = connect(url, 3)
    assert client.ping()
    lane = FastLane(client)
    assert lane.call("PING")
    took = time.monotonic() - t0
    # Then the refused Sentinel cost one refused connection, not redis-py's 10 retries (~4 s)
    assert took < 0.5, took


def _replica(port: int, role: str = "slave", link: str = "ok", master: int | None = 1, flags: str = "slave",
             sdown: bool = False) -> dict:
    """One entry of SENTINEL REPLICAS as redis-py parses it (the fields the count reads)."""
    return {"port": port, "flags": flags, "role-reported": role, "master-link-status": link,
            "master-host": "127.0.0.1" if master else "?", "master-port": master or 0,
            "is_sdown": sdown, "is_odown": False}


def test_replicas_to_wait_for_counts_every_replica_sentinel_could_promote():
    from tender_pool.store.sentinel import _replicas_to_wait_for

    p = ("127.0.0.1", 1)
    # Steady state: both replicas
    assert _replicas_to_wait_for([_replica(2), _replica(3)], p) == 2
    # Mid-failover, as a Sentinel that saw the promotion lists them (views seen in a planned
    # failover): the promoted one still counts, so the old primary's writes are refused
    assert _replicas_to_wait_for([_replica(2, role="master", flags="slave,promoted"), _replica(3)], p) == 2
    assert _replicas_to_wait_for([_replica(2, role="master"), _replica(3)], p) == 2
    # The promotion kills the Sentinels' links to it: "disconnected" alone does not drop it
    assert _replicas_to_wait_for([_replica(2, flags="slave,disconnected"), _replica(3)], p) == 2
    # After the switch, under the new primary: the old primary (role master, never its replica) and a
    # replica not linked yet are not counted; a replica marked down is not either
    new = ("127.0.0.1", 2)
    assert _replicas_to_wait_for([_replica(1, role="master", link="err", master=None), _replica(3, master=2)], new) == 1
    assert _replicas_to_wait_for([_replica(1, link="err", master=None), _replica(3, link="err", master=None)], new) == 0
    assert _replicas_to_wait_for([_replica(1, sdown=True), _replica(3, master=2)], new) == 1


def test_rank_prefers_the_newest_epoch_then_not_the_leaders_in_progress_view():
    from tender_pool.store.sentinel import _rank

    leader = {"config-epoch": 1, "flags": "master,failover_in_progress,force_failover", "port": 1}
    other = {"config-epoch": 1, "flags": "master", "port": 2}
    older = {"config-epoch": 0, "flags": "master", "port": 1}
    assert max([leader, other, older], key=_rank) is other
    assert max([older, leader], key=_rank) is leader


@pytest.mark.timeout(90)
def test_starts_resume_within_a_second_of_a_replica_acknowledging_and_status_says_why(sh, sentinels):
    """After a planned failover with one replica no write can be acknowledged
    until Sentinel re-attaches the old primary (~11 s); the slot's start retries backed off to 5 s
    and resumed 5 s after that (16.3 s pause), while status looked idle. The same stall, with its
    end chosen by the test: the only replica SIGSTOPped (every start is NotReplicated), resumed
    9.6 s later, when a doubling back-off would be 3.2 s into a sleep."""
    # Given a daemon on the Sentinel URL (wait_replicas = 1 by default), its slot idle
    import json
    import signal

    d = sh.daemon(workers=1)
    d.wait_slots(1)
    warm = sh.submit("noop", user="warm")
    sh.wait_state(warm, timeout=20)
    replica = next(n for p, n in sentinels.nodes.items() if p != sentinels.primary_port())
    # When the replica stops acknowledging and a job is queued (the primary has it; the client's
    # submit cannot have it acknowledged and says so: NotReplicated, submit again with the same id)
    replica.proc.send_signal(signal.SIGSTOP)
    stalled_at = time.monotonic()
    try:
        jid = "stalled-1"
        with pytest.raises(NotReplicated):
            sh.submit("noop", user="u1", id=jid)
        # Then status says what the pool waits for instead of looking idle
        def warned():
            out = sh.cli("status", "--json")
            st = json.loads(out.stdout)
            return any("waiting for a replica to acknowledge" in w for w in st.get("warnings") or [])
        wait_until(warned, 8, interval=0.2, what="the status warning")
        assert sh.job(jid).state.value != "completed"
        time.sleep(max(0.0, stalled_at + 9.6 - time.monotonic()))
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    resumed_at = time.monotonic()
    # And the job completes within a second of the first acknowledgement being possible
    sh.wait_state(jid, timeout=20)
    done_after = time.monotonic() - resumed_at
    print(f"completed {done_after:.2f} s after the replica came back")
    assert done_after < 1.2, f"completed {done_after:.2f} s after the replica came back"
    wait_until(lambda: not any("waiting for a replica" in w for w in
                               json.loads(sh.cli("status", "--json").stdout).get("warnings") or []),
               10, interval=0.2, what="the warning to clear")
