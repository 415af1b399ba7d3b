"""A small damaged .doc that makes POI exhaust its heap.

The damaged files are made here, in the test's directory, from corpus documents: one FIB length field (a PLCF's
``lcb``) set to ~2 GiB. POI 4.0.1 sizes its ``PlexOfCps`` array by that declared length before it reads a byte of
the table (the allocation class POI capped in 2021 after fuzzing), so the JVM runs out of heap at once on a file
of a few hundred KB; antiword never reads those tables and still gives the whole text. Such a document is
``corrupt`` (raising the heap cannot help), and its text comes from antiword, said in ``engine`` and ``warnings``.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import olefile
import pytest

from tender_pool.extract import jvm
from tender_pool.extract.api import extract
from tender_pool.extract.blocks import Meta, Para
from tender_pool.extract.errors import ExtractError
from tender_pool.extract.legacy import antiword

TIMEOUT = 60.0
# FibRgFcLcb97 begins at byte 154 of the WordDocument stream (FibBase 32, csw 2, FibRgW97 28, cslw 2, FibRgLw97 88,
# cbRgFcLcb 2); pair i is (fc, lcb) at 154 + 8 i. The pairs used: 2 fcPlcffndRef (footnote references),
# 16 fcPlcfFldMom (fields of the main text), 22 fcPlcfBkf (bookmark starts).
FIB_PAIRS = 154
FOOTNOTE_REFS, FIELDS, BOOKMARKS = 2, 16, 22
HUGE = 0x7FFFFFF0


def damage_plcf(src: Path, dst: Path, pair: int) -> Path:
    """A copy of ``src`` whose FIB declares the PLCF of ``pair`` ~2 GiB long (at offset 1 of the table stream
    when the original has none: POI skips a table at offset 0)."""
    shutil.copyfile(src, dst)
    with olefile.OleFileIO(str(dst), write_mode=True) as ole:
        data = bytearray(ole.openstream("WordDocument").read())
        assert struct.unpack_from("<H", data, 32)[0] == 14 and struct.unpack_from("<H", data, 62)[0] == 22, \
            "not a Word 97+ FIB"
        fc = struct.unpack_from("<I", data, FIB_PAIRS + 8 * pair)[0]
        struct.pack_into("<II", data, FIB_PAIRS + 8 * pair, fc or 1, HUGE)
        ole.write_stream("WordDocument", bytes(data))  # same size: olefile rewrites it in place
    return dst


def _texts(blocks) -> list[str]:
    return [b.text for b in blocks if isinstance(b, Para)]


# several documents (English, Chinese, Russian; Word- and LibreOffice-written; 19 KB to 335 KB, the issue's
# file being a damaged 335 KB one) and several tables: the class, not one file
CASES = [("simple.doc", FIELDS), ("FloatingPictures.doc", BOOKMARKS), ("FloatingPictures.doc", FOOTNOTE_REFS),
         ("ob_is.doc", FIELDS), ("tender-01-notice.doc", BOOKMARKS), ("tender-09-bid.doc", FOOTNOTE_REFS)]


@pytest.mark.parametrize("name,pair", CASES, ids=[f"{n}-pair{p}" for n, p in CASES])
def test_small_doc_exhausting_the_heap_is_read_by_antiword(jvm_build, corpus_dir, tmp_path, name, pair):
    src = corpus_dir / "files" / name
    bad = damage_plcf(src, tmp_path / name, pair)
    # the JVM alone: out of heap, reported as a damaged document, not as one that needs a larger heap
    with pytest.raises(jvm.JvmError) as ei:
        jvm.run_cold(bad, "doc", heap="512m", timeout=TIMEOUT)
    assert ei.value.kind == "corrupt" and "heap" in ei.value.message, ei.value
    # the whole extraction: antiword's text, and it says so
    x = extract(str(bad), timeout=TIMEOUT, jvm_heap="512m")
    assert x.engine == "antiword"
    assert any("antiword" in w and "corrupt" in w and "heap" in w for w in x.warnings), x.warnings
    assert "jvm_heap" not in " ".join(x.warnings)  # no advice that cannot help
    want = _texts(antiword(str(src), TIMEOUT))  # the damage is in a table antiword never reads
    assert want and all(t in x.markdown for t in want[:50])


def test_warm_jvm_reports_corrupt_and_serves_the_next_document(jvm_build, corpus_dir, tmp_path):
    bad = damage_plcf(corpus_dir / "files" / "FloatingPictures.doc", tmp_path / "bad.doc", FIELDS)
    with jvm.WarmJvm(heap="512m") as w:
        with pytest.raises(jvm.JvmError) as ei:
            w.extract(bad, "doc", TIMEOUT)
        assert ei.value.kind == "corrupt" and "heap" in ei.value.message
        x = extract(str(bad), timeout=TIMEOUT, jvm=w)
        assert x.engine == "antiword" and x.chars > 1000
        assert isinstance(w.extract(corpus_dir / "files" / "simple.doc", "doc", TIMEOUT)[0], Meta)


def test_damaged_doc_antiword_cannot_read_either_is_corrupt(jvm_build, corpus_dir, tmp_path):
    """footnote.doc has footnotes, so antiword reads the damaged footnote table too and gives up: the error is
    POI's, and it is ``corrupt``."""
    bad = damage_plcf(corpus_dir / "files" / "footnote.doc", tmp_path / "footnote.doc", FOOTNOTE_REFS)
    with pytest.raises(ExtractError) as ei:
        extract(str(bad), timeout=TIMEOUT, jvm_heap="512m")
    assert ei.value.kind == "corrupt" and "heap" in ei.value.message


