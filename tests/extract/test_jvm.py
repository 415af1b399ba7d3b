"""The legacy .doc/.xls CLI and its Python driver, run against the shared corpus.

Most checks share one warm-JVM pass over every .doc/.xls in the corpus (session fixture), which keeps the
file well under a minute on 2 cores; the lifecycle tests (timeouts, kills, recycling, fork) start their own.
"""

from __future__ import annotations

import collections
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from tender_pool.extract import jvm
from tender_pool.extract.blocks import End, Failure, Image, Meta, Para, Sheet, TableBlock, decode_line

PER_FILE_TIMEOUT = 30.0
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="session")
def outputs(jvm_build, manifest, corpus_dir) -> dict[str, list[bytes]]:
    """Raw stdout lines per corpus .doc/.xls, from one serve JVM fed every file in turn."""
    names = sorted(n for n, e in manifest.items() if e["kind"] in ("doc", "xls"))
    proc = subprocess.Popen(
        [*jvm.java_command("512m"), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    result: dict[str, list[bytes]] = {}
    buf = b""
    try:
        for name in names:
            mode = manifest[name]["kind"]
            path = str(corpus_dir / "files" / name)
            proc.stdin.write(json.dumps({"mode": mode, "path": path}).encode() + b"\n")
            proc.stdin.flush()
            deadline = time.monotonic() + PER_FILE_TIMEOUT
            lines: list[bytes] = []
            while True:
                while b"\n" not in buf:
                    left = deadline - time.monotonic()
                    assert left > 0, f"{name}: no end line within {PER_FILE_TIMEOUT} s (hang)"
                    r, _, _ = select.select([proc.stdout], [], [], left)
                    if r:
                        chunk = os.read(proc.stdout.fileno(), 1 << 16)
                        assert chunk, f"{name}: serve JVM died (exit {proc.poll()})"
                        buf += chunk
                line, _, buf = buf.partition(b"\n")
                lines.append(line)
                if line == b'{"t":"end"}':
                    break
            result[name] = lines
    finally:
        proc.kill()
        proc.wait()
    return result


def blocks_of(outputs, name):
    return [decode_line(line) for line in outputs[name]]


def text_of(blocks) -> str:
    parts = []

    def table(t):
        for row in t.rows:
            for c in row:
                parts.append(c.text)
                if c.table:
                    table(c.table)

    for b in blocks:
        if isinstance(b, Para):
            parts.append(b.text)
        elif isinstance(b, TableBlock):
            table(b.table)
        elif isinstance(b, Sheet):
            parts += [b.name, b.header]  # sheet names are text too (DBCSSheetName.xls has nothing else)
            parts.extend(c.v for c in b.cells)
            parts.append(b.footer)
    return "\n".join(parts)


def test_every_line_of_every_file_decodes(outputs, manifest):
    bad = []
    for name, lines in outputs.items():
        try:
            decoded = [decode_line(line) for line in lines]
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            bad.append(f"{name}: {e}")
            continue
        if not isinstance(decoded[-1], End) or any(isinstance(b, End) for b in decoded[:-1]):
            bad.append(f"{name}: end is not the last and only end line")
        errors = [b for b in decoded if isinstance(b, Failure)]
        if errors and (len(decoded) != 2 or not isinstance(decoded[0], Failure)):
            bad.append(f"{name}: an error must be alone before end")
        if not errors and not isinstance(decoded[0], Meta):
            bad.append(f"{name}: first line is not meta")
    assert not bad, bad
    assert len(outputs) == sum(1 for e in manifest.values() if e["kind"] in ("doc", "xls"))


def test_expected_outcomes(outputs, manifest):
    """ok files give text, encrypted and corrupt ones say so, empty/old ones end in a typed error or best effort."""
    wrong = []
    for name in outputs:
        e = manifest[name]
        blocks = blocks_of(outputs, name)
        err = next((b for b in blocks if isinstance(b, Failure)), None)
        text = text_of(blocks).strip()
        expect = e["expect"]
        if "misnamed" in e.get("tags", []):
            ok = err is not None and err.kind == "unsupported"  # RTF/OOXML under a .doc name: another reader's job
        elif expect == "ok":
            ok = err is None and len(text) > 0
        elif expect == "encrypted":
            ok = err is not None and err.kind == "encrypted"
        elif expect == "old-format":
            ok = (err is not None and err.kind == "old-format") or (
                err is None and blocks[0].engine.endswith("-old") and text
            )
        elif expect == "empty":
            ok = (err is not None and err.kind == "empty") or (err is None and len(text) < 40)
        elif expect == "corrupt":  # every one in the corpus is refused as such (POI throws on each)
            ok = err is not None and err.kind == "corrupt"
        else:
            ok = False  # an expectation this test does not know yet
        if not ok:
            wrong.append(f"{name}: expect {expect}, got {err or text[:80]!r}")
    assert not wrong, wrong


def test_meta_format_and_engine(outputs):
    m = blocks_of(outputs, "tender-03-award.doc")[0]
    assert (m.format, m.engine) == ("doc", "poi-hwpf")
    m = blocks_of(outputs, "Simple.xls")[0]
    assert (m.format, m.engine) == ("xls", "poi-hssf")
    assert blocks_of(outputs, "Word6.doc")[0].engine == "poi-hwpf-old"
    assert blocks_of(outputs, "testEXCEL_95.xls")[0].engine == "poi-hssf-old"


def _dice(a: str, b: str) -> float:
    ca, cb = collections.Counter(a), collections.Counter(b)
    both = sum((ca & cb).values())
    return 2 * both / (sum(ca.values()) + sum(cb.values()) or 1)


@pytest.mark.parametrize(
    "name",
    ["tender-01-notice.doc", "tender-10-tender-doc.doc", "tender-sheet-04-eval-summary.xls",
     "tender-sheet-06-signin.xls", "61287.xls", "TestChineseProperties.doc"],
)
def test_chinese_text_intact(outputs, corpus_dir, name):
    refs = corpus_dir / "refs"
    ref = refs / f"{name}.truth.txt"
    if not ref.is_file():
        ref = refs / f"{name}.ref.txt"
    want = ref.read_text(encoding="utf-8")
    got = text_of(blocks_of(outputs, name))
    want_han, got_han = "".join(HAN.findall(want)), "".join(HAN.findall(got))
    assert len(want_han) > 20
    assert _dice(want_han, got_han) > 0.97, (name, len(want_han), len(got_han))


def _tables(blocks):
    return [b.table for b in blocks if isinstance(b, TableBlock)]


def test_table_merges_geometry(outputs):
    (t,) = _tables(blocks_of(outputs, "table-merges.doc"))
    assert [[c.text for c in row] for row in t.rows] == [["A", "B"], ["C", "D", "E", "F"], ["", "G", "H", "I\nJ"], ["K"]]
    assert all(c.width and c.width > 0 and c.left is not None for row in t.rows for c in row)
    assert t.rows[1][0].vmerge == "start" and t.rows[2][0].vmerge == "cont"
    # A horizontally merged row arrives as one wide cell spanning the table.
    assert t.rows[3][0].width == t.rows[1][-1].left + t.rows[1][-1].width - t.rows[1][0].left


@pytest.mark.parametrize("name", ["tender-01-notice.doc", "tender-03-award.doc", "tender-05-contract.doc",
                                  "tender-07-techspec.doc", "tender-10-tender-doc.doc", "tender-12-tender-doc-xl.doc"])
def test_tender_docs_have_tables_with_widths(outputs, name):
    tables = _tables(blocks_of(outputs, name))
    assert tables
    for t in tables:
        for row in t.rows:
            assert all(c.width is not None and c.width > 0 for c in row)


def test_vertical_merges_in_tender_doc(outputs):
    cells = [c for t in _tables(blocks_of(outputs, "tender-10-tender-doc.doc")) for row in t.rows for c in row]
    assert any(c.vmerge == "start" for c in cells) and any(c.vmerge == "cont" for c in cells)
    assert all(c.text == "" for c in cells if c.vmerge == "cont")


def test_nested_table_goes_into_cell(outputs):
    (t,) = _tables(blocks_of(outputs, "innertable.doc"))
    inner = [c.table for row in t.rows for c in row if c.table]
    assert len(inner) == 1
    assert [[c.text for c in row] for row in inner[0].rows] == [["1", "2"], ["3", "4"]]


def test_headings_lists_headers_footers(outputs):
    blocks = blocks_of(outputs, "tender-01-notice.doc")
    paras = [b for b in blocks if isinstance(b, Para)]
    assert any(p.heading == 2 and p.text.startswith("一、") for p in paras)
    assert [p.list_marker for p in paras if p.list_marker][:3] == ["1.", "2.", "3."]
    assert any(p.story == "header" for p in paras)
    assert any(p.story == "footer" and "{PAGE}" in p.text for p in paras)
    assert not any("PAGE" in p.text and "{PAGE}" not in p.text for p in paras), "field instructions leaked"


def test_notes_and_comments_keep_their_story(outputs):
    stories = {p.story: p.text for p in blocks_of(outputs, "footnote.doc") if isinstance(p, Para)}
    assert stories == {"body": "Test text", "footnote": "TestFootnote", "endnote": "TestEndnote",
                       "comment": "TestComment"}


def test_no_control_characters_or_field_codes(outputs, manifest):
    for name in outputs:
        if manifest[name]["kind"] != "doc":
            continue
        text = text_of(blocks_of(outputs, name))
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text), name
        assert "HYPERLINK" not in text, name


def test_images(outputs):
    imgs = [b for b in blocks_of(outputs, "SimpleWithImages.xls") if isinstance(b, Image)]
    assert imgs and all(i.sheet and i.row is not None and i.col is not None for i in imgs)
    assert any(isinstance(b, Image) for b in blocks_of(outputs, "FloatingPictures.doc"))


def test_sheets_values_merges_hidden(outputs):
    sheets = [b for b in blocks_of(outputs, "TwoSheetsOneHidden.xls") if isinstance(b, Sheet)]
    assert [(s.name, s.hidden) for s in sheets] == [("Sheet1", True), ("Sheet2", False)]
    dates = [c for b in blocks_of(outputs, "DateFormats.xls") if isinstance(b, Sheet) for c in b.cells
             if c.type == "date"]
    assert dates and all(re.search(r"\d", c.v) and not re.fullmatch(r"\d+(\.\d+)?", c.v) for c in dates)
    summary = [b for b in blocks_of(outputs, "tender-sheet-04-eval-summary.xls") if isinstance(b, Sheet)][0]
    formulas = [c for c in summary.cells if c.type == "formula"]
    assert formulas and all(re.fullmatch(r"[\d,.]+%?", c.v) for c in formulas[:5]), "cached values expected"
    signin = [b for b in blocks_of(outputs, "tender-sheet-06-signin.xls") if isinstance(b, Sheet)]
    assert any(s.hidden for s in signin) and any(s.merges for s in signin)
    assert any("{PAGE}" in s.footer or "{PAGE}" in s.header for s in signin)


# --- the driver: cold runs, warm JVM lifecycle ------------------------------------------------------------

def test_run_cold_ok_and_typed_errors(jvm_build, corpus_dir):
    f = corpus_dir / "files"
    blocks = jvm.run_cold(f / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)
    assert isinstance(blocks[0], Meta) and blocks[1].text.startswith("This is a simple file")
    with pytest.raises(jvm.JvmError) as ei:
        jvm.run_cold(f / "PasswordProtected.doc", "doc", timeout=PER_FILE_TIMEOUT)
    assert ei.value.kind == "encrypted"
    # Content wins over the requested mode.
    assert isinstance(jvm.run_cold(f / "Simple.xls", "doc", timeout=PER_FILE_TIMEOUT)[1], Sheet)


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a group; zombies are dead, just not yet reaped by their parent."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            out.append(int(d.name))
    return out


def _gone(pgid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _group_members(pgid):
            return True
        time.sleep(0.05)
    return False


def test_cold_timeout_kills_the_group(jvm_build, corpus_dir, monkeypatch):
    monkeypatch.setattr(jvm, "MODES", ("doc", "xls", "spin"))  # hidden CLI mode: loops forever
    started = []
    real_popen = subprocess.Popen

    def popen(*a, **kw):
        p = real_popen(*a, **kw)
        started.append(p.pid)
        return p

    monkeypatch.setattr(jvm.subprocess, "Popen", popen)
    t0 = time.monotonic()
    with pytest.raises(jvm.JvmError) as ei:
        jvm.run_cold(corpus_dir / "files" / "simple.doc", "spin", timeout=1.5, kill_grace=0.5)
    assert ei.value.kind == "timeout"
    assert time.monotonic() - t0 < 6
    assert _gone(started[0])


def test_warm_serves_in_a_row_and_restarts_after_kill(jvm_build, corpus_dir):
    f = corpus_dir / "files"
    with jvm.WarmJvm() as w:
        assert w.pid is None  # lazy
        pids = set()
        for name, mode in [("simple.doc", "doc"), ("Simple.xls", "xls"), ("tender-02-correction.doc", "doc")]:
            assert isinstance(w.extract(f / name, mode, timeout=PER_FILE_TIMEOUT)[0], Meta)
            pids.add(w.pid)
        assert len(pids) == 1
        with pytest.raises(jvm.JvmError) as ei:
            w.extract(f / "password.xls", "xls", timeout=PER_FILE_TIMEOUT)
        assert ei.value.kind == "encrypted" and w.pid in pids  # a bad document does not cost the JVM
        old = w.pid
        os.killpg(old, signal.SIGKILL)
        assert _gone(old)
        assert w.extract(f / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)[1].text.startswith("This is")
        assert w.pid not in (None, old)


def test_warm_stopped_jvm_is_killed_at_timeout(jvm_build, corpus_dir):
    f = corpus_dir / "files"
    with jvm.WarmJvm(kill_grace=0.5) as w:
        w.extract(f / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)
        pid = w.pid
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"T":
            assert time.monotonic() < deadline, "SIGSTOP not delivered"
            time.sleep(0.01)
        t0 = time.monotonic()
        with pytest.raises(jvm.JvmError) as ei:
            w.extract(f / "simple.doc", "doc", timeout=1.0)
        assert ei.value.kind == "timeout" and time.monotonic() - t0 < 4
        assert _gone(pid) and w.pid is None
        assert w.extract(f / "Simple.xls", "xls", timeout=PER_FILE_TIMEOUT)


def test_warm_spinning_jvm_is_killed_at_timeout(jvm_build, corpus_dir, monkeypatch):
    monkeypatch.setattr(jvm, "MODES", ("doc", "xls", "spin"))
    with jvm.WarmJvm(kill_grace=0.5) as w:
        w.extract(corpus_dir / "files" / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)
        pid = w.pid
        with pytest.raises(jvm.JvmError) as ei:
            w.extract(corpus_dir / "files" / "simple.doc", "spin", timeout=1.0)
        assert ei.value.kind == "timeout" and _gone(pid)


def test_warm_recycles_after_n_documents(jvm_build, corpus_dir):
    with jvm.WarmJvm(recycle_after=2) as w:
        doc = corpus_dir / "files" / "simple.doc"
        w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)
        first = w.pid
        w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)
        assert w.pid is None and _gone(first)
        w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)
        assert w.pid not in (None, first)


