"""Prometheus metrics, aggregated in the supervisor and served on ``[metrics] listen`` ("" disables).

Why aggregation in the supervisor and not prometheus_client's multiprocess mode: slots already send
every attempt's end to the supervisor over their pipe (``types.Finished``, with duration, queue wait
and extraction figures), so the counts live in the one process that outlives the slots. That
survives a slot's SIGKILL (multiprocess mode only marks processes dead on a clean exit; Dramatiq),
needs no shared ``/tmp`` directory between instances or restarts (Dramatiq PR#627) and cannot be
corrupted by PID reuse (client_python#654). It also keeps a single listener on loopback in the
supervisor instead of one forked server per process. The price: counts restart at zero with the
daemon, which Prometheus' ``rate()`` handles as a counter reset.

One classification: an attempt's end is counted by ``counters.tally``, the same function the
supervisor's counters (and so ``status``) use; the labels here are read from the same ``Finished``
(``outcome`` as ``reports.AttemptEnd``, ``park_reason`` for deferrals), so /metrics and ``status``
cannot disagree.

Gauges of the queue (depth, processing, deferred, delayed, dead-letter, failed) are read from Redis
at scrape time by ``PoolCollector`` through a ``status_probe.QueueProbe`` (its own client, 0.5 s
timeout; the HTTP server's threads share no lock with the main loop). A scrape during a Redis outage
still answers, with ``tender_pool_redis_up 0`` and without those gauges.

Extraction: ``tender_pool_extract_pages_total`` and ``tender_pool_extract_input_bytes_total`` count
what ``Finished.pages`` / ``Finished.input_bytes`` carry (the slot fills them from a completed
parse_markdown result and the input file's size).

Runs and events: failures by error kind (``job_failures``) and fd-3 progress lines
(``progress_events``, ``progress_lines_dropped``) come from ``Finished`` like the rest; runs by final
state, jobs per run and time to finish a run come from the probe's ``RunTracker`` at scrape time (it
tails the queue's ``events`` stream for ``run_finished``), and events written from the ``events``
stream's ``entries-added``. Both are read from Redis, so every host reports every run of the queue:
aggregate them with ``max`` across hosts, not ``sum``.

Fork safety: the registry and the HTTP server live in the supervisor only; slots never touch them
(they build nothing of this after the fork), and the listening socket is closed in forked children.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tender_pool.client.status_probe import QueueProbe
from tender_pool.supervisor.status_server import close_after_fork
from tender_pool.supervisor.slot_table import SlotState
from tender_pool.slots.reports import AttemptEnd, Finished
from tender_pool.supervisor.counters import tally

P = "tender_pool_"
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


class PoolMetrics:
    """Event metrics, updated by the supervisor's main loop from slot reports."""

    def __init__(self, kinds: Iterable[str] = ()):
        r = self.registry = CollectorRegistry(auto_describe=False)  # no Redis read at registration
        self.finished = Counter(P + "jobs_finished", "Jobs that reached a final state, by kind and outcome.",
                                ["kind", "outcome"], registry=r)
        self.attempts = Counter(P + "job_attempts", "Attempt ends reported by slots, by kind and outcome "
                                "(completed, failed, retried, interrupted, fenced, parked, cancelled, dead).",
                                ["kind", "outcome"], registry=r)
        self.duration = Histogram(P + "job_duration_seconds", "Run time of one attempt, by kind.", ["kind"],
                                  buckets=DURATION_BUCKETS, registry=r)
        self.queue_wait = Histogram(P + "job_queue_wait_seconds", "Time from submission to a job's first "
                                    "start, by kind.", ["kind"], buckets=WAIT_BUCKETS, registry=r)
        self.retries = Counter(P + "job_retries", "Business failures put back for another try, by kind.",
                               ["kind"], registry=r)
        self.deferrals = Counter(P + "job_deferrals", "Jobs parked behind their user's lock or a dependency, "
                                 "by reason.", ["reason"], registry=r)
        self.timeouts = Counter(P + "job_timeouts", "Attempts killed at their timeout, by kind.", ["kind"],
                                registry=r)
        self.kills = Counter(P + "job_kill_signals", "Signals sent to jobs' process groups (timeout, cancel, "
                             "abort), by signal.", ["signal"], registry=r)
        self.pages = Counter(P + "extract_pages", "Pages extracted by parse_markdown, by format.", ["format"],
                             registry=r)
        self.input_bytes = Counter(P + "extract_input_bytes", "Bytes of input files parse_markdown extracted, "
                                   "by format.", ["format"], registry=r)
        self.failures = Counter(P + "job_failures", "Jobs that ended failed (or dead), by kind and error kind.",
                                ["kind", "error_kind"], registry=r)
        self.progress_events = Counter(P + "progress_events", "job_progress events written from handlers' fd-3 "
                                       "lines, by kind.", ["kind"], registry=r)
        self.progress_dropped = Counter(P + "progress_lines_dropped", "Handlers' fd-3 progress lines not written: "
                                        "coalesced away, past the per-job byte cap, or undecodable; by kind.",
                                        ["kind"], registry=r)
        self.redis_errors: dict[str, int] = {"supervisor": 0, "slots": 0}
        self._beat_errors: dict[int, int] = {}  # slot pid → last cumulative count seen
        for kind in kinds:
            self.duration.labels(kind)
            self.queue_wait.labels(kind)
            for outcome in ("completed", "failed", "cancelled"):
                self.finished.labels(kind, outcome)
        for reason in ("user", "dependency"):
            self.deferrals.labels(reason)
        for sig in ("SIGTERM", "SIGKILL"):
            self.kills.labels(sig)
        self.server: Any = None

    def on_finished(self, rep: Finished) -> None:
        kind = rep.kind or "?"
        end = AttemptEnd(rep.outcome)
        counted = tally(rep)
        self.attempts.labels(kind, end.value).inc()
        if end.terminal:
            self.finished.labels(kind, end.value).inc()
        if counted.retried:
            self.retries.labels(kind).inc()
        if counted.deferred:
            self.deferrals.labels(rep.park_reason or "user").inc()
        if counted.timed_out:
            self.timeouts.labels(kind).inc()
        if end not in (AttemptEnd.PARKED, AttemptEnd.DEAD) and rep.duration_s > 0:
            self.duration.labels(kind).observe(rep.duration_s)
        if rep.queue_wait_s is not None:
            self.queue_wait.labels(kind).observe(rep.queue_wait_s)
        for sig in rep.killed:
            self.kills.labels(sig).inc()
        if end in (AttemptEnd.FAILED, AttemptEnd.DEAD):
            self.failures.labels(kind, rep.error_kind or ("undecodable" if end == AttemptEnd.DEAD else "unknown")).inc()
        if getattr(rep, "progress_events", 0):
            self.progress_events.labels(kind).inc(rep.progress_events)
        if getattr(rep, "progress_dropped", 0):
            self.progress_dropped.labels(kind).inc(rep.progress_dropped)
        if rep.pages or rep.input_bytes:
            fmt = rep.format or "unknown"
            self.pages.labels(fmt).inc(rep.pages)
            self.input_bytes.labels(fmt).inc(rep.input_bytes)

    def on_beat(self, pid: int, cumulative_errors: int) -> None:
        """Slots send a cumulative Redis error count with each Beat; add the delta."""
        last = self._beat_errors.get(pid, 0)
        if cumulative_errors > last:
            self.redis_errors["slots"] += cumulative_errors - last
        self._beat_errors[pid] = cumulative_errors

    def forget_slot(self, pid: int) -> None:
        self._beat_errors.pop(pid, None)

    def redis_error(self, component: str = "supervisor") -> None:
        self.redis_errors[component] = self.redis_errors.get(component, 0) + 1

    def serve(self, listen: str) -> tuple[str, int] | None:
        """Start the HTTP server (its own daemon threads) on ``host:port``; None when disabled."""
        if not listen:
            return None
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        server, _thread = start_http_server(int(port), addr=host, registry=self.registry)
        close_after_fork(server.socket)
        self.server = server
        return server.server_address[:2]

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class PoolCollector(Collector):
    """Scrape-time metrics: the slot table, cumulative supervisor counters, and Redis gauges.
    ``slots`` is a zero-arg callable returning the slot objects; ``redis_errors`` returns the status
    builder's count of failed Redis reads."""

    def __init__(self, metrics: PoolMetrics, slots: Callable[[], list], counters: Any, probe: QueueProbe,
                 housekeeper: Callable[[], Any], redis_errors: Callable[[], int],
                 jvm_rss: Callable[[], dict[str, int]] | None = None):
        self.jvm_rss = jvm_rss  # worker id → its warm JVM's RSS, from the status thread's last /proc sample
        self.m = metrics
        self.slots = slots
        self.counters = counters
        self.probe = probe
        self.housekeeper = housekeeper
        self.redis_errors = redis_errors

    def collect(self) -> Iterable[Metric]:
        by_state = GaugeMetricFamily(P + "slots", "Slots by state.", labels=["state"])
        states = [s.state.value for s in list(self.slots())]
        for st in SlotState:
            by_state.add_metric([st.value], states.count(st.value))
        yield by_state
        yield GaugeMetricFamily(P + "slots_configured", "Slots this supervisor runs (pool.worker_count).",
                                value=len(states))
        if self.jvm_rss is not None:
            jvm = GaugeMetricFamily(P + "jvm_resident_memory_bytes", "Resident memory of each slot's warm POI JVM.",
                                    labels=["slot"])
            for slot, rss in sorted(self.jvm_rss().items()):
                jvm.add_metric([slot], rss)
            yield jvm
        house = self.housekeeper()
        yield CounterMetricFamily(P + "slot_restarts", "Slots respawned after dying.",
                                  value=self.counters.slot_restarts)
        yield CounterMetricFamily(P + "jobs_reclaimed", "Jobs put back from a dead slot's or host's processing "
                                  "list (supervisor and reaper).",
                                  value=self.counters.reclaimed + (house.reclaimed if house is not None else 0))
        stats, up = None, 0
        try:
            stats, up = self.probe.read(), 1
        except redis.RedisError:
            self.m.redis_error("metrics")
        errors = CounterMetricFamily(P + "redis_errors", "Redis commands that failed, by component.",
                                     labels=["component"])
        counts = dict(self.m.redis_errors)
        counts["housekeeper"] = getattr(house, "redis_errors", 0) if house is not None else 0
        counts["status"] = self.redis_errors()
        for comp, n in sorted(counts.items()):
            errors.add_metric([comp], n)
        yield errors
        yield GaugeMetricFamily(P + "redis_up", "1 when the last scrape could read the queue from Redis.", value=up)
        if stats is None:
            return
        depth = GaugeMetricFamily(P + "queue_depth", "Jobs ready to be claimed, by priority.", labels=["priority"])
        depth.add_metric(["interactive"], stats.ready_hi)
        depth.add_metric(["bulk"], stats.ready_lo)
        yield depth
        yield GaugeMetricFamily(P + "jobs_processing", "Jobs claimed by a slot (all hosts).", value=stats.processing)
        deferred = GaugeMetricFamily(P + "jobs_deferred", "Jobs parked, by reason.", labels=["reason"])
        deferred.add_metric(["user"], stats.deferred_user)
        deferred.add_metric(["dependency"], stats.deferred_dependency)
        yield deferred
        yield GaugeMetricFamily(P + "jobs_delayed", "Jobs waiting out a retry backoff.", value=stats.delayed)
        yield GaugeMetricFamily(P + "dead_letter_entries", "Entries in the dead-letter list.", value=stats.dead_letter)
        yield GaugeMetricFamily(P + "jobs_failed_retained", "Failed jobs within the history retention.",
                                value=stats.failed)
        mem = self.probe.memory
        if mem is not None:
            yield GaugeMetricFamily(P + "redis_memory_used_bytes", "Redis used_memory (INFO memory).",
                                    value=mem.used_bytes)
            yield GaugeMetricFamily(P + "redis_maxmemory_bytes", "Redis maxmemory (0: no limit).",
                                    value=mem.maxmemory_bytes)
        refused = bool(self.probe.memory_health()[0])
        yield GaugeMetricFamily(P + "redis_writes_refused", "1 while Redis refuses writes (out of memory, MISCONF, "
                                "…; as status's problem), else 0.", value=int(refused))
        yield from self.run_metrics()

    def run_metrics(self) -> Iterable[Metric]:
        """Runs and events, from the probe's last read (this scrape's)."""
        t = self.probe.run_tracker
        yield GaugeMetricFamily(P + "runs_active", "Runs pending or running (all hosts).", value=self.probe.runs_active)
        ended = CounterMetricFamily(P + "runs_finished", "Runs that reached a final state since this supervisor "
                                    "started, by state (all hosts' runs: aggregate with max).", labels=["state"])
        for state in ("completed", "partial_success", "failed", "cancelled"):
            ended.add_metric([state], t.ended.get(state, 0))
        yield ended
        for name, doc, obs in (
            ("run_jobs", "Jobs per finished run.", t.jobs),
            ("run_duration_seconds", "Time from a run's creation to its end.", t.seconds),
        ):
            yield HistogramMetricFamily(P + name, doc, buckets=obs.cumulative(), sum_value=obs.total)
        try:
            written = int(self.probe.r.xinfo_stream(self.probe.k.events).get("entries-added", 0))
        except redis.ResponseError:  # no stream yet
            written = 0
        except redis.RedisError:
            return
        yield CounterMetricFamily(P + "events_written", "Events written to the queue's events stream (every job "
                                  "transition, run_started/run_finished, plain jobs' progress), all hosts.",
                                  value=written)
        yield from self.consumer_metrics()

    def consumer_metrics(self) -> Iterable[Metric]:
        """The event stream's consumer groups, from the probe's last read; dropped entries are this
        host's housekeeper's (the host holding the reaper lease trims: aggregate with sum)."""
        house = self.housekeeper()
        dropped = CounterMetricFamily(P + "events_consumer_dropped", "Entries of the queue's events stream the "
                                      "group still needed, dropped past [events] max_backlog by this host.",
                                      labels=["group"])
        for group, n in sorted((getattr(house, "events_dropped", None) or {}).items()):
            dropped.add_metric([group], n)
        yield dropped
        lag = GaugeMetricFamily(P + "events_consumer_lag", "Entries not yet delivered to the consumer group.",
                                labels=["group"])
        pending = GaugeMetricFamily(P + "events_consumer_pending", "Entries delivered to the group and not yet "
                                    "acknowledged.", labels=["group"])
        age = GaugeMetricFamily(P + "events_consumer_oldest_pending_age_seconds", "Age of the group's oldest "
                                "unacknowledged entry (0 with none).", labels=["group"])
        gap = GaugeMetricFamily(P + "events_consumer_gap", "1 while the group has lost entries and not resynced.",
                                labels=["group"])
        for c in self.probe.consumers:
            lag.add_metric([c.group], c.lag)
            pending.add_metric([c.group], c.pending)
            age.add_metric([c.group], c.oldest_pending_age_s or 0.0)
            gap.add_metric([c.group], 1 if c.gap else 0)
        yield from (lag, pending, age, gap)