def test_doc_too_large_for_the_heap_falls_back_to_antiword(jvm_build, corpus_dir, tmp_path):
    """A document of at least 1/16 of the heap that exhausts it stays ``too-large`` for POI (the advice to raise
    jvm_heap may help there), and antiword, which streams the text, still reads it."""
    src = corpus_dir / "files" / "Bug50936_3.doc"  # 610 KB: more than 1/16 of an 8 MiB heap
    bad = damage_plcf(src, tmp_path / "big.doc", FIELDS)
    with pytest.raises(jvm.JvmError) as ei:
        jvm.run_cold(bad, "doc", heap="8m", timeout=TIMEOUT)
    assert ei.value.kind == "too-large"
    x = extract(str(bad), timeout=TIMEOUT, jvm_heap="8m")
    assert x.engine == "antiword" and any("too-large" in w and "jvm_heap" in w for w in x.warnings), x.warnings


@pytest.mark.parametrize("size,heap,kind", [
    (335_360, "512m", "corrupt"), ((32 << 20) - 1, "512m", "corrupt"), (32 << 20, "512m", "too-large"),
    (600_000, "8m", "too-large"), (100_000, "2g", "corrupt"), (None, "512m", "too-large"),
    (1 << 20, str((16 << 20) + 1), "corrupt"), (1 << 20, "16384k", "too-large"),
])
def test_heap_rule(size, heap, kind):
    assert jvm.heap_error(size, heap).kind == kind


def test_cli_without_exit_on_oom_applies_the_same_rule(jvm_build, corpus_dir, tmp_path):
    """Main.kind: where the JVM itself catches the OutOfMemoryError (run without -XX:+ExitOnOutOfMemoryError,
    e.g. by hand), a small document is ``corrupt`` there too."""
    bad = damage_plcf(corpus_dir / "files" / "simple.doc", tmp_path / "bad.doc", FIELDS)
    argv = [a for a in jvm.java_command("512m") if a != "-XX:+ExitOnOutOfMemoryError"]
    r = subprocess.run([*argv, "doc", str(bad)], capture_output=True, timeout=TIMEOUT)
    assert b'"kind":"corrupt"' in r.stdout and r.stdout.rstrip().endswith(b'{"t":"end"}'), r.stdout[-300:]
