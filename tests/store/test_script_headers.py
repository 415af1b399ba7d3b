"""Every Lua script's call Struct (store/script_args.py) against the script's header: the same KEYS
and ARGV positions, blocks and open-ended tails, and each field named for what the header says sits
at its position."""

from __future__ import annotations

import re

import msgspec
import pytest

from tender_pool.store import script_args, scripts
from tender_pool.store.keys import Keys

ALL = sorted({*scripts.NAMES, *(f"{b}_many" for b in scripts.BATCHES)})
_STRUCTURAL = {"key", "keys", "args"}  # words that say what a field is, not what the header calls it


def header(name: str) -> str:
    """The comment lines a script opens with, as one line of text."""
    out = []
    for line in scripts.source(name).splitlines():
        if not line.startswith("--"):
            break
        out.append(line[2:].strip())
    return " ".join(out)


def keys_layout(h: str) -> list[tuple[int, int, str]]:
    """(first position, width, label) per KEYS entry of a header; width 0: to the end."""
    first = h.find("KEYS[")
    if first < 0:
        return []
    ends = [m.start() for m in (re.search(r"ARGV(?::|\[1\.\.)", h[first:]), re.search(r"\bReturns\b", h[first:]))
            if m]
    text = h[first:first + min(ends)] if ends else h[first:]
    toks = list(re.finditer(r"KEYS\[(\d+)(?:\.\.(\w*))?\]", text))
    out = []
    for i, t in enumerate(toks):
        label = text[t.end():toks[i + 1].start() if i + 1 < len(toks) else len(text)]
        start, end = int(t[1]), t[2]
        width = 1 if end is None else (int(end) - start + 1 if end.isdigit() else 0)
        out.append((start, width, label))
    return out


def argv_layout(h: str) -> list[tuple[int, int, str]]:
    """(first position, width, label) per ARGV entry of a header (``1 x, 2 y, 3.. z``; ``ARGV[1..N]
    as …; then N+1 …``; or no numbers: one list of any length)."""
    m = re.search(r"ARGV(?::|\[1\.\.(\d+)\])", h)
    if not m:
        return []
    body = re.split(r"\bReturns\b", h[m.end():])[0]
    out: list[tuple[int, int, str]] = []
    n = 1
    if m[1]:
        out.append((1, int(m[1]), body.split(";")[0]))
        n = int(m[1]) + 1
    elif not re.match(r"\s*1(\.\.)?\s", body):
        return [(1, 0, body)]
    found = []
    pos = 0
    while True:
        mm = re.compile(rf"(?:^\s*|[,;]\s*(?:then\s+)?){n}(\.\.)?\s").search(body, pos)
        if not mm:
            break
        found.append((n, mm))
        pos = mm.end()
        if mm[1]:
            break
        n += 1
    for i, (k, mm) in enumerate(found):
        end = found[i + 1][1].start() if i + 1 < len(found) else len(body)
        out.append((k, 0 if mm[1] else 1, body[mm.end():end]))
    return out


def struct_layout(layout: tuple[tuple[str, int], ...]) -> list[tuple[int, int, str]]:
    out, at = [], 1
    for name, width in layout:
        out.append((at, width, name))
        at += width or 0
    return out


def _check(name: str, header_items, struct_items) -> None:
    assert [(s, w) for s, w, _ in header_items] == [(s, w) for s, w, _ in struct_items], (
        f"{name}.lua: header {[(s, w) for s, w, _ in header_items]} vs Struct {[(s, w, f) for s, w, f in struct_items]}")
    for (start, _, label), (_, _, field) in zip(header_items, struct_items):
        words = [w for w in field.split("_") if w not in _STRUCTURAL]
        flat = re.sub(r"[^a-z0-9]", "", label.lower())  # 'ready:hi' and 'UTF-8' read as 'readyhi', 'utf8'
        assert all(w in flat for w in words), f"{name}.lua [{start}]: field {field!r} vs header {label!r}"


@pytest.mark.parametrize("name", ALL)
def test_every_script_has_a_struct_matching_its_header(name: str) -> None:
    cls = script_args.by_script()[name]
    h = header(name)
    _check(name, keys_layout(h), struct_layout(cls.KEYS))
    _check(name, argv_layout(h), struct_layout(cls.ARGV))
    laid = [f for f, _ in cls.KEYS] + [f for f, _ in cls.ARGV]
    assert sorted(laid) == sorted(cls.__struct_fields__), f"{name}: every field exactly once in KEYS or ARGV"


def test_a_struct_for_every_script_and_no_other() -> None:
    assert sorted(script_args.by_script()) == ALL


def test_the_header_reader_sees_a_moved_or_renamed_entry() -> None:
    """The check is not vacuous: a header with one position moved, or a field named for another
    key, is reported."""
    cls = script_args.by_script()["unstick"]
    h = header("unstick")
    with pytest.raises(AssertionError):
        _check("unstick", keys_layout(h.replace("KEYS[5] ready:hi", "KEYS[6] ready:hi")), struct_layout(cls.KEYS))
    with pytest.raises(AssertionError):
        _check("unstick", keys_layout(h), struct_layout((("wait", 1), ("lock", 1), *cls.KEYS[2:])))
    with pytest.raises(AssertionError):
        _check("unstick", argv_layout(h.replace("1 user, 2 lock TTL ms", "1 user, 2 lock TTL ms, 3 x")),
               struct_layout(cls.ARGV))


def test_a_struct_lays_out_its_call() -> None:
    k = Keys("tp", "q")
    c = script_args.UnstickCall(lock=k.lock("u"), wait=k.wait("u"), waitusers=k.waitusers, ready_lo=k.ready_lo,
                                ready_hi=k.ready_hi, user="u", lock_ttl=5)
    assert c.keys() == [k.lock("u"), k.wait("u"), k.waitusers, k.ready_lo, k.ready_hi]
    assert c.args() == ["u", 5]
    d = script_args.DepwaitsCountCall(depwaits=k.depwaits, deps=[k.deps("a"), k.deps("b")], ids=["a", "b"])
    assert d.keys() == [k.depwaits, k.deps("a"), k.deps("b")] and d.args() == ["a", "b"]
    bad = script_args.PromoteDueCall(delayed=k.delayed, ready_lo=k.ready_lo, ready_hi=k.ready_hi, batch=1)
    assert bad.args() == [1]
    with pytest.raises(ValueError):
        script_args.DeadletterCall(proc="p", dead=k.dead, job=k.job("x"), finished=k.finished, deps=k.deps("x"),
                                   ready_lo=k.ready_lo, state_block=k.state_keys("u")[:7], hi_keys=k.hi_keys("u"),
                                   entry=b"x", reason="r", retention=1, job_hash="", entry_utf8="x").keys()
    with pytest.raises(TypeError):
        script_args.UnstickCall(lock="l")  # every field is required: none can be left out by accident
    assert msgspec.structs.asdict(c)["user"] == "u"
