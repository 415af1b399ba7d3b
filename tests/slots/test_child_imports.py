"""A parse_markdown child is a warm copy of its slot: what it runs for a document was imported in the
slot before the fork (``kinds.preload``), never per job in the child. Each child used to import the
extraction's entry point (``extract.runner``, ``api``, ``markdown``, ``pages``, ``tempfile``): 40-100 ms
a document, most of the pool's own time around a small .doc (issue 22)."""

import json
import subprocess
import sys

import pytest

PROBE = r"""
import io, json, os, sys
from tender_pool.slots import kinds
path, out = sys.argv[1], sys.argv[2]
kinds.preload(path)  # what ExtractionKind.prepare does in the slot before forking the job's child
before = set(sys.modules)
real = sys.stdout
sys.stdout = io.TextIOWrapper(io.BytesIO())
code = kinds.extraction_child(path, out, "attempt-1", 30.0, "256m", None)
sys.stdout = real
print(json.dumps({"code": code, "imported": sorted(set(sys.modules) - before)}))
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, text", [("a.csv", "name,amount\nalpha,1\n"),
                                        ("a.html", "<html><body><p>alpha</p></body></html>"),
                                        ("a.rtf", r"{\rtf1\ansi alpha}")])
def test_the_childs_extraction_imports_nothing_the_slot_did_not_preload(tmp_path, name, text):
    doc = tmp_path / name
    doc.write_text(text)
    r = subprocess.run([sys.executable, "-c", PROBE, str(doc), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["code"] == 0
    assert got["imported"] == [], got["imported"]
