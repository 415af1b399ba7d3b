"""The Lua loader (store/scripts.py): every script and lib part names on its ``-- needs:`` line
exactly the parts whose functions it calls, the joined text defines everything it calls before the
call, every text compiles in a real redis-server, and the batch keeps working."""

from __future__ import annotations

import re

import pytest
import redis

from tender_pool.store import scripts

_IDENT = re.compile(r"(?<![.:\w])([A-Za-z_]\w*)\b(?!\s*=[^=])")  # not a field name or an assignment
_DEFINES = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.M)


def _code(text: str) -> str:
    """Lua without its comments and string literals (neither names a function)."""
    text = re.sub(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"", "''", text)
    return re.sub(r"--[^\n]*", "", text)


def _defined() -> dict[str, str]:
    """Every top-level name a lib part defines → that part."""
    out: dict[str, str] = {}
    for name in scripts.parts():
        for d in _DEFINES.findall(scripts.part(name)):
            assert d not in out, f"{d} is defined by both lib/{out[d]} and lib/{name}"
            out[d] = name
    return out


def _calls(text: str, own: str | None = None) -> set[str]:
    """The lib parts ``text`` uses a name of (names it defines itself do not count)."""
    defined = _defined()
    return {defined[w] for w in _IDENT.findall(_code(text)) if w in defined and defined[w] != own}


@pytest.mark.parametrize("name", scripts.parts())
def test_a_part_needs_exactly_the_parts_it_calls(name: str) -> None:
    assert set(scripts.needs_of(scripts.part(name))) == _calls(scripts.part(name), own=name)


@pytest.mark.parametrize("name", [*scripts.NAMES, "requeue_many"])
def test_a_script_needs_exactly_the_parts_it_calls(name: str) -> None:
    assert set(scripts.needs_of(scripts.source(name))) == _calls(scripts.source(name))


def test_every_script_in_the_folder_is_known() -> None:
    on_disk = {p.name[:-4] for p in scripts._lua().iterdir() if p.name.endswith(".lua")}
    assert on_disk == {*scripts.NAMES, *(f"{b}_many" for b in scripts.BATCHES)}


@pytest.mark.parametrize("name", scripts.NAMES)
def test_the_joined_text_defines_each_name_before_its_use(name: str) -> None:
    """A Lua ``local`` is visible only below its definition: in the text Redis runs, each part
    comes after every part it uses, and carries no part the script cannot reach."""
    order = scripts.closure(scripts.needs_of(scripts.source(name)))
    for i, part in enumerate(order):
        assert _calls(scripts.part(part), own=part) <= set(order[:i]), (part, order)
    assert scripts.text(name).endswith(scripts.source(name))
    assert scripts.text(name) == "".join(scripts.part(p) + "\n" for p in order) + scripts.source(name)


def test_a_small_script_carries_only_its_parts() -> None:
    assert scripts.closure(scripts.needs_of(scripts.source("stamp"))) == ("base",)
    assert scripts.closure(()) == ()
    assert len(scripts.text("stamp")) < len(scripts.text("take")) // 10
    assert scripts.text("busy_clear") == scripts.source("busy_clear")


def test_a_missing_needs_line_or_part_is_an_error() -> None:
    with pytest.raises(ValueError):
        scripts.needs_of("-- KEYS[1] x\nreturn 1\n")
    assert scripts.needs_of("-- needs: (no lib part)\nreturn 1\n") == ()
    assert scripts.needs_of("-- a\n-- needs: lock, base\nreturn 1\n") == ("lock", "base")
    with pytest.raises(KeyError):
        scripts.closure(("no_such_part",))


def test_every_text_compiles_and_the_batch_runs(redis_server) -> None:
    r = redis_server.client()
    for name in scripts.NAMES:
        assert r.script_load(scripts.text(name))
    assert r.script_load(scripts.batch_text("requeue"))
    # stamp through the loader: the only part it carries (base: now_ms) is defined when it runs
    r.rpush("tp:{q}:proc:h:i:1.1", "a")
    out = scripts.register(r, "stamp")["stamp"](keys=["tp:{q}:proc:h:i:1.1", "tp:{q}:started"])
    assert out[1:] == [b"a", out[2]] and int(out[2]) == int(out[0])
    with pytest.raises(redis.ResponseError):
        r.eval(scripts.source("stamp"), 2, "tp:{q}:proc:h:i:1.1", "tp:{q}:started")  # no prelude: now_ms unknown
