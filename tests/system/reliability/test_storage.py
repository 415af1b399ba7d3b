"""The job's side of a full disk: a full or read-only results directory fails parse_markdown
attempts with error kind ``storage`` (retried up to max_tries, each a try, none an attempt of a
handler), not ``handler_failed`` three times; once there is room again, jobs complete."""

import shutil
import subprocess

import pytest


@pytest.fixture
def tiny_fs(tmpfs):
    return tmpfs("256k", "results")


@pytest.mark.timeout(90)
def test_a_full_results_disk_fails_with_storage_and_recovers(h, tmp_path, corpus_dir, tiny_fs):
    docs = tmp_path / "in"
    docs.mkdir()
    shutil.copy(corpus_dir / "files" / "tender-01-notice.docx", docs / "a.docx")
    (tiny_fs / "filler").write_bytes(b"x" * (200 << 10))  # 56 KiB left of 256: less than the 1 MiB needed
    h.daemon(workers=1, input_roots=[str(docs)], extra=f'results_dir = "{tiny_fs}"')
    jid = h.submit(kind="parse_markdown", user="u1", payload={"file": str(docs / "a.docx")})
    job = h.wait_state(jid, states=("failed",), timeout=40)
    assert job.error.kind == "storage" and "bytes free" in job.error.message, job.error
    assert job.tries == 3 and job.attempts == 0, job
    # Given room again (a larger file system), the next job completes
    subprocess.run(["mount", "-o", "remount,size=8m", str(tiny_fs)], check=True)
    ok = h.submit(kind="parse_markdown", user="u1", payload={"file": str(docs / "a.docx")})
    assert h.wait_state(ok, timeout=40).result["markdown_path"].startswith(str(tiny_fs))


@pytest.mark.timeout(90)
def test_a_read_only_results_disk_fails_with_storage(h, tmp_path, corpus_dir, tiny_fs):
    docs = tmp_path / "in"
    docs.mkdir()
    shutil.copy(corpus_dir / "files" / "tender-01-notice.docx", docs / "a.docx")
    subprocess.run(["mount", "-o", "remount,ro,size=8m", str(tiny_fs)], check=True)
    h.daemon(workers=1, input_roots=[str(docs)], extra=f'results_dir = "{tiny_fs}"')
    jid = h.submit(kind="parse_markdown", user="u1", payload={"file": str(docs / "a.docx")})
    job = h.wait_state(jid, states=("failed",), timeout=40)
    assert job.error.kind == "storage", job.error
