"""The whole path with command handlers: submit → claim → start → run → settle, and the CLI."""

import json



def test_job_runs_to_completion_and_job_cli_shows_it(h):
    d = h.daemon(workers=2)
    jid = h.submit(payload={"echo": "hi"})
    job = h.wait_state(jid)
    assert job.result == {"value": {"echo": "hi", "attempt": 1, "user": "u1"}}
    assert job.attempts == 1 and job.tries == 0 and job.worker.startswith(f"ha-{h.prefix}-slot")
    out = h.cli("job", jid, "--json")
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert set(view) == {"id", "kind", "user", "state", "priority", "payload", "after", "attempts", "tries",
                         "interruptions", "created_at", "started_at", "finished_at", "worker", "error", "result",
                         "skipped_from"}
    assert view["state"] == "completed" and view["finished_at"].endswith("Z")
    assert h.cli("job", "nope").returncode == 2
    assert d.stop() == 0


def test_submit_wait_idempotent_and_exit_codes(h):
    h.daemon(workers=1)
    out = h.cli("submit", "--user", "u", "--kind", "behave", "--payload", '{"echo": 1}', "--job-id", "j1",
                "--wait", "--timeout", "20")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"]["value"]["echo"] == 1
    again = h.cli("submit", "--user", "u", "--kind", "behave", "--job-id", "j1", "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == {"id": "j1", "state": "completed"}
    assert h.job("j1").attempts == 1  # the same id twice ran once
    failed = h.cli("submit", "--user", "u", "--kind", "behave", "--payload", '{"final_error": "corrupt"}',
                   "--wait", "--timeout", "20")
    assert failed.returncode == 1 and json.loads(failed.stdout)["error"]["kind"] == "corrupt"
    assert h.cli("submit", "--user", "u", "--kind", "nosuch").returncode == 2
    assert h.cli("submit", "--user", "u", "--kind", "behave", "--payload", "[1]").returncode == 2
    assert h.cli("submit", "/no/such/file", "--user", "u", "--kind", "behave").returncode == 2


def test_redis_unreachable_gives_exit_4(h, tmp_path):
    h.config()
    h.redis.stop()
    assert h.cli("submit", "--user", "u", "--kind", "behave").returncode == 4
    assert h.cli("job", "x").returncode == 4


def test_bad_config_exit_2_with_one_line(h, tmp_path):
    cfg = h.config()
    cfg.write_text(cfg.read_text().replace("worker_count = 2", "worker_count = 9"))
    out = h.cli("run")
    assert out.returncode == 2
    assert out.stderr.strip() == "config: pool.worker_count: 9: an integer from 1 to 4"
