"""The CLI side of run ids: `runs submit --run-id` (the same items again: the
same run; other items: exit 2), run job ids in `job`/`cancel`, `submit --job-id` refusing '/',
`skipped_from` in `job --json` / `job` / `runs show --json`, skipped jobs in `history`."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.timeout(60)


def items(h, *lines: str, name: str = "items.jsonl") -> str:
    p = h.tmp / name
    p.write_text("".join(line + "\n" for line in lines))
    return str(p)


def run_json(h, path: str, *args: str):
    return h.cli("runs", "submit", "--user", "u1", "--kind", "behave", "--items", path, "--json", *args)


def test_run_id_makes_a_resubmission_the_same_run_and_other_items_exit_2(h):
    h.config()
    path = items(h, '{"key": "a", "payload": {"x": 1}}', '{"key": "b"}')
    first = run_json(h, path, "--run-id", "batch7")
    assert first.returncode == 0, first.stderr
    run = json.loads(first.stdout)
    assert run["id"] == "batch7" and [j["id"] for j in run["jobs"]] == ["batch7/1", "batch7/2"]
    again = run_json(h, path, "--run-id", "batch7")
    assert again.returncode == 0 and json.loads(again.stdout)["jobs"] == run["jobs"]
    k = h.k
    assert h.r.zcard(k.runs) == 1 and h.r.llen(k.runjobs("batch7")) == 2
    other = run_json(h, items(h, '{"key": "a", "payload": {"x": 2}}', '{"key": "b"}', name="other.jsonl"),
                     "--run-id", "batch7")
    assert other.returncode == 2 and "exists with other items" in other.stderr
    bad = run_json(h, path, "--run-id", "a/b")
    assert bad.returncode == 2 and "run id" in bad.stderr
    # job and cancel take run job ids; submit --job-id refuses '/'
    shown = h.cli("job", "batch7/1", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == "batch7/1"
    assert h.cli("cancel", "batch7/2").stdout.strip() == "cancelled"
    refused = h.cli("submit", "--user", "u1", "--kind", "behave", "--job-id", "batch7/3")
    assert refused.returncode == 2 and "no '/'" in refused.stderr
    assert not h.r.exists(k.job("batch7/3"))


def test_skipped_from_in_job_runs_show_and_history(h):
    h.config()
    k = h.k
    # Given a completed job whose input hash is recorded
    from tender_pool.client.items import input_hash

    payload = {"section": "1"}
    h.r.hset(k.job("old"), mapping={"id": "old", "kind": "behave", "user": "u1", "payload": json.dumps(payload),
                                    "state": "completed", "result": json.dumps({"value": {"ok": 1}})})
    h.r.set(k.done("behave", "u1", input_hash("behave", payload)), "old")
    r = run_json(h, items(h, json.dumps({"key": "a", "payload": payload})), "--run-id", "sk")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"][0]["skipped_from"] == "old"
    job = json.loads(h.cli("job", "sk/1", "--json").stdout)
    assert job["state"] == "skipped" and job["skipped_from"] == "old"
    assert "the result of old" in h.cli("job", "sk/1").stdout
    shown = json.loads(h.cli("runs", "show", "sk", "--json").stdout)
    assert shown["jobs"][0]["skipped_from"] == "old"
    hist = json.loads(h.cli("history", "--status", "skipped", "--json").stdout)
    assert hist["total"] == 1 and hist["items"][0]["id"] == "sk/1" and hist["items"][0]["skipped_from"] == "old"
    mine = json.loads(h.cli("history", "--user", "u1", "--json").stdout)
    assert "sk/1" in [j["id"] for j in mine["items"]]
