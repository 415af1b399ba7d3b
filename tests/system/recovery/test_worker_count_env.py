"""TENDER_PARSE_WORKER_COUNT from the environment (the old pool's knob, CONTRACT "Config"): it overrides
``[pool] worker_count``, and a bad value stops ``run`` with one config line and exit 2. The harness
removes the variable from every daemon's environment; these tests put it back."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import TENDER_POOL, Daemon

@pytest.mark.timeout(60)
def test_the_environment_sets_the_number_of_slots(h):
    cfg = h.config(workers=1)
    env = dict(h.env(), TENDER_PARSE_WORKER_COUNT="3")
    d = Daemon(cfg, env, h.tmp / "daemon-a.log")
    h.daemons.append(d)
    d.start()
    d.wait_slots(3)
    out = subprocess.run([TENDER_POOL, "status", "--json", "-c", str(cfg)], env=env, capture_output=True,
                         text=True, timeout=30)

    status = json.loads(out.stdout)
    assert status["configured"] == 3 and len(status["slots"]) == 3, status
    jobs = [h.submit(kind="noop", user=f"u{i}") for i in range(6)]
    for j in jobs:
        h.wait_state(j, timeout=20)
    assert d.stop() == 0

@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", ["9", "0", "two"])
def test_a_bad_value_in_the_environment_stops_run_with_exit_2(h, value):
    cfg = h.config(workers=1)
    env = dict(h.env(), TENDER_PARSE_WORKER_COUNT=value)
    out = subprocess.run([TENDER_POOL, "run", "-c", str(cfg)], env=env, capture_output=True, text=True, timeout=20)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config: TENDER_PARSE_WORKER_COUNT: {value}: "), out.stderr
