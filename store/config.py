"""Configuration: discovery, TOML parsing, environment overrides and validation.

Owns the one rule of the contract: an invalid value stops the command before any connection with one
line ``config: <key or env var>: <value>: <what is allowed>`` and exit status 2. Every key and its
default is documented in the repository's ``tender-pool.toml``; a test checks the two agree.

Nothing here reads the environment at import time: ``load()`` takes the environment as an argument so
tests and the reload path see exactly what they pass.
"""

from __future__ import annotations

import os
import socket
import stat
import tomllib
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping

import msgspec

DEFAULT_PATHS = ("./tender-pool.toml", "/etc/tender-pool/tender-pool.toml")
MAX_SECONDS = 10 * 365 * 86400.0  # durations: finite, and small enough for integer milliseconds
MIN_JVM_HEAP, MAX_JVM_HEAP = 16 << 20, 64 << 30  # the JVM refuses heaps of a few MiB; POI needs more


def _jvm_bytes(size: str) -> int | None:
    """``"512m"`` → bytes, as the JVM's -Xmx reads it; None when it is not such a size."""
    digits, unit = (size[:-1], size[-1].lower()) if size and size[-1].lower() in "kmg" else (size, "")
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits) << {"": 0, "k": 10, "m": 20, "g": 30}[unit]


class ConfigError(Exception):
    """A bad value; ``str()`` is the contract's one-line message (without the ``config: `` prefix)."""

    def __init__(self, key: str, value: Any, allowed: str):
        key, allowed = one_line(key), one_line(allowed)  # a line break would split the contract's one line
        self.key, self.value, self.allowed = key, value, allowed
        shown = one_line(value) if isinstance(value, str) else repr(value)
        super().__init__(f"{key}: {shown}: {allowed}")


def one_line(text: str) -> str:
    """``text`` with every character that ``str.splitlines`` breaks on written as an escape."""
    return "".join(c.encode("unicode_escape").decode() if (c + "x").splitlines()[0] == "" else c for c in text)


class RedisConfig(msgspec.Struct, forbid_unknown_fields=True):
    url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "tp"
    socket_timeout: float = 5.0
    # Replicas that must have a write before it is acknowledged (WAIT). None until load() settles it:
    # 1 for redis+sentinel:// URLs (a failover must not lose an acknowledged job), else 0. Through
    # Sentinel a floor: every replica Sentinel could promote is waited for too (store/replication.py).
    wait_replicas: int | None = None
    wait_timeout: float = 1.0

    @property
    def wait_timeout_ms(self) -> int:
        return int(self.wait_timeout * 1000)


class HandlerConfig(msgspec.Struct, forbid_unknown_fields=True):
    """A command handler (``command``: an argv, posix_spawn'ed per attempt) or a function handler
    (``function``: ``"module:qualname"``, imported once per slot, called in a forked child per
    attempt; ``path`` is prepended to ``sys.path`` first, ``after_fork`` is called in each
    attempt's child before the function). Exactly one of ``command`` and ``function``."""

    timeout: float | None = None  # required: checked in _check_handler, so the message names the handler
    command: list[str] | None = None
    function: str | None = None
    per_user: int = 1  # jobs of one user of this kind running at once; 0 = no limit
    path: list[str] = []
    after_fork: str | None = None

    @property
    def runs(self) -> str:
        """What it runs, for ``tender-pool handlers`` and log lines."""
        return self.function if self.function is not None else " ".join(self.command or [])


class PoolConfig(msgspec.Struct, forbid_unknown_fields=True):
    queue: str = "tender_parse"
    worker_count: int = 4
    host_id: str = ""
    max_tries: int = 3
    kill_grace: float = 3.0
    drain_timeout: float = 60.0
    heartbeat: float = 10.0
    input_roots: list[str] = []
    results_dir: str = ""
    result_retention: float = 604800.0
    state_dir: str = ""
    crash_cap: int = 3
    max_waits: int = 10000
    retry_backoff: float = 2.0
    retry_backoff_max: float = 300.0
    claim_timeout: float = 1.0
    fence: float | None = None  # None: 3 × heartbeat − kill_grace − heartbeat / 3; 0: no fence
    inline_result_max: int = 1 << 20  # parse_markdown results up to this many bytes are kept in Redis too


