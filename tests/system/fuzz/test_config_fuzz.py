"""Fuzzing the config (CONTRACT.md "Config"): any file, any value of any type
for any key, any environment override → either a config every command can use, or one line
``config: <key>: <value>: <what is allowed>`` and exit 2. Never a traceback.

"Can use" is checked on what the daemon derives from a loaded config at once (the lock TTL, the
WAIT timeout, the retention and heartbeat TTLs as integer milliseconds): a value the loader lets
through and the daemon then cannot turn into a Redis argument is a config error found too late.

Most examples call ``config.load`` in-process (fast); a sample of the rejected ones, and files that
are not TOML or not UTF-8 at all, go through the real ``tender-pool status -c FILE``.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import socket
import subprocess

import pytest
from conftest import TENDER_POOL  # tests/conftest.py
from hypothesis import assume, given
from hypothesis import strategies as st

from tender_pool.store.config import Config, ConfigError, load

from .conftest import fuzz, one_line_error

# --- a TOML writer (tomllib only reads) ------------------------------------------------------------


def toml_str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if any(c in r for c in ".e") else r + ".0"
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_str(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_doc(doc: dict) -> str:
    lines = []
    for section, body in doc.items():
        if section == "handlers":
            for name, h in body.items():
                lines.append(f"[handlers.{toml_str(name)}]")
                lines += [f"{toml_str(k)} = {toml_value(v)}" for k, v in h.items()]
            continue
        lines.append(f"[{toml_str(section)}]")
        lines += [f"{toml_str(k)} = {toml_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


# --- strategies ------------------------------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
scalar = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), text,
    st.datetimes(), st.dates(), st.times(),
    st.sampled_from([0, -1, 1, 2, 3, 4, 5, 0.0, 0.3, 0.29, 1e-9, 1e300, -0.0, float("inf"), float("nan"), "",
                     "512m", "0m", "1k", "²m", "4", "²", "redis://x", "127.0.0.1:²", "x:99999"]),
)
anything = st.recursive(scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(text, c, max_size=3)),
                        max_leaves=6)

KEYS = {
    "redis": ["url", "prefix", "socket_timeout", "wait_replicas", "wait_timeout"],
    "pool": ["queue", "worker_count", "host_id", "max_tries", "kill_grace", "drain_timeout", "heartbeat",
             "input_roots", "results_dir", "result_retention", "state_dir", "crash_cap", "max_waits",
             "retry_backoff", "retry_backoff_max", "claim_timeout"],
    "extract": ["timeout", "jvm_heap", "check_archive"],
    "status": ["socket"],
    "metrics": ["listen"],
}
PLAUSIBLE = {  # values of the right type, some valid, some just past a limit
    "url": st.sampled_from(["redis://127.0.0.1:6379/0", "unix:///tmp/x.sock", "redis+sentinel://a:1,b/m/0",
                            "redis+sentinel://a:²/m", "redis+sentinel:///m", "http://x", "embedded", ""]),
    "worker_count": st.integers(-2, 6),
    "heartbeat": st.floats(0.0, 20.0) | st.sampled_from([0.3, 0.29, float("inf")]),
    "kill_grace": st.floats(0.0, 40.0),
    "claim_timeout": st.floats(0.0, 20.0),
    "socket_timeout": st.floats(0.0, 20.0) | st.just(float("inf")),
    "wait_timeout": st.floats(0.0, 5.0),
    "result_retention": st.floats(0.0, 1e20) | st.just(float("inf")),
    "timeout": st.floats(0.0, 1e20) | st.just(float("inf")),
    "drain_timeout": st.floats(0.0, 100.0) | st.just(float("inf")),
    "retry_backoff": st.floats(0.0, 400.0),
    "retry_backoff_max": st.floats(0.0, 400.0) | st.just(float("inf")),
    "jvm_heap": st.from_regex(r"[0-9²٣]{0,4}[kmgKMGx]?", fullmatch=True),
    "listen": st.from_regex(r"[a-z0-9.]{0,9}:[0-9²]{0,6}", fullmatch=True),
    "input_roots": st.lists(st.sampled_from(["/srv/in", "rel/dir", "", "/"]), max_size=2),
    "host_id": st.sampled_from(["h1", "a b", "a|b", "a:b", "h\x85", ""]),
}


@st.composite
def configs(draw):
    doc: dict = {}
    for section, keys in KEYS.items():
        if not draw(st.booleans()):
            continue
        body = {}
        for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
            pick = draw(st.integers(0, 3))
            body[key] = draw(PLAUSIBLE[key]) if pick and key in PLAUSIBLE else draw(anything)
        if draw(st.integers(0, 9)) == 0:
            body[draw(text)] = draw(anything)  # an unknown key
        doc[section] = body
    if draw(st.integers(0, 3)) == 0:
        doc["handlers"] = {
            draw(text): {
                "command": draw(st.one_of(st.lists(text, max_size=2), anything)),
                "timeout": draw(st.one_of(st.floats(), anything)),
            }
        }
    if draw(st.integers(0, 9)) == 0:
        doc[draw(text)] = {"k": 1}  # an unknown section
    return doc


def usable(cfg: Config) -> None:
    """What the daemon computes from a loaded config before its first job; none of it may fail."""
    assert 1 <= cfg.pool.worker_count <= 4
    cfg.lock_ttl_ms  # per-user lock PX: longest timeout + kill_grace + 60 s, in ms
    cfg.redis.wait_timeout_ms
    int(cfg.pool.heartbeat * 3 * 1000)  # the host key's PX
    int(cfg.pool.result_retention)  # EXPIRE of a finished job
    socket.socket().settimeout(cfg.redis.socket_timeout)  # what redis-py does with it
    h = cfg.extract.jvm_heap
    assert h.isascii() and (h.isdigit() or (h[:-1].isdigit() and h[-1].lower() in "kmg")), f"jvm_heap {h!r} accepted"


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def known_finding(*values) -> bool:
    """A value of a class already reported with its own xfail reproducer: the broad fuzz steps
    around it so it keeps looking for new ones. Delete once the fix lands."""
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack += [*v.keys(), *v.values()]
        elif isinstance(v, list):
            stack += v
    return False


def check_load(tmp_path, doc_text: str, env: dict) -> ConfigError | Config:
    path = tmp_path / "fuzz.toml"
    path.write_text(doc_text, encoding="utf-8")
    try:
        cfg = load(str(path), env)
    except ConfigError as e:
        line = f"config: {e}"
        assert len(line.split("\n")) == 1 and len(line.splitlines()) == 1, repr(line[:500])
        assert line.startswith(f"config: {e.key}: "), line[:300]
        return e
    usable(cfg)
    return cfg


ENV = {"XDG_RUNTIME_DIR": "/nonexistent/run", "XDG_STATE_HOME": "/nonexistent/state"}


@pytest.mark.timeout(90)
@fuzz(max_examples=300, deadline_s=5)
@given(doc=configs())
def test_any_config_loads_or_fails_in_one_line(tmp_path, doc):
    assume(not known_finding(doc))
    check_load(tmp_path, toml_doc(doc), ENV)


@pytest.mark.timeout(60)
@fuzz(max_examples=200, deadline_s=5)
@given(count=st.one_of(st.text(max_size=6), st.sampled_from(["1", "4", " 3 ", "0", "5", "²", "٣", "-1", "+2", "3.0",
                                                            "", "99999999999999999999"])),
       url=st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["redis+sentinel://h:²/m", "unix://", "embedded"])))
def test_environment_overrides_apply_or_fail_in_one_line(tmp_path, count, url):
    """``TENDER_PARSE_WORKER_COUNT`` (from the environment) and ``TENDER_POOL_REDIS_URL``:
    applied when valid (the env wins over the file's 2), else a one-line error naming the variable."""
    env = {"TENDER_PARSE_WORKER_COUNT": count, **ENV}
    if url is not None:
        env["TENDER_POOL_REDIS_URL"] = url
    assume(not known_finding(count, url))
    res = check_load(tmp_path, "[pool]\nworker_count = 2\n", env)
    valid_count = count.strip().isascii() and count.strip().isdigit() and 1 <= int(count.strip()) <= 4
    if isinstance(res, Config):
        assert valid_count and res.pool.worker_count == int(count.strip())
        if url:
            assert res.redis.url == url or url == "embedded"
    elif not valid_count:
        assert res.key == "TENDER_PARSE_WORKER_COUNT", str(res)
    else:
        assert res.key == "TENDER_POOL_REDIS_URL", str(res)


# --- what the fuzz found (fixed since): minimal reproducers --------------------------------------------

@pytest.mark.parametrize("body, env", [
    ('[pool]\nqueue = "a\\nb"\n', {}),
    ('[pool]\nqueue = "a:\\rb"\n', {}),
    ('[handlers."\\r"]\ncommand = []\ntimeout = 1\n', {}),
    ('"x\\ny" = 1\n', {}),
    ("", {"TENDER_PARSE_WORKER_COUNT": "\r"}),
    ("", {"TENDER_POOL_REDIS_URL": "http://a\u2028b"}),
], ids=["value_lf", "value_cr", "handler_name_cr", "unknown_key_lf", "env_cr", "env_u2028"])
def test_config_error_is_one_line_whatever_the_value(tmp_path, body, env):
    """CONTRACT.md: "one line ``config: <key>: <value>: <what is allowed>``". A value or key holding
    a line break was printed raw, so the message spanned two lines (and a log shipper split it)."""
    check_load(tmp_path, body, {**ENV, **env})


@pytest.mark.parametrize("env", [{"TENDER_PARSE_WORKER_COUNT": "\x1e"}, {"TENDER_POOL_REDIS_URL": "http://3\x85"},
                                 {"TENDER_POOL_REDIS_URL": "http://a\u2028"}], ids=["rs", "nel", "u2028"])
def test_a_trailing_line_break_is_escaped_too(tmp_path, env):
    """Found after the first of those fixes: ``TENDER_POOL_REDIS_URL=$'http://3\\x85'`` prints ``config:
    TENDER_POOL_REDIS_URL: http://3<NEL>: a redis://…``, two lines to ``str.splitlines`` (and to
    anything that honours NEL / U+2028): ``"http://3\\x85".splitlines()`` has one part, so
    ``one_line`` leaves it raw. Fix: escape when any character is a line break."""
    check_load(tmp_path, "", {**ENV, **env})


@pytest.mark.parametrize("body", [
    "[pool]\nheartbeat = inf\n",  # host key PX int(3 * inf * 1000): OverflowError in the daemon
    "[pool]\nresult_retention = inf\n",  # int(inf) in Slot.__init__: every slot fails to boot
    "[extract]\ntimeout = inf\n",  # Config.lock_ttl_ms: OverflowError at the first job
    '[handlers.h]\ncommand = ["true"]\ntimeout = inf\n',  # the same through the handler
    "[redis]\nsocket_timeout = inf\n",  # socket.settimeout(inf): OverflowError at connect
], ids=["heartbeat", "result_retention", "extract_timeout", "handler_timeout", "socket_timeout"])
def test_an_infinite_duration_is_refused(tmp_path, body):
    """TOML has ``inf``; the loader accepted it for these keys and the daemon then failed turning it
    into integer milliseconds (a traceback, long after the config was "valid")."""
    res = check_load(tmp_path, body, ENV)
    assert isinstance(res, ConfigError)


@pytest.mark.parametrize("body, env", [
    ('[metrics]\nlisten = "127.0.0.1:²"\n', {}),
    ("", {"TENDER_PARSE_WORKER_COUNT": "²"}),
], ids=["metrics_listen", "worker_count_env"])
def test_non_ascii_digits_are_refused(tmp_path, body, env):
    """``"²".isdigit()`` is True but ``int("²")`` raises ValueError: it was a traceback instead of
    the one-line error."""
    res = check_load(tmp_path, body, {**ENV, **env})
    assert isinstance(res, ConfigError)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("heap", ["512m", "64m", "4096k", "1g", "0m", "²m", "1k", "2m", "007m", "99999999g"])
def test_an_accepted_jvm_heap_starts_a_jvm(tmp_path, heap):
    """The JVM's heap cap: a ``jvm_heap`` the loader accepts must give a JVM that
    starts; else every .doc/.xls job fails at run time (handler_failed "could not start", retried)
    instead of the daemon refusing the config. ``0m`` and ``²m`` passed the loader but not
    ``extract.jvm.java_command``'s own check, and the JVM refuses heaps under ~4 MiB."""
    from tender_pool.extract.jvm import java_command

    res = check_load(tmp_path, f'[extract]\njvm_heap = "{heap}"\n', ENV)
    if isinstance(res, ConfigError):
        return  # refused at load: fine
    argv = java_command(res.extract.jvm_heap)
    java = argv[0]
    r = subprocess.run([java, f"-Xmx{res.extract.jvm_heap}", "-version"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr[-500:]


# --- the real command ------------------------------------------------------------------------------


def run_status(path, env_extra=None, timeout=30):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENDER_PARSE", "TENDER_POOL_REDIS", "TENDER_POOL_CONFIG"))}
    env.update(env_extra or {})
    args = [TENDER_POOL, "status"] + ([] if path is None else ["-c", str(path)])
    return subprocess.run(args, env=env, capture_output=True, timeout=timeout)


@pytest.mark.timeout(90)
@fuzz(max_examples=10, deadline_s=20)
@given(doc=configs())
def test_cli_prints_the_same_one_line_and_exits_2(tmp_path, doc):
    assume(not known_finding(doc))
    res = check_load(tmp_path, toml_doc(doc), ENV)
    assume(isinstance(res, ConfigError))  # a valid config: `status` would look for a daemon
    r = run_status(tmp_path / "fuzz.toml", ENV)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err[-1000:])
    assert one_line_error(err, "config: ") == f"config: {res}"


@pytest.mark.timeout(60)
@fuzz(max_examples=6, deadline_s=20)
@given(junk=st.one_of(st.text(min_size=1, max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.binary(min_size=1, max_size=200)))
def test_a_file_that_is_not_toml_exits_2_in_one_line(tmp_path, junk):
    """Text that is (mostly) not TOML, and bytes that are not even UTF-8."""
    path = tmp_path / "junk.toml"
    path.write_bytes(b"[pool]\nworker_count = 2\n" + junk)
    r = run_status(path)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err[-1000:])
    one_line_error(err, "config: ")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["not_utf8", "directory_via_env", "fifo_via_env"])
def test_unreadable_config_files_exit_2_in_one_line(tmp_path, what):
    """A config file that is not UTF-8 (a Latin-1 ``café``: was a UnicodeDecodeError traceback,
    exit 1), or a ``TENDER_POOL_CONFIG`` naming a directory (was IsADirectoryError, exit 1) or a
    FIFO (blocked for ever reading it)."""
    env = {}
    path = None
    if what == "not_utf8":
        path = tmp_path / "latin1.toml"
        path.write_bytes('[pool]\nhost_id = "café"\n'.encode("latin-1"))
    elif what == "directory_via_env":
        env["TENDER_POOL_CONFIG"] = str(tmp_path)
    else:
        fifo = tmp_path / "fifo.toml"
        os.mkfifo(fifo)
        env["TENDER_POOL_CONFIG"] = str(fifo)
        # nobody writes: a reader would block for ever; the command must not
    try:
        r = run_status(path, env, timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail("`tender-pool status` blocked reading the config")
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err[-1000:])
    one_line_error(err, "config: ")
