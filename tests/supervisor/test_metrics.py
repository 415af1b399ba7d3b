"""/metrics: counts match known work, promtool is clean, the dashboard only names served metrics;
and the log lines about jobs carry their identity."""

import json
import re
import socket
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO, wait_until


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def metrics_daemon(h, **kw):
    port = free_port()
    cfg = h.config(**kw)
    cfg.write_text(cfg.read_text().replace('[metrics]\nlisten = ""', f'[metrics]\nlisten = "127.0.0.1:{port}"'))
    d = h.daemon()
    url = f"http://127.0.0.1:{port}/metrics"
    wait_until(lambda: _try(url), 10, what="/metrics up")
    return d, url


def _try(url):
    try:
        return urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return None


def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def v(m, name, **labels):
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.timeout(90)
def test_metric_values_after_known_work_and_promtool(h):
    d, url = metrics_daemon(h, workers=2)
    d.wait_slots(2)
    # Given: a user's job parked behind that user's running job
    blocker = h.submit(kind="long", user="p", payload={"sleep": 1.5, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{blocker}.1.start").exists(), 10, what="blocker start")
    parked = h.submit(user="p")
    wait_until(lambda: h.job(parked).state.value == "waiting", 10, what="parked")
    # and: three successes, a final failure, a retry that then succeeds, a timeout, an undecodable entry
    ok = [h.submit(user=f"s{i}") for i in range(3)]
    bad = h.submit(user="f", payload={"final_error": "corrupt"})
    retry = h.submit(user="r", payload={"fail_until": 2})
    slow = h.submit(kind="slow", user="t", payload={"sleep": 10})
    h.r.lpush(h.k.ready_lo, b"{not a job")
    for j in [blocker, parked, *ok, retry]:
        h.wait_state(j, timeout=30)
    h.wait_state(bad, states=("failed",))
    h.wait_state(slow, states=("failed",))
    dead_key = h.k.dead
    wait_until(lambda: h.r.llen(dead_key) == 1, 10, what="dead letter")
    waits = h.job(parked).waits

    # Then the counters match, by kind and outcome
    def settled():
        m = samples(_try(url))
        return m if v(m, "tender_pool_slots", state="idle") == 2 and v(m, "tender_pool_jobs_finished_total", kind="?", outcome="dead") == 1 else None
    m = wait_until(settled, 10, what="all reported")
    fin = "tender_pool_jobs_finished_total"
    assert v(m, fin, kind="behave", outcome="completed") == 5
    assert v(m, fin, kind="long", outcome="completed") == 1
    assert v(m, fin, kind="behave", outcome="failed") == 1
    assert v(m, fin, kind="slow", outcome="failed") == 1
    assert v(m, "tender_pool_job_retries_total", kind="behave") == 1
    assert v(m, "tender_pool_job_deferrals_total", reason="user") == waits >= 1
    assert v(m, "tender_pool_job_timeouts_total", kind="slow") == 1
    assert v(m, "tender_pool_job_kill_signals_total", signal="SIGTERM") == 1
    # every behave attempt that ran has a duration; each behave job's first start a queue wait
    assert v(m, "tender_pool_job_duration_seconds_count", kind="behave") == 7
    assert v(m, "tender_pool_job_queue_wait_seconds_count", kind="behave") == 6
    assert v(m, "tender_pool_job_duration_seconds_count", kind="slow") == 1
    assert v(m, "tender_pool_job_duration_seconds_sum", kind="slow") >= 1.5
    assert v(m, "tender_pool_job_duration_seconds_bucket", kind="long", le="1.0") == 0
    assert v(m, "tender_pool_job_duration_seconds_bucket", kind="long", le="2.5") == 1
    # the Redis gauges
    assert v(m, "tender_pool_redis_up") == 1 and v(m, "tender_pool_dead_letter_entries") == 1
    assert v(m, "tender_pool_jobs_failed_retained") == 2 and v(m, "tender_pool_queue_depth", priority="bulk") == 0
    assert v(m, "tender_pool_slots", state="busy") == 0 and v(m, "tender_pool_slots_configured") == 2
    # and status agrees
    st = json.loads(h.cli("status", "--json").stdout)
    assert st["counters"] == {"succeeded": 6, "failed": 3, "retried": 1, "deferred": waits, "reclaimed": 0,
                              "timed_out": 1, "killed": 1, "slot_restarts": 0}
    assert st["failed"] == 2 and st["dead_letter"] == 1

    # promtool's linter is clean on the whole output
    text = _try(url)
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=20)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res.stdout + res.stderr

    # Logs: every slot line about a job carries its identity; the timeout's kill has pids, signals, timings
    lines = [json.loads(x) for x in d.logs().splitlines() if x.startswith("{")]
    about_jobs = [x for x in lines if x.get("job_id") and x["component"].startswith("slot")]
    assert {"job_started", "job_ran", "settled", "parked", "dead_letter"} <= {x["event"] for x in about_jobs}
    for x in about_jobs:
        assert {"job_id", "kind", "user", "slot", "attempt"} <= set(x), x
    (ran,) = [x for x in about_jobs if x["event"] == "job_ran" and x["job_id"] == slow]
    term = ran["kill"][0]
    assert term["signal"] == "SIGTERM" and term["pids"] and term["seconds"] < 1.5 and ran["signals"] == ["SIGTERM"]
    assert d.stop() == 0


def test_dashboard_queries_name_only_served_metrics(h):
    d, url = metrics_daemon(h, workers=1)
    text = _try(url)
    served = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            served.add(name)
            if typ == "histogram":
                served |= {name + "_bucket", name + "_sum", name + "_count"}
            if typ == "counter":
                served.add(name + "_total")
        elif line and not line.startswith("#"):
            served.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    dash = json.loads((REPO / "deploy" / "grafana" / "tender-pool.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs.append(dash["templating"]["list"][0]["definition"])
    named = {n for e in exprs for n in re.findall(r"\btender_pool_[a-z0-9_]+", e)}
    assert len(exprs) >= 15 and len(named) >= 15
    assert named <= served, f"the dashboard names metrics /metrics does not serve: {sorted(named - served)}"
    for want in ("slots", "queue", "throughput", "latency", "failures"):  # the issue's sections
        assert any(want in p["title"].lower() for p in dash["panels"] if p["type"] == "row"), want
    assert d.stop() == 0