class ExtractConfig(msgspec.Struct, forbid_unknown_fields=True):
    timeout: float = 600.0
    jvm_heap: str = "512m"
    check_archive: bool = True
    per_user: int = 1  # parse_markdown jobs of one user running at once; 0 = no limit


class StatusConfig(msgspec.Struct, forbid_unknown_fields=True):
    socket: str = ""
    group: str = ""  # the socket's group (who may use it); "" = the daemon's own group


class MetricsConfig(msgspec.Struct, forbid_unknown_fields=True):
    listen: str = "127.0.0.1:9464"


class EventsConfig(msgspec.Struct, forbid_unknown_fields=True):
    max_backlog: int = 1_000_000  # entries of the queue-wide stream kept for a lagging consumer group


class Config(msgspec.Struct, forbid_unknown_fields=True):
    redis: RedisConfig = msgspec.field(default_factory=RedisConfig)
    pool: PoolConfig = msgspec.field(default_factory=PoolConfig)
    extract: ExtractConfig = msgspec.field(default_factory=ExtractConfig)
    status: StatusConfig = msgspec.field(default_factory=StatusConfig)
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    events: EventsConfig = msgspec.field(default_factory=EventsConfig)
    handlers: dict[str, HandlerConfig] = {}
    source: str = ""  # the file it came from, for messages; not a TOML key
    embedded_redis: str = ""  # set by load() when redis.url is "embedded": the server's directory; not a TOML key

    def handler_timeout(self, kind: str) -> float | None:
        if kind == "parse_markdown":
            return self.extract.timeout
        h = self.handlers.get(kind)
        return h.timeout if h else None

    def per_user(self, kind: str) -> int:
        """How many jobs of one user of ``kind`` may run at once (0 = no limit). Every kind with
        1 shares the user's one lock: "at most one running job per user" across those kinds."""
        if kind == "parse_markdown":
            return self.extract.per_user
        h = self.handlers.get(kind)
        return h.per_user if h else 1

    @property
    def kinds(self) -> list[str]:
        return ["parse_markdown", *sorted(self.handlers)]

    @property
    def lock_ttl_ms(self) -> int:
        """Per-user lock TTL: longest job timeout + kill grace + 60 s, so a crashed holder frees the
        user by itself but a live holder never loses its lock while its job may still run."""
        longest = max([self.extract.timeout, *(h.timeout for h in self.handlers.values())])
        return int((longest + self.pool.kill_grace + 60) * 1000)


def discover(explicit: str | None, env: Mapping[str, str]) -> Path | None:
    """-c PATH, else $TENDER_POOL_CONFIG, else ./tender-pool.toml, else /etc/…; None = built-in defaults."""
    if explicit:
        return Path(explicit)
    if env.get("TENDER_POOL_CONFIG"):
        return Path(env["TENDER_POOL_CONFIG"])
    for p in DEFAULT_PATHS:
        if Path(p).is_file():
            return Path(p)
    return None


def _runtime_dir(env: Mapping[str, str]) -> Path:
    if os.geteuid() == 0:
        return Path("/run/tender-pool")
    base = env.get("XDG_RUNTIME_DIR") or f"/tmp/tender-pool-{os.geteuid()}"
    return Path(base) / "tender-pool"


def _state_dir(env: Mapping[str, str]) -> Path:
    if env.get("STATE_DIRECTORY"):  # set by systemd's StateDirectory=
        return Path(env["STATE_DIRECTORY"].split(":")[0])
    if os.geteuid() == 0:
        return Path("/var/lib/tender-pool")
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tender-pool"


def _msgspec_key(err: msgspec.ValidationError) -> str:
    # msgspec says e.g. "Expected `int`, got `str` - at `$.pool.worker_count`"
    text = str(err)
    if "at `$." in text:
        return text.split("at `$.", 1)[1].rstrip("`")
    if "unknown field `" in text:
        return text.split("unknown field `", 1)[1].split("`", 1)[0]
    return "(file)"


