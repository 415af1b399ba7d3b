"""lib/keys.lua, the one place Lua spells a key name, against store/keys.py's Keys: every name the
helper builds, run in a real redis-server (EVAL), for awkward parts too (':' in a user, unicode, a
brace), must be the name Keys builds."""

from __future__ import annotations

import json
import re

import pytest

from tender_pool.store import scripts
from tender_pool.store.keys import Keys

PARTS = ["u1", "a:b", "ü-ß", "{x}", "-"]
KINDS = ["parse_markdown", "k:2"]

# keyname(base, word, ...) → the Keys call that must spell the same name
BY_WORD = {
    "job": lambda k, a, b, c: k.job(a),
    "lock": lambda k, a, b, c: k.lock(a),
    "wait": lambda k, a, b, c: k.wait(a),
    "deps": lambda k, a, b, c: k.deps(a),
    "busy": lambda k, a, b, c: k.busy(a),
    "host": lambda k, a, b, c: k.host(a),
    "backlog": lambda k, a, b, c: k.backlog(a),
    "hibacklog": lambda k, a, b, c: k.hibacklog(a),
    "sem": lambda k, a, b, c: k.sem(a, b),
    "semwait": lambda k, a, b, c: k.semwait(a, b),
    "run": lambda k, a, b, c: k.run(a),
    "runjobs": lambda k, a, b, c: k.runjobs(a),
    "run_events": lambda k, a, b, c: k.run_events(a),
    "runwait": lambda k, a, b, c: k.runwait(a),
    "done": lambda k, a, b, c: k.done(a, b, c),
    "events": lambda k, a, b, c: k.events,
    "active": lambda k, a, b, c: k.active,
    "inready": lambda k, a, b, c: k.inready,
    "finished": lambda k, a, b, c: k.finished,
    "proc": lambda k, a, b, c: k.proc_pattern[:-2],  # the stem proc_parts reads a list name against
}
ARITY = {"sem": 2, "semwait": 2, "done": 3, "events": 0, "active": 0, "inready": 0, "finished": 0, "proc": 0}

EVAL = """
local base, out = KEYS[1], {}
for _, c in ipairs(cjson.decode(ARGV[1])) do
  local f, x = c[1], c[2]
  if f == 'key' then out[#out + 1] = keyname(base, x[1], x[2], x[3], x[4])
  elseif f == 'state' then out[#out + 1] = state_keys(base, x[1], x[2])
  elseif f == 'finished' then out[#out + 1] = finished_index(x[1], x[2])
  elseif f == 'proc' then
    local h, i, s, n = proc_parts(base, x[1])
    out[#out + 1] = h and {h, i, s, n} or false
  end
end
return cjson.encode(out)
"""


def run(r, base: str, calls: list) -> list:
    return json.loads(r.eval(scripts.prelude("keys") + EVAL, 1, base, json.dumps(calls)))


def test_the_helper_spells_every_word_it_knows() -> None:
    """Every word lib/keys knows is compared below (a new one fails here until it is)."""
    words = re.search(r"local KEY_WORD = \{(.*?)\}", scripts.part("keys"), re.S)[1]
    assert set(re.findall(r"(\w+) = '", words)) == set(BY_WORD)


@pytest.mark.parametrize("prefix,queue", [("tp", "tender_parse"), ("x:y", "q{1}")])
def test_the_lua_helper_builds_what_keys_builds(redis_server, prefix: str, queue: str) -> None:
    r = redis_server.client()
    k = Keys(prefix, queue)
    calls, want = [], []
    for word, build in BY_WORD.items():
        n = ARITY.get(word, 1)
        combos = [(a, b, c) for a in (KINDS if n >= 2 else PARTS) for b in (PARTS if n >= 2 else [None])
                  for c in (["h1", "ab:cd"] if n == 3 else [None])]
        for a, b, c in combos if n else [(None, None, None)]:
            calls.append(["key", [word, a, b, c][: n + 1]])
            want.append(build(k, a, b, c))
    for user in PARTS:
        for run_id in (None, "", "r1", "r:2"):
            calls.append(["state", [user, run_id or ""]])  # a job without a run reads as ""
            want.append(k.state_keys(user, run_id or None))
    for member in ("state:failed", "user:a:b", "kind:k", "trim"):
        calls.append(["finished", [k.finished, member]])
        want.append(k.finished_trim if member == "trim" else k.finished_index(member))
    got = run(r, k.base, calls)
    assert got == want


def test_proc_parts_reads_what_keys_spells(redis_server) -> None:
    r = redis_server.client()
    k = Keys("tp", "q")
    names = [k.proc("h1", "inc9", 3, 17), k.proc("host-2", "a1b2", 0, 0), Keys("tp", "other").proc("h", "i", 1, 1),
             f"{k.base}:proc:h:i:x.1", f"{k.base}:proclists", "junk"]
    got = run(r, k.base, [["proc", [n]] for n in names])
    assert got == [list(k.proc_parts(n)) if k.proc_parts(n) else False for n in names]
    assert got[:2] == [["h1", "inc9", 3, 17], ["host-2", "a1b2", 0, 0]] and got[2:] == [False] * 4
