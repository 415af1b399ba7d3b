"""Settings (the [redis] wait_* keys among them) that are each valid but cannot work
together are refused at load with the contract's one line and exit 2."""

from __future__ import annotations

import subprocess

import pytest

from tender_pool.store.config import ConfigError, load



def write(tmp_path, redis: str = "", pool: str = "", url: str = "redis://127.0.0.1:1/0"):
    p = tmp_path / "c.toml"
    p.write_text(f'[redis]\nurl = "{url}"\n{redis}\n[pool]\nstate_dir = "{tmp_path}"\n{pool}\n')
    return str(p)


def error(tmp_path, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        load(write(tmp_path, **kw), {})
    return str(e.value)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "pool, redis, line",
    [
        # item 12: the grace outlasts the silence limit (heartbeat 1, default grace 3)
        ("heartbeat = 1", "", "pool.kill_grace: 3.0: less than 3 × pool.heartbeat (3)"),
        ("heartbeat = 1\nkill_grace = 2.99\nfence = 0", "", None),
        # the fence must fit: heartbeat <= fence, fence + kill_grace + heartbeat/3 <= 3 × heartbeat
        ("heartbeat = 1\nkill_grace = 2.99", "", "pool.kill_grace: 2.99: at most 1.66667 (5/3 × pool.heartbeat) so that a "
         "fence fits before another host may reclaim; or set pool.fence = 0 (no fence)"),
        ("heartbeat = 1\nkill_grace = 1\nfence = 0.5", "", "pool.fence: 0.5: at least pool.heartbeat (1), or 0 for no fence"),
        ("heartbeat = 1\nkill_grace = 1\nfence = 1.8", "", "pool.fence: 1.8: at most 3 × heartbeat − kill_grace − heartbeat/3 (1.66667), or 0 for no fence"),
        ("heartbeat = 1\nkill_grace = 1\nfence = 1.5", "", None),
        # a blocking claim longer than the slot may stay silent
        ("heartbeat = 0.5\nclaim_timeout = 1\nkill_grace = 0.5", "", "pool.claim_timeout: 1.0: less than 2 × pool.heartbeat (1)"),
        ("heartbeat = 0.2\nkill_grace = 0.1\nclaim_timeout = 0.1", "", "pool.heartbeat: 0.2: at least 0.3 seconds"),
        # calls that block on purpose must end before the socket timeout
        ("claim_timeout = 5", "", "redis.socket_timeout: 5.0: more than pool.claim_timeout"),
        ("", "wait_timeout = 5", "redis.socket_timeout: 5.0: more than redis.wait_timeout"),
        ("", "wait_timeout = 0", "redis.wait_timeout: 0.0: a positive number of seconds"),
        ("", "wait_replicas = -1", "redis.wait_replicas: -1: an integer >= 0"),
        ("retry_backoff = 10\nretry_backoff_max = 5", "", "pool.retry_backoff_max: 5.0: at least pool.retry_backoff"),
    ],
)
def test_impossible_settings_are_refused_with_one_line(tmp_path, pool, redis, line):
    if line is None:
        load(write(tmp_path, pool=pool, redis=redis), {})
    else:
        assert error(tmp_path, pool=pool, redis=redis) == line


@pytest.mark.timeout(10)
def test_wait_replicas_defaults_to_one_on_sentinel_urls_only(tmp_path):
    assert load(write(tmp_path), {}).redis.wait_replicas == 0
    sentinel = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/svc/0"
    cfg = load(write(tmp_path, url=sentinel), {})
    assert (cfg.redis.wait_replicas, cfg.redis.wait_timeout_ms) == (1, 1000)
    assert load(write(tmp_path), {"TENDER_POOL_REDIS_URL": sentinel}).redis.wait_replicas == 1
    assert load(write(tmp_path, url=sentinel, redis="wait_replicas = 0"), {}).redis.wait_replicas == 0
    assert load(write(tmp_path, url=sentinel, redis="wait_replicas = 2"), {}).redis.wait_replicas == 2


@pytest.mark.timeout(10)
def test_a_malformed_sentinel_url_is_a_config_error(tmp_path):
    line = error(tmp_path, url="redis+sentinel://127.0.0.1:notaport/svc")
    assert line == "redis.url: redis+sentinel://127.0.0.1:notaport/svc: redis+sentinel://host:port[,host:port…]/<service>[/<db>]"


@pytest.mark.timeout(30)
def test_run_exits_2_with_the_line_before_any_connection(tmp_path):
    from conftest import TENDER_POOL

    cfg = write(tmp_path, pool="heartbeat = 1")
    out = subprocess.run([TENDER_POOL, "run", "-c", cfg], capture_output=True, text=True, timeout=20)
    assert out.returncode == 2
    assert out.stderr.strip() == "config: pool.kill_grace: 3.0: less than 3 × pool.heartbeat (3)"
