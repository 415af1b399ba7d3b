"""control: which frames are accepted, and which reloaded keys apply how (pure functions)."""

import msgspec
import pytest

from tender_pool.supervisor import control
from tender_pool.store.config import load


def req(**kw):
    return msgspec.json.decode(msgspec.json.encode({"version": 1, **kw}), type=control.Request)


def test_control_frames():
    assert control.check(req(op="scale", control=1, workers=3)) == control.Command("scale", 3)
    assert control.check(req(op="drain", control=1)) == control.Command("drain")
    assert "1 to 4" in control.check(req(op="scale", control=1, workers=5))
    assert "1 to 4" in control.check(req(op="scale", control=1))
    assert "control version 2 not supported" in control.check(req(op="drain", control=2))
    assert "unknown control request 'kill'" in control.check(req(op="kill", control=1))
    assert "version 2 not supported" in control.check(control.Request(version=2, op="drain", control=1))
    with pytest.raises(msgspec.ValidationError):  # our own frames: unknown fields are refused
        msgspec.json.decode(b'{"version": 1, "op": "scale", "control": 1, "count": 2}', type=control.Request)


def test_reload_classification(tmp_path):
    base = '[redis]\nurl = "redis://h:6379/0"\n[pool]\nhost_id = "x"\nstate_dir = "/tmp/s"\nworker_count = 2\n'
    (tmp_path / "a.toml").write_text(base)
    old = load(str(tmp_path / "a.toml"), {})
    (tmp_path / "a.toml").write_text(base.replace("worker_count = 2", "worker_count = 3\nmax_tries = 5")
                                     .replace("redis://h:6379/0", "redis://other:6379/0")
                                     + '[handlers.x]\ncommand = ["/bin/true"]\ntimeout = 5\n')
    new = load(str(tmp_path / "a.toml"), {})
    ch = control.classify(old, new)
    assert ch.live == ["pool.worker_count"]
    assert ch.slots == ["handlers.x", "pool.max_tries"]
    assert ch.restart == ["redis.url"]
    merged = control.merge(old, new, ch.restart)
    assert merged.redis.url == "redis://h:6379/0" and merged.pool.max_tries == 5 and "x" in merged.handlers
    assert new.redis.url == "redis://other:6379/0"  # merge copies, never edits the loaded config
    control.adopt(old, merged)
    assert old.pool.worker_count == 3 and old.redis.url == "redis://h:6379/0"
