"""The slot's warm POI JVM at its limits: the heap cap ([extract] jvm_heap) on a workbook too large for
it, and the JVM's private temp dir. Through the daemon: the job ends (within its timeout) with a
result or an error, no JVM is left running, and every temp dir a JVM had is gone once it is.

The workbook is the generated bill of quantities (tests/extract/bigbook.py, 12,000 rows, 2.3 MB) with
one sheet marked as a macro sheet, so the in-process BIFF8 pass declines it and POI gets it: with a
16 MiB heap, POI runs out of memory."""

from __future__ import annotations

import importlib.util
import shutil
import stat
import struct

import psutil
import pytest

from conftest import REPO, Daemon, wait_until

BOUNDSHEET = 0x0085


def _bigbook():
    spec = importlib.util.spec_from_file_location("bigbook_for_recovery", REPO / "tests" / "extract" / "bigbook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.ensure_soffice()
    return mod.paths()[1]


@pytest.fixture(scope="module")
def big_xls_for_poi(tmp_path_factory):
    """The big .xls with its first sheet's BOUNDSHEET type byte set to 1 (macro sheet): read by POI."""
    import olefile

    dst = tmp_path_factory.mktemp("bigxls") / "bill-macro.xls"
    shutil.copy(_bigbook(), dst)
    with olefile.OleFileIO(str(dst), write_mode=True) as ole:
        data = bytearray(ole.openstream("Workbook").read())
        pos = 0
        while pos + 4 <= len(data):
            typ, ln = struct.unpack_from("<HH", data, pos)
            if typ == BOUNDSHEET:
                data[pos + 9] = 1
                break
            pos += 4 + ln
        ole.write_stream("Workbook", bytes(data))
    from tender_pool.extract.xls_stream import read_stream

    assert read_stream(str(dst)) is None  # POI's, not the in-process pass's
    return dst


def javas(marker: str) -> list[psutil.Process]:
    key, _, value = marker.partition("=")
    out = []
    for p in psutil.process_iter(["name"]):
        try:
            if "java" in (p.info["name"] or "") and p.environ().get(key) == value:
                out.append(p)
        except psutil.Error:
            pass
    return out


def tmpdir_of(p: psutil.Process) -> str:
    return next(a.split("=", 1)[1] for a in p.cmdline() if a.startswith("-Djava.io.tmpdir="))


@pytest.mark.timeout(180)
def test_a_workbook_beyond_the_jvm_heap_ends_and_leaves_no_jvm_and_no_temp_dir(h, tmp_path, corpus_dir, jvm_build,
                                                                                 big_xls_for_poi):
    inbox = tmp_path / "in"
    inbox.mkdir()
    shutil.copy(corpus_dir / "files" / "simple.doc", inbox / "simple.doc")
    shutil.copy(big_xls_for_poi, inbox / "bill.xls")
    private_tmp = tmp_path / "tmp"  # TMPDIR of the daemon: every temp dir its JVMs get is under it
    private_tmp.mkdir()
    cfg = h.config(workers=1, input_roots=[str(inbox)], extract='jvm_heap = "16m"')
    env = h.env()
    env["TMPDIR"] = str(private_tmp)
    marker = f"TENDER_POOL_JVM_TEST={h.prefix}"
    env["TENDER_POOL_JVM_TEST"] = h.prefix
    d = Daemon(cfg, env, h.tmp / "daemon-a.log")
    h.daemons.append(d)
    d.start()
    d.wait_slots(1)
    # Given the slot's warm JVM, started for a small .doc: its temp dir is private and ours
    small = h.wait_state(h.submit(kind="parse_markdown", payload={"file": str(inbox / "simple.doc")}), timeout=90)
    assert small.result["format"] == "doc"
    [jvm] = wait_until(lambda: javas(marker), 10, what="the warm JVM")
    first_tmp = tmpdir_of(jvm)
    st = (private_tmp / first_tmp.rsplit("/", 1)[-1]).stat()
    assert first_tmp.startswith(str(private_tmp)) and stat.S_IMODE(st.st_mode) == 0o700
    # When a workbook too large for its 16 MiB heap comes
    big = h.submit(kind="parse_markdown", payload={"file": str(inbox / "bill.xls")})
    job = h.wait_state(big, states=("completed", "failed"), timeout=150)
    # Then the job ends, once: a result (the fallback reader) or a final extraction error
    assert job.attempts == 1, job
    assert job.state.value == "completed" or job.error.kind == "too-large", job  # a heap cap is too-large, not corrupt
    print("heap-capped workbook:", job.state.value, job.error or job.result)
    # and the JVM that ran out of heap is gone, its temp dir with it
    wait_until(lambda: jvm.pid not in [p.pid for p in javas(marker)], 10, what="the out-of-heap JVM gone")
    wait_until(lambda: not (private_tmp / first_tmp.rsplit("/", 1)[-1]).exists(), 10, what="its temp dir removed")
    # and once the daemon stops, no JVM and no temp dir of one is left
    assert d.stop() == 0
    wait_until(lambda: not javas(marker), 10, what="no JVM left")
    assert not [p.name for p in private_tmp.glob("tp-jvm-*")]


@pytest.mark.timeout(120)
def test_a_jvm_out_of_heap_is_reported_as_too_large(jvm_build, big_xls_for_poi):
    from tender_pool.extract import jvm

    with jvm.WarmJvm(heap="16m", max_rss=None) as w:
        with pytest.raises(jvm.JvmError) as warm:
            w.extract(big_xls_for_poi, "xls", timeout=100)
    with pytest.raises(jvm.JvmError) as cold:
        jvm.run_cold(big_xls_for_poi, "xls", heap="16m", timeout=100)
    assert (warm.value.kind, cold.value.kind) == ("too-large", "too-large"), (warm.value, cold.value)
