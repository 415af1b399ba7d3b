"""parse_markdown through the daemon: the forked child, the slot's warm JVM, results on disk."""

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import wait_until



@pytest.fixture
def docs(tmp_path, corpus_dir):
    root = tmp_path / "in"
    root.mkdir()
    for name in ("tender-01-notice.doc", "tender-sheet-06-signin.xls", "tender-01-notice.docx",
                 "tender-01-notice.pdf", "password.xls", "tender-sheet-01-scoring.xlsx"):
        shutil.copy(corpus_dir / "files" / name, root / name)
    return root


def test_parse_markdown_jobs_store_results_and_errors(h, docs, jvm_build):
    h.daemon(workers=2, input_roots=[str(docs)], extra='results_dir = "%s"' % (h.tmp / "results"))
    ok = {name: h.submit(kind="parse_markdown", user=f"u{i}", payload={"file": str(docs / name)})
          for i, name in enumerate(["tender-01-notice.doc", "tender-sheet-06-signin.xls", "tender-01-notice.docx",
                                    "tender-01-notice.pdf", "tender-sheet-01-scoring.xlsx"])}
    for name, jid in ok.items():
        job = h.wait_state(jid, timeout=60)
        res = job.result
        assert set(res) == {"markdown_path", "metadata_path", "pages", "format"}, res
        assert res["format"] == name.rsplit(".", 1)[1]
        md = Path(res["markdown_path"]).read_text()
        assert res["markdown_path"].startswith(str(h.tmp / "results" / jid))
        meta = json.loads(Path(res["metadata_path"]).read_text())
        assert meta["pages"] == res["pages"] >= 1 and "markdown" not in meta
        assert len(md) > 100
    assert "招标" in Path(h.job(ok["tender-01-notice.doc"]).result["markdown_path"]).read_text()
    bad = h.submit(kind="parse_markdown", user="x", payload={"file": str(docs / "password.xls")})
    job = h.wait_state(bad, states=("failed",), timeout=60)
    assert job.error.kind == "encrypted" and job.attempts == 1  # final, not retried


def test_warm_jvm_is_started_once_per_slot_and_reused(h, docs, jvm_build):
    d = h.daemon(workers=1, input_roots=[str(docs)])
    for _ in range(3):
        h.wait_state(h.submit(kind="parse_markdown", payload={"file": str(docs / "tender-01-notice.doc")}), timeout=60)
    import psutil
    slot = psutil.Process(d.wait_slots(1)[0])
    javas = [c for c in slot.children() if "java" in c.name()]
    assert len(javas) == 1, [c.cmdline() for c in slot.children()]


def test_stuck_jvm_is_killed_at_the_timeout_and_replaced(h, docs, jvm_build):
    import psutil
    import signal
    d = h.daemon(workers=1, input_roots=[str(docs)], extract="timeout = 3")
    doc = str(docs / "tender-01-notice.doc")
    h.wait_state(h.submit(kind="parse_markdown", payload={"file": doc}), timeout=60)
    slot = psutil.Process(d.wait_slots(1)[0])
    java = next(c for c in slot.children() if "java" in c.name())
    java.send_signal(signal.SIGSTOP)  # a JVM stuck mid-document
    stuck = h.submit(kind="parse_markdown", payload={"file": doc})
    job = h.wait_state(stuck, states=("failed",), timeout=30)
    assert job.error.kind == "timeout" and job.attempts == 1
    wait_until(lambda: not psutil.pid_exists(java.pid) or java.status() == psutil.STATUS_ZOMBIE, 10,
               what="the stuck JVM's group killed")
    again = h.wait_state(h.submit(kind="parse_markdown", payload={"file": doc}), timeout=60)
    assert again.result["format"] == "doc"


def test_daemon_start_rebuilds_a_stale_jvm_archive(h, jvm_build):
    import subprocess
    from tender_pool.extract.jvm import ARCHIVE_NAME, java_command
    archive = jvm_build / ARCHIVE_NAME
    # what a JDK update looks like to the JVM: an unusable archive. A new file renamed over it: a JVM
    # that still maps the old one must not see its pages change under it (SIGBUS).
    stale = archive.with_suffix(".stale")
    stale.write_bytes(b"not a CDS archive")
    os.replace(stale, archive)
    smoke = [*java_command("256m", share="on"), "doc", str(jvm_build.parent / "training" / "notice.doc")]
    assert subprocess.run(smoke, capture_output=True).returncode != 0
    d = h.daemon(workers=1, check_archive=True, start=False)
    queued = h.submit(kind="noop")  # waiting before the daemon starts
    d.start()
    wait_until(lambda: "jvm_archive_checked" in d.logs(), 120, what="the archive check at start")
    assert d.log_events("jvm_archive_checked", usable=True)
    assert subprocess.run(smoke, capture_output=True).returncode == 0
    # the slots did not wait for the check (a rebuild takes seconds): the queued job started first
    started = d.log_events("job_started", job_id=queued)
    checked = d.log_events("jvm_archive_checked")
    assert started and started[0]["timestamp"] < checked[0]["timestamp"], (started, checked)


def test_job_ids_dot_and_dotdot_keep_their_results_inside_results_dir(h, docs):
    """``.`` and ``..`` are valid job ids (letters, digits and ._:-); as directories they would be
    results_dir itself and its parent."""
    results = h.tmp / "results"
    h.daemon(workers=1, input_roots=[str(docs)], extra='results_dir = "%s"' % results)
    for jid in (".", ".."):
        h.submit(kind="parse_markdown", user="u", payload={"file": str(docs / "tender-01-notice.docx")}, id=jid)
        res = h.wait_state(jid, timeout=60).result
        md = Path(res["markdown_path"]).resolve()
        assert md.is_relative_to(results.resolve()) and md.parent.parent == results.resolve(), md
        assert md.parent.name == "~" + jid
    assert not list(h.tmp.glob("attempt-*")) and not list(results.glob("attempt-*"))