def _lookup(raw: dict, dotted: str) -> Any:
    cur: Any = raw
    for part in dotted.replace("[", ".").replace("]", "").split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def load(path: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read, override from the environment, validate. Raises ConfigError."""
    env = os.environ if env is None else env
    found = discover(path, env)
    raw: dict[str, Any] = {}
    if found is not None:
        where = "-c" if path else "TENDER_POOL_CONFIG"
        try:
            if not stat.S_ISREG(found.stat().st_mode):  # a directory or a FIFO: never open it
                raise ConfigError(where, str(found), "a regular file")
            raw = tomllib.loads(found.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(where, str(found), "no such file") from None
        except UnicodeDecodeError as e:
            raise ConfigError(str(found), "TOML", f"not UTF-8 ({e.reason} at byte {e.start})") from None
        except OSError as e:
            raise ConfigError(where, str(found), f"unreadable ({e.strerror})") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(str(found), "TOML", str(e)) from None
    try:
        cfg = msgspec.convert(raw, Config)
    except msgspec.ValidationError as e:
        key = _msgspec_key(e)
        raise ConfigError(key, _lookup(raw, key), str(e).split(" - at ")[0]) from None
    cfg.source = str(found) if found else "(defaults)"

    if "TENDER_PARSE_WORKER_COUNT" in env:
        v = env["TENDER_PARSE_WORKER_COUNT"]
        if not (v.strip().isascii() and v.strip().isdigit()) or not 1 <= int(v) <= 4:
            raise ConfigError("TENDER_PARSE_WORKER_COUNT", v, "an integer from 1 to 4")
        cfg.pool.worker_count = int(v)
    if env.get("TENDER_POOL_REDIS_URL"):
        cfg.redis.url = env["TENDER_POOL_REDIS_URL"]
        _check_url(cfg.redis.url, "TENDER_POOL_REDIS_URL")
    else:
        _check_url(cfg.redis.url, "redis.url")
    _validate(cfg, env)
    return cfg


FUNCTION_CHECK_TIMEOUT = 120.0  # seconds the config check's child may spend importing the functions


def _is_spec(spec: str) -> bool:
    module, sep, qualname = spec.partition(":")
    return bool(sep) and all(
        part.isidentifier() for text in (module, qualname) for part in text.split(".")
    )


def _check_handler(name: str, h: HandlerConfig) -> None:
    """The shape of one ``[handlers.NAME]``: exactly one of ``command`` / ``function``, and the
    function's keys well formed (whether they import is ``check_functions``'s question)."""
    key = f"handlers.{name}"
    if h.timeout is None:
        raise ConfigError(f"{key}.timeout", None, "required: a positive number of seconds")
    if h.command is None and h.function is None:
        raise ConfigError(key, name, 'one of command (an argv list) or function ("module:qualname")')
    if h.command is not None and h.function is not None:
        raise ConfigError(key, name, "command or function, not both")
    if h.command is not None:
        if not h.command:
            raise ConfigError(f"{key}.command", h.command, "a non-empty argv list")
        for opt in ("path", "after_fork"):
            if getattr(h, opt):
                raise ConfigError(f"{key}.{opt}", getattr(h, opt), "only with function, not with command")
        return
    assert h.function is not None
    for opt, spec in (("function", h.function), ("after_fork", h.after_fork)):
        if spec is not None and not _is_spec(spec):
            raise ConfigError(f"{key}.{opt}", spec, '"module:qualname" (dotted Python names)')
    for i, p in enumerate(h.path):
        if not os.path.isabs(p):
            raise ConfigError(f"{key}.path[{i}]", p, "an absolute directory")


def has_functions(cfg: Config) -> bool:
    return any(h.function is not None for h in cfg.handlers.values())


def check_functions(cfg: Config, sys_path: list[str] | None = None, timeout: float = FUNCTION_CHECK_TIMEOUT,
                    on_start: Callable[[int], None] | None = None, spawn_lock: ContextManager | None = None) -> None:
    """Import every function handler's ``function`` (and ``after_fork``) in a short-lived child
    process, as a slot will: a module that fails to import, lacks the attribute or names something
    not callable refuses the config (ConfigError: ``handlers.NAME.function: <spec>: <why>``), and
    the supervisor itself never imports the platform's code. Not part of ``load``: a producer's
    ``Client.from_config()`` must not import the workers' code; ``run`` and a reload call it.
    ``on_start`` gets the child's pid (the supervisor keeps it out of its orphan sweep). The verdict
    is read from the child's stdout, never from its exit status alone: the supervisor's
    ``waitpid(-1)`` may reap it first (then the status reads 0)."""
    import contextlib
    import subprocess
    import sys

    todo = {n: {"function": h.function, "after_fork": h.after_fork, "path": h.path}
            for n, h in cfg.handlers.items() if h.function is not None}
    if not todo:
        return
    req = msgspec.json.encode({"sys_path": sys.path if sys_path is None else sys_path, "handlers": todo})
    first = sorted(todo)[0]
    with spawn_lock or contextlib.nullcontext():  # no process forked meanwhile holds the pipes open
        p = subprocess.Popen([sys.executable, "-m", "tender_pool.slots.function_import"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if on_start is not None:
        on_start(p.pid)
    try:
        out, err = p.communicate(req, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise ConfigError(f"handlers.{first}.function", todo[first]["function"],
                          f"importing the function handlers took more than {timeout:g} s") from None
    try:
        answers = msgspec.json.decode(out, type=dict[str, str | None]) if p.returncode == 0 else None
    except msgspec.DecodeError:
        answers = None
    if answers is None:  # the module killed its importer (os._exit at import, a signal)
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {p.returncode}"]
        raise ConfigError(f"handlers.{first}.function", todo[first]["function"],
                          f"the import check's process died: {tail[0]}")
    for name in sorted(answers):
        if answers[name]:
            what, _, rest = answers[name].partition(": ")  # "function: <spec>: <why>"
            spec, _, why = rest.partition(": ")
            raise ConfigError(f"handlers.{name}.{what}", spec, why)


def _check_url(url: str, key: str) -> None:
    schemes = ("redis://", "rediss://", "unix://", "redis+sentinel://", "redis+cluster://")
    ok = url == "embedded" or url.startswith(schemes)
    if not ok:
        raise ConfigError(key, url, "a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// URL, "
                          "or \"embedded\"")
    if url.startswith("redis+cluster://"):
        try:
            parse_cluster_url(url)
        except ValueError:
            raise ConfigError(key, url, "redis+cluster://host:port[,host:port…][/0]") from None
    if url.startswith("redis+sentinel://"):
        try:
            parse_sentinel_url(url)
        except ValueError:
            raise ConfigError(key, url, "redis+sentinel://host:port[,host:port…]/<service>[/<db>]") from None


def _check_timings(cfg: Config) -> None:
    """Settings that are each valid but cannot work together (the contract: rejected at load).

    - A slot reports to its supervisor only between blocking calls, and is killed as wedged after
      3 heartbeats of silence: a claim (BLMOVE) blocking ``claim_timeout`` plus one beat interval
      (``max(0.2, heartbeat / 3)``) must fit, hence ``heartbeat`` >= 0.3 and ``claim_timeout`` <
      2 × ``heartbeat``.
    - A job's SIGTERM → SIGKILL wait (``kill_grace``) must end before the host or slot it runs on is
      judged dead (3 heartbeats): otherwise a job that ignores SIGTERM gets its slot killed as
      silent (crash_cap instead of timeout) and another host may reclaim it while it still runs.
    - The socket timeout bounds every Redis call, so the calls that block on purpose must end first:
      the claim (``claim_timeout``) and ``WAIT`` (``wait_timeout``).
    """
    p, r = cfg.pool, cfg.redis
    if p.heartbeat < 0.3:
        raise ConfigError("pool.heartbeat", p.heartbeat, "at least 0.3 seconds")
    if not p.kill_grace < 3 * p.heartbeat:
        raise ConfigError("pool.kill_grace", p.kill_grace, f"less than 3 × pool.heartbeat ({3 * p.heartbeat:g})")
    if not p.claim_timeout < 2 * p.heartbeat:
        raise ConfigError("pool.claim_timeout", p.claim_timeout, f"less than 2 × pool.heartbeat ({2 * p.heartbeat:g})")
    if r.socket_timeout <= p.claim_timeout:
        raise ConfigError("redis.socket_timeout", r.socket_timeout, "more than pool.claim_timeout")
    if r.socket_timeout <= r.wait_timeout:
        raise ConfigError("redis.socket_timeout", r.socket_timeout, "more than redis.wait_timeout")
    # The fence: a host whose last successful heartbeat write was SENT longer than ``fence`` ago kills
    # its running jobs (TERM, kill_grace, KILL). Its host key lives 3 × heartbeat from that write, so
    # another host can reclaim no sooner; the jobs must be dead by then, with one housekeeper period
    # (heartbeat / 3) to spare for the loop that notices: fence + kill_grace + heartbeat/3 <= 3 × heartbeat.
    # And at least one heartbeat, so a single late write never kills anything.
    margin = p.heartbeat / 3
    if p.fence is None:
        p.fence = 3 * p.heartbeat - p.kill_grace - margin
        if p.fence < p.heartbeat:
            raise ConfigError("pool.kill_grace", p.kill_grace,
                              f"at most {3 * p.heartbeat - margin - p.heartbeat:g} (5/3 × pool.heartbeat) so that a "
                              "fence fits before another host may reclaim; or set pool.fence = 0 (no fence)")
    elif p.fence != 0:
        if p.fence < p.heartbeat:
            raise ConfigError("pool.fence", p.fence, f"at least pool.heartbeat ({p.heartbeat:g}), or 0 for no fence")
        if p.fence + p.kill_grace + margin > 3 * p.heartbeat + 1e-9:
            raise ConfigError("pool.fence", p.fence, f"at most 3 × heartbeat − kill_grace − heartbeat/3 "
                              f"({3 * p.heartbeat - p.kill_grace - margin:g}), or 0 for no fence")
    elif p.fence < 0:
        raise ConfigError("pool.fence", p.fence, "a number of seconds >= 0")
    if p.retry_backoff > p.retry_backoff_max:
        raise ConfigError("pool.retry_backoff_max", p.retry_backoff_max, "at least pool.retry_backoff")
    if r.wait_replicas is None:  # acknowledged = replicated wherever a Sentinel failover can happen
        r.wait_replicas = 1 if r.url.startswith("redis+sentinel://") else 0  # redis+cluster://: 0 (the contract)
    if r.wait_replicas < 0:
        raise ConfigError("redis.wait_replicas", r.wait_replicas, "an integer >= 0")


def parse_cluster_url(url: str) -> list[tuple[str, int]]:
    """``redis+cluster://host[:port][,host[:port]]…[/0]`` → the startup nodes (any one that answers
    finds the rest); the port defaults to 6379. A cluster has only db 0. Raises ValueError."""
    hosts, _, db = url[len("redis+cluster://") :].partition("/")
    if db.rstrip("/") not in ("", "0"):
        raise ValueError(f"a cluster has only db 0, not {db!r}")
    nodes = []
    for h in hosts.split(","):
        host, sep, port = h.rpartition(":")
        if not sep:
            host, port = h, "6379"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad cluster node address {h!r}")
        nodes.append((host, int(port)))
    return nodes


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], str, int]:
    """``redis+sentinel://host[:port][,host[:port]]…/service[/db]`` → (nodes, service, db); the port
    defaults to 26379, the service to ``mymaster``, the db to 0. Raises ValueError. Here, not in
    store/sentinel.py, so that a bad URL is a config error before any connection."""
    rest = url[len("redis+sentinel://") :]
    hosts, _, path = rest.partition("/")
    service, _, db = path.partition("/")
    nodes = []
    for h in hosts.split(","):
        host, sep, port = h.rpartition(":")
        if not sep:
            host, port = h, "26379"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad Sentinel address {h!r}")
        nodes.append((host, int(port)))
    db = db.rstrip("/")
    if db and not db.isdigit():
        raise ValueError(f"bad db {db!r}")
    return nodes, service or "mymaster", int(db or 0)


def _validate(cfg: Config, env: Mapping[str, str]) -> None:
    p = cfg.pool
    if not 1 <= p.worker_count <= 4:
        raise ConfigError("pool.worker_count", p.worker_count, "an integer from 1 to 4")
    for key, val, lo in (
        ("pool.max_tries", p.max_tries, 1),
        ("pool.crash_cap", p.crash_cap, 1),
        ("pool.max_waits", p.max_waits, 1),
    ):
        if val < lo:
            raise ConfigError(key, val, f"an integer >= {lo}")
    for key, val in (
        ("pool.kill_grace", p.kill_grace),
        ("pool.drain_timeout", p.drain_timeout),
        ("pool.heartbeat", p.heartbeat),
        ("pool.result_retention", p.result_retention),
        ("pool.retry_backoff", p.retry_backoff),
        ("pool.retry_backoff_max", p.retry_backoff_max),
        ("pool.claim_timeout", p.claim_timeout),
        ("extract.timeout", cfg.extract.timeout),
        ("redis.socket_timeout", cfg.redis.socket_timeout),
        ("redis.wait_timeout", cfg.redis.wait_timeout),
    ):
        if not val > 0:
            raise ConfigError(key, val, "a positive number of seconds")
        if not val < MAX_SECONDS:  # inf (TOML has it) would overflow every conversion to ms
            raise ConfigError(key, val, "a finite number of seconds (under ten years)")
    _check_timings(cfg)
    if not 0 <= p.inline_result_max <= 64 << 20:
        raise ConfigError("pool.inline_result_max", p.inline_result_max, "bytes, from 0 (never) to 67108864")
    for name, text in (("redis.prefix", cfg.redis.prefix), ("pool.queue", p.queue)):
        if not text or any(c in text for c in "{}: \t\n"):
            raise ConfigError(name, text, "a non-empty name without braces, colons or spaces")
    if not p.host_id:
        p.host_id = socket.gethostname()
    if any(c in p.host_id for c in "{}: \t\n|"):
        raise ConfigError("pool.host_id", p.host_id, "a name without braces, colons, bars or spaces")
    for i, root in enumerate(p.input_roots):
        if not os.path.isabs(root):
            raise ConfigError(f"pool.input_roots[{i}]", root, "an absolute path")
    heap = cfg.extract.jvm_heap
    if _jvm_bytes(heap) is None or not MIN_JVM_HEAP <= _jvm_bytes(heap) <= MAX_JVM_HEAP:  # type: ignore[operator]
        raise ConfigError("extract.jvm_heap", heap, 'a JVM size from "16m" to "64g", such as "512m"')
    for name, h in cfg.handlers.items():
        if name == "parse_markdown":
            raise ConfigError(f"handlers.{name}", name, "a name other than the built-in parse_markdown")
        _check_handler(name, h)
        if not 0 < h.timeout < MAX_SECONDS:  # type: ignore[operator]
            raise ConfigError(f"handlers.{name}.timeout", h.timeout, "a positive number of seconds (under ten years)")
        if h.per_user < 0:
            raise ConfigError(f"handlers.{name}.per_user", h.per_user, "an integer >= 0 (0 = no limit)")
    if cfg.extract.per_user < 0:
        raise ConfigError("extract.per_user", cfg.extract.per_user, "an integer >= 0 (0 = no limit)")
    if not 1_000 <= cfg.events.max_backlog <= 100_000_000:
        raise ConfigError("events.max_backlog", cfg.events.max_backlog, "an integer from 1000 to 100000000 (entries)")
    listen = cfg.metrics.listen
    if listen:
        host, _, port = listen.rpartition(":")
        if not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
            raise ConfigError("metrics.listen", listen, '"host:port" or "" to disable')
    state = Path(p.state_dir) if p.state_dir else _state_dir(env)
    p.state_dir = str(state)
    if not p.results_dir:
        p.results_dir = str(state / "results")
    if not cfg.status.socket:
        cfg.status.socket = str(_runtime_dir(env) / "status.sock")
    if cfg.status.group:
        import grp

        try:
            grp.getgrnam(cfg.status.group)
        except KeyError:
            raise ConfigError("status.group", cfg.status.group, "an existing group name") from None
    if cfg.redis.url == "embedded":  # every command finds the daemon's private server the same way
        cfg.embedded_redis = str(state / "redis")
        cfg.redis.url = f"unix://{state / 'redis' / 'redis.sock'}"