def test_warm_idle_exit_and_transparent_restart(jvm_build, corpus_dir):
    with jvm.WarmJvm(idle_timeout=1) as w:
        doc = corpus_dir / "files" / "simple.doc"
        w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)
        pid = w.pid
        assert _gone(pid, within=5)  # the JVM leaves by itself when nobody asks
        assert w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)


def test_warm_usable_from_forked_child(jvm_build, corpus_dir):
    with jvm.WarmJvm() as w:
        doc = corpus_dir / "files" / "simple.doc"
        w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)
        pid = w.pid
        child = os.fork()
        if child == 0:
            try:
                ok = w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT)[1].text.startswith("This") and w.pid == pid
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert w.extract(doc, "doc", timeout=PER_FILE_TIMEOUT) and w.pid == pid


def test_check_archive(jvm_build):
    assert jvm.check_archive()


def test_injected_kill_group_stops_the_jvm(jvm_build, corpus_dir):
    """The slot passes its runner's kill function; WarmJvm uses it for every stop of the JVM's group."""
    calls = []

    def kill(pgid: int, grace: float) -> None:
        calls.append((pgid, grace))
        jvm.kill_group(pgid, 0)

    with jvm.WarmJvm(kill_group=kill, kill_grace=0.5) as w:
        w.extract(corpus_dir / "files" / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)
        pid = w.pid
        w.kill()
        assert calls == [(pid, 0.0)] and _gone(pid) and w.pid is None


def test_rss_bytes_and_recycling_on_size(jvm_build, corpus_dir):
    """rss_bytes() reads the JVM's RSS; a JVM past max_rss after a document is recycled."""
    with jvm.WarmJvm() as w:
        assert w.rss_bytes() is None
        w.extract(corpus_dir / "files" / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)
        rss = w.rss_bytes()
        assert rss is not None and 16 << 20 < rss < jvm.MAX_RSS
    with jvm.WarmJvm(max_rss=1 << 20) as w:
        w.extract(corpus_dir / "files" / "simple.doc", "doc", timeout=PER_FILE_TIMEOUT)
        assert w.pid is None  # every JVM is bigger than 1 MiB: recycled after its document


def test_warm_jvm_stays_small_after_a_large_workbook(jvm_build, bigbook):
    """The heap given back after a large document (Main.giveBackMemory + the memory flags)."""
    _, xls = bigbook
    with jvm.WarmJvm(max_rss=None) as w:
        w.extract(xls, "xls", timeout=120)
        assert w.rss_bytes() < 160 << 20, w.rss_bytes() >> 20
