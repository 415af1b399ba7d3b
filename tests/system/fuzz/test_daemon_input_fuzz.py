"""Fuzzing what reaches a running daemon: entries a raw
producer LPUSHes straight onto ``ready:lo`` and input file paths. One real daemon (2 slots) serves
every example of the module; after each example a valid job submitted behind the junk must still
complete, so "the daemon keeps serving" is checked all along, not once at the end.

Oracle (CONTRACT.md "Job states and error kinds"):
- a raw entry that is not a SubmitRequest (garbage bytes, wrong types, missing or unknown fields,
  too deep to decode) or names an unknown kind → a dead letter ``{raw, reason}`` with a specific,
  non-empty reason, and nothing else happens;
- a valid SubmitRequest → adopted: a job that then runs (a ``noop`` here) and completes, or fails
  ``dependency_failed`` when its ``after`` names no job;
- a payload ``file`` that does not resolve inside ``input_roots`` (``..``, absolute paths elsewhere,
  symlinks out) → failed ``outside_roots``; inside but not a regular file (missing, a directory, a
  FIFO, a device, a symlink loop) → failed ``file_not_found``; both final, before any handler ran.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import msgspec
import pytest
from conftest import wait_until  # tests/conftest.py
from hypothesis import assume, event, given
from hypothesis import strategies as st

from support.keyspace import QUEUE
from tender_pool.store.submission import MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH, SubmitRequest

from .conftest import fuzz
from .test_submit_fuzz import Text, depth, id_ok, user_ok

KINDS = {"noop", "behave", "slow", "long", "parse_markdown"}


class Daemon:
    """The module's daemon and the test's handles on its Redis keys."""

    def __init__(self, h, root: Path):
        self.h, self.root = h, root
        self.k, self.r = h.k, h.r

    def push(self, entry: bytes) -> None:
        self.r.lpush(self.k.ready_lo, entry)

    def idle(self) -> bool:
        """Nothing left to claim and nothing claimed (every proc list empty)."""
        if self.r.llen(self.k.ready_lo) or self.r.llen(self.k.ready_hi):
            return False
        return not any(self.r.llen(p) for p in self.r.scan_iter(match=self.k.proc_pattern))

    def wait_idle(self, timeout: float = 20) -> None:
        try:
            wait_until(self.idle, timeout, what="every entry handled")
        except AssertionError:
            state = {k.decode(): self.r.lrange(k, 0, 20) for k in
                     [*self.r.scan_iter(match=self.k.proc_pattern), self.k.ready_lo.encode(), self.k.ready_hi.encode()]}
            raise AssertionError(f"entries left after {timeout} s: {state}\n{self.logs()}") from None

    def dead_since(self, before: int) -> list[dict]:
        n = self.r.llen(self.k.dead) - before
        return [json.loads(x) for x in self.r.lrange(self.k.dead, 0, n - 1)] if n > 0 else []

    def still_serving(self) -> None:
        jid = self.h.submit(kind="noop", user=f"probe-{uuid.uuid4().hex[:6]}", id=f"probe-{uuid.uuid4().hex}")
        self.h.wait_state(jid, ("completed",), timeout=15)

    def logs(self) -> str:
        return "\n".join(d.logs()[-3000:] for d in self.h.daemons)


@pytest.fixture(scope="module")
def daemon(world):
    root = world.tmp / "inbox"
    root.mkdir()
    world.config(input_roots=[str(root)], workers=2)
    d = world.daemon()
    d.wait_slots(2)
    dm = Daemon(world, root)
    dm.still_serving()
    yield dm
    assert d.stop() == 0


# --- raw producers -------------------------------------------------------------------------------

hostile = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "~wake", "a{b}", "{" + QUEUE + "}", "u:1", "a\nb", Text("x", 10 * 1024), "\x00"]),
)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=10))
payloads = st.one_of(
    st.dictionaries(st.text(max_size=8), json_scalar, max_size=3),
    json_scalar,  # not an object: a ValidationError
    st.lists(json_scalar, max_size=2),
)


@st.composite
def submit_like(draw) -> dict:
    """A dict shaped like a SubmitRequest, each field right, wrong in type, or missing."""
    d: dict = {}
    if draw(st.integers(0, 9)):
        d["kind"] = draw(st.one_of(st.just("noop"), st.just("noop"), hostile, json_scalar))
    if draw(st.integers(0, 9)):
        d["user"] = draw(st.one_of(st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True), hostile, json_scalar))
    if draw(st.booleans()):
        d["payload"] = draw(payloads)
    if draw(st.booleans()):
        d["id"] = draw(st.one_of(st.from_regex(r"[A-Za-z0-9._:-]{1,30}", fullmatch=True), hostile, json_scalar))
    if draw(st.integers(0, 3)) == 0:
        d["after"] = draw(st.one_of(st.lists(st.from_regex(r"[a-z0-9]{1,10}", fullmatch=True), max_size=2), json_scalar))
    if draw(st.integers(0, 3)) == 0:
        d["priority"] = draw(st.one_of(st.sampled_from(["bulk", "interactive"]), hostile))
    if draw(st.integers(0, 9)) == 0:
        d[draw(st.text(min_size=1, max_size=8))] = 1  # an unknown field
    return d


valid_submits = st.fixed_dictionaries(
    {"kind": st.just("noop"), "user": st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True)},
    optional={
        "payload": st.dictionaries(st.text(max_size=8), json_scalar, max_size=3),
        "id": st.from_regex(r"[A-Za-z0-9._:-]{1,30}", fullmatch=True),
        "after": st.lists(st.from_regex(r"nosuch[a-z0-9]{1,10}", fullmatch=True), max_size=1),
        "priority": st.sampled_from(["bulk", "interactive"]),
    },
)


def nest(n: int) -> bytes:
    return b'{"kind": "noop", "user": "u", "payload": ' + b'{"a":' * n + b"1" + b"}" * n + b"}"


raw_entries = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=500, max_size=2000),  # past the 512-byte "could be a job id" cut
    st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass")),
    submit_like().map(lambda d: json.dumps(d).encode()),
    valid_submits.map(lambda d: json.dumps(d).encode()),
    submit_like().map(lambda d: json.dumps(d)[:-1].encode()),  # truncated JSON
    st.sampled_from([b"[]", b"{}", b"null", b'"noop"', b"\xff\xfe", b'{"kind": "noop", "user": "u"} trailing']),
)


class Expect(msgspec.Struct):
    what: str  # "dead", "adopted", "known" (a reported finding: outcome not asserted)
    req: SubmitRequest | None = None


def expect(entry: bytes) -> Expect:
    try:
        req = msgspec.json.decode(entry, type=SubmitRequest)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return Expect("dead")
    if req.kind not in KINDS or not contract_valid(req):
        return Expect("dead")
    return Expect("adopted", req)


def contract_valid(req: SubmitRequest) -> bool:
    """CONTRACT.md's rules for a submission, which a raw producer's entry must meet as well (ids are
    validated at submit and for raw producers alike)."""
    if req.id is not None and not id_ok(req.id):
        return False
    if not user_ok(req.user) or depth(req.payload) > MAX_PAYLOAD_DEPTH:
        return False
    if len(msgspec.json.encode(req.payload)) > MAX_PAYLOAD_BYTES:
        return False
    return all(id_ok(a) and a != req.id for a in req.after)


def _existing_id(d: Daemon, entry: bytes) -> bool:
    try:
        return len(entry) < 512 and bool(d.r.exists(d.k.job(entry.decode("utf-8"))))
    except UnicodeDecodeError:
        return False


@pytest.mark.timeout(150)
@fuzz(max_examples=50, deadline_s=30, shrink=False)
@given(entries=st.lists(raw_entries, min_size=1, max_size=4))
def test_raw_entries_are_adopted_or_dead_lettered_and_the_daemon_serves_on(daemon, entries):
    d = daemon
    # b"": test_an_empty_entry_is_dead_lettered (a finding); "~wake" is the wake token, not junk
    entries = [e for e in entries if e not in (b"", b"~wake") and not _existing_id(d, e)]
    assume(entries)
    plan = []
    for e in entries:
        x = expect(e)
        if x.what == "adopted":
            if x.req.id is not None:  # unique per example: an id seen before queues nothing
                x.req.id = f"{x.req.id[:150]}.{uuid.uuid4().hex[:8]}"
                e = msgspec.json.encode(x.req)
        plan.append((e, x))
        event(f"entry {x.what}{' with id' if x.req and x.req.id else ''}")
    before_dead = d.r.llen(d.k.dead)

    for e, _ in plan:
        d.push(e)
    d.wait_idle()

    dead = d.dead_since(before_dead)
    want_dead = [e for e, x in plan if x.what == "dead"]
    got_raw = sorted(x["raw"] for x in dead)
    assert got_raw == sorted(e.decode("utf-8", "backslashreplace") for e in want_dead), (dead, d.logs())
    for letter in dead:
        assert letter["reason"] and len(letter["reason"]) > 10, letter
    for e, x in plan:
        if x.what == "adopted" and x.req.id is not None:
            want = ("failed",) if x.req.after else ("completed",)
            rec = daemon.h.wait_state(x.req.id, want, timeout=15)
            if x.req.after:
                assert rec.error.kind == "dependency_failed", rec
    d.still_serving()


# --- raw entries that break the contract (found by this fuzz; fixed since) -------------------------


def _raw(**fields) -> bytes:
    return json.dumps({"kind": "noop", "user": "u-raw", **fields}).encode()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("entry, why", [
    (_raw(id="~wake"), "adopted as job ~wake, whose ready entry is then taken for the wake token: queued for ever"),
    (_raw(id="x" * 600), "adopted, then dead-lettered as 'not a job id and not a valid job message'"),
    (_raw(id="a b{c}"), "adopted with an id the contract refuses"),
    (_raw(user="a{b}"), "adopted with a user the contract refuses"),
    (_raw(user="a\nb"), "adopted with a user holding a control character"),
    (_raw(payload={"big": "z" * (MAX_PAYLOAD_BYTES + 10)}), "adopted past MAX_PAYLOAD_BYTES"),
], ids=["id_wake", "id_600", "id_braces", "user_braces", "user_newline", "payload_too_big"])
def test_raw_entries_breaking_the_contract_are_dead_lettered(daemon, entry, why):
    """CONTRACT.md: ids 1–200 of ``[A-Za-z0-9._:-]``, users without braces or control characters;
    Raw producers' entries are validated too. Each of these was adopted (``why``); it
    is dead-lettered with the check's reason (``BadInput``'s message)."""
    d = daemon
    before = d.r.llen(d.k.dead)
    d.push(entry)
    d.wait_idle()
    wait_until(lambda: d.dead_since(before), 5, what="the dead letter")
    dead = d.dead_since(before)
    try:
        assert [x["raw"] for x in dead] == [entry.decode()], why
        assert any(w in dead[0]["reason"] for w in ("job id", "user", "payload")), dead[0]["reason"]
    finally:
        d.still_serving()


@pytest.mark.timeout(60)
def test_a_raw_self_dependency_fails_as_dependency_cycle(daemon):
    """CONTRACT.md: "``dependency_cycle`` is for what raw producers push". A raw
    ``{"id": "X", "after": ["X"]}`` was adopted and parked behind itself: ``waiting`` for ever,
    ``status`` healthy. It fails (final) with ``dependency_cycle``, or is dead-lettered."""
    d = daemon
    jid = f"selfdep.{uuid.uuid4().hex[:8]}"
    before = d.r.llen(d.k.dead)
    d.push(_raw(id=jid, after=[jid]))
    try:
        wait_until(lambda: d.dead_since(before) or ((j := d.h.job(jid)) and j.state.terminal), 5,
                   what="the self-dependent job to end")
        j = d.h.job(jid)
        assert j is None or (j.state.value == "failed" and j.error.kind == "dependency_cycle"), j
    finally:
        d.still_serving()


# --- input paths ---------------------------------------------------------------------------------


def _make_paths(root: Path, outside: Path) -> dict[str, str]:
    """One of each kind of path, made once per module."""
    (root / "ok.txt").write_text("hello")
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "deep.txt").write_text("deep")
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("secret")
    links = {
        "link_out": outside / "secret.txt",
        "link_in": root / "ok.txt",
        "link_dir_out": outside,
        "link_dev": Path("/dev/null"),
    }
    for name, target in links.items():
        if not (root / name).is_symlink():
            (root / name).symlink_to(target)
    if not (root / "loop_a").is_symlink():
        (root / "loop_a").symlink_to(root / "loop_b")
        (root / "loop_b").symlink_to(root / "loop_a")
    if not (root / "fifo").exists():
        os.mkfifo(root / "fifo")
    if not (root / "chardev").exists():
        os.mknod(root / "chardev", 0o600 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
    return {
        "ok": str(root / "ok.txt"),
        "deep": str(root / "sub" / "deep.txt"),
        "dotdot_in": f"{root}/sub/../ok.txt",
        "dotdot_out": f"{root}/../{outside.name}/secret.txt",
        "abs_out": str(outside / "secret.txt"),
        "etc": "/etc/hostname",
        "link_out": str(root / "link_out"),
        "link_in": str(root / "link_in"),
        "link_dir_out": str(root / "link_dir_out" / "secret.txt"),
        "link_dev": str(root / "link_dev"),
        "loop": str(root / "loop_a"),
        "fifo": str(root / "fifo"),
        "chardev": str(root / "chardev"),
        "dir": str(root / "sub"),
        "root": str(root),
        "missing": str(root / "nope.txt"),
        "relative": "ok.txt",
        "slash": "/",
    }


def expected_kind(path, root: Path) -> str:
    """completed | outside_roots | file_not_found, from the contract: resolve, then judge."""
    if not isinstance(path, str) or not path:
        return "file_not_found"
    real = Path(os.path.realpath(path))
    rroot = Path(os.path.realpath(root))
    if real != rroot and rroot not in real.parents:
        return "outside_roots"
    return "completed" if real.is_file() else "file_not_found"


@pytest.fixture(scope="module")
def paths(daemon):
    return _make_paths(daemon.root, daemon.h.tmp / "outside")


@pytest.mark.timeout(150)
@fuzz(max_examples=40, deadline_s=30, shrink=False)
@given(picks=st.lists(st.one_of(
    st.tuples(st.just("path"), st.sampled_from(
        ["ok", "deep", "dotdot_in", "dotdot_out", "abs_out", "etc", "link_out", "link_in", "link_dir_out", "link_dev",
         "loop", "fifo", "chardev", "dir", "root", "missing", "relative", "slash"])),
    st.tuples(st.just("suffix"), st.sampled_from(["ok", "dir", "root", "missing"]),
              st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)),
    st.tuples(st.just("value"), st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2),
                                          st.just(""), st.just({"a": 1}))),
), min_size=1, max_size=4), kind=st.sampled_from(["noop", "parse_markdown"]))
def test_input_paths_fail_with_a_specific_kind_and_the_daemon_serves_on(daemon, paths, picks, kind):
    d = daemon
    jobs = []
    for pick in picks:
        if pick[0] == "path":
            path = paths[pick[1]]
        elif pick[0] == "suffix":
            path = paths[pick[1]] + "/" + pick[2]
        else:
            path = pick[1]  # not a path at all
        want = expected_kind(path, d.root)
        if kind == "parse_markdown" and want == "completed":
            continue  # a text file is not a document: that is the extraction fuzz's business
        event(f"path {want}")
        jid = f"path.{uuid.uuid4().hex[:10]}"
        d.h.submit(kind=kind, user=f"u{len(jobs)}", payload={"file": path}, id=jid)
        jobs.append((jid, path, want))
    for jid, path, want in jobs:
        rec = d.h.wait_state(jid, ("completed", "failed"), timeout=20)
        if want == "completed":
            assert rec.state.value == "completed", (path, rec)
        else:
            assert rec.state.value == "failed" and rec.error.kind == want, (path, want, rec.error)
            assert rec.tries == 0 and rec.attempts == 0, (path, rec)  # rejected before any handler ran: final
    d.still_serving()




@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["nul", "long_component"])
def test_unresolvable_paths_fail_at_once_as_file_not_found(daemon, paths, name):
    """``{"file": "<root>/a\\u0000b"}`` → ``os.path.realpath`` raises ValueError (embedded null
    byte); ``{"file": "<root>/" + "a" * 300}`` → ``Path.is_file`` raises OSError ENAMETOOLONG. Both
    ended ``failed handler_failed: could not start: …`` after 3 tries (found by this fuzz; fixed
    since); they fail ``file_not_found`` at once."""
    d = daemon
    path = f"{d.root}/a\x00b" if name == "nul" else f"{d.root}/{'a' * 300}"
    jid = f"bad-path.{uuid.uuid4().hex[:8]}"
    d.h.submit(kind="noop", user="u-badpath", payload={"file": path}, id=jid)
    rec = d.h.wait_state(jid, ("completed", "failed"), timeout=20)
    try:
        assert rec.error.kind == "file_not_found" and rec.tries == 0, rec.error
    finally:
        d.still_serving()


@pytest.mark.timeout(60)
def test_an_empty_entry_is_dead_lettered(daemon):
    """``LPUSH ready:lo ""`` (a producer's bug: an empty id). On the slot's hot path the slot
    BLMOVEs it into its processing list and hands ``b""`` to ``take``, where an empty entry means
    "none claimed, take the next one": the entry is never loaded, never dead-lettered, and stays in
    the processing list (two copies after 20 s), with no log line. Before, it was dead-lettered as
    "not a job id and not a valid job message". It should be a dead letter again."""
    d = daemon
    before = d.r.llen(d.k.dead)
    d.push(b"")
    try:
        d.wait_idle(5)
        assert [x["raw"] for x in d.dead_since(before)] == [""]
    finally:
        for p in d.r.scan_iter(match=d.k.proc_pattern):
            d.r.lrem(p, 0, b"")
        d.r.lrem(d.k.ready_lo, 0, b"")
        d.still_serving()


@pytest.mark.timeout(60)
def test_a_raw_entry_nested_too_deep_is_dead_lettered(daemon):
    """(Last in the module: a failure leaves an entry behind, removed in ``finally``.) A raw entry
    whose payload nests 60,000 deep: ``msgspec.json.decode`` raised RecursionError, which
    ``Slot.load`` did not catch; the entry stayed in the slot's processing list until the next
    drain (found by this fuzz; fixed since). It is a dead letter like any other."""
    d = daemon
    before = d.r.llen(d.k.dead)
    entry = nest(60000)
    d.push(entry)
    try:
        d.wait_idle(10)
        assert [x["raw"] for x in d.dead_since(before)] == [entry.decode()]
    finally:
        for p in d.r.scan_iter(match=d.k.proc_pattern):
            d.r.lrem(p, 0, entry)
        d.r.lrem(d.k.ready_lo, 0, entry)
        d.still_serving()
