"""Every corpus file through ``extract()``: coverage of the reference for ``ok`` files, the right error
class for bad ones, all within the timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tender_pool.extract.api import extract
from tender_pool.extract.errors import ExtractError

from .corpus import coverage, corpus_dir as _corpus_dir, manifest as _manifest, normalise, reference_path

TIMEOUT = 60
MIN_COVERAGE = 0.98
# Where the in-order measure and the contract's rendering disagree by design, the order-free share of
# reference characters must still reach MIN_COVERAGE. innertable.doc: the reference prints the nested
# table between the two paragraphs of its cell; the Markdown puts nested tables after the row.
ORDER_FREE = {"innertable.doc"}
try:
    ENTRIES = _manifest()
except (OSError, ValueError):
    ENTRIES = []

OK = [e for e in ENTRIES if e["expect"] == "ok"]
BAD = [e for e in ENTRIES if e["expect"] != "ok"]
_results: dict[str, float] = {}


def _name(e: dict) -> str:
    return Path(e["file"]).name


def _needs_jvm(e: dict, request) -> None:
    if e["kind"] in ("doc", "xls"):
        request.getfixturevalue("jvm_build")


_MAGIC = ((b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", ("doc", "xls")), (b"PK\x03\x04", ("docx", "xlsx")),
          (b"%PDF", ("pdf",)), (b"{\\rtf", ("rtf",)))


def _expected_format(entry: dict, path: Path) -> str:
    """The format the manifest names (``actual_format`` where the extension lies, else the kind), checked
    against the file's own magic so that neither the manifest nor the extension alone decides."""
    want = entry.get("actual_format") or entry["kind"]
    head = path.read_bytes()[:8]
    container = next((kinds for magic, kinds in _MAGIC if head.startswith(magic)), None)
    assert container is not None and want in container, f"{path.name}: manifest says {want}, magic {head!r}"
    return want


def _order_free(ref: str, ours: str) -> float:
    from collections import Counter

    a, b = Counter(normalise(ref, strip_markers=True)), Counter(normalise(ours))
    total = sum(a.values())
    return sum(min(n, b[ch]) for ch, n in a.items()) / total if total else 1.0


def test_corpus_present(corpus_dir):
    assert ENTRIES, f"no manifest entries read from {_corpus_dir()}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("entry", OK, ids=_name)
def test_ok_file_coverage(entry, corpus_dir, request):
    _needs_jvm(entry, request)
    t0 = time.monotonic()
    x = extract(str(corpus_dir / entry["file"]), timeout=TIMEOUT)
    assert time.monotonic() - t0 < TIMEOUT
    ref_path = reference_path(entry)
    assert ref_path is not None, "no reference for an ok file"
    ref = ref_path.read_text("utf-8", "replace")
    cov = coverage(ref, x.markdown)
    _results[_name(entry)] = cov
    print(f"\ncoverage {_name(entry)}: {cov:.4f} ({x.engine}, {x.pages} pages {x.pages_source})")
    if _name(entry) in ORDER_FREE:
        cov = _order_free(ref, x.markdown)
    assert cov >= MIN_COVERAGE, f"{_name(entry)}: coverage {cov:.4f} < {MIN_COVERAGE}"
    assert x.format == _expected_format(entry, corpus_dir / entry["file"])
    assert x.chars == len(x.markdown)
    assert x.pages >= 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("entry", BAD, ids=_name)
def test_bad_file_error_class(entry, corpus_dir, request):
    _needs_jvm(entry, request)
    expect = entry["expect"]
    t0 = time.monotonic()
    try:
        x = extract(str(corpus_dir / entry["file"]), timeout=TIMEOUT)
    except ExtractError as exc:
        kind = exc.kind
        assert "Traceback" not in exc.message
    else:
        kind = "text"
        content = normalise(x.markdown.replace("(empty sheet)", ""))
    assert time.monotonic() - t0 < TIMEOUT + 5
    if expect == "empty":
        assert kind == "empty" or (kind == "text" and "no cell values" in " ".join(x.warnings)
                                   and not any(ln.startswith("|") for ln in x.markdown.splitlines()))
    elif expect == "old-format":
        assert kind in ("text", "old-format"), kind
        if kind == "text":
            assert len(content) > 0
    elif expect == "encrypted":
        assert kind == "encrypted"
    elif expect == "corrupt":
        # "no hang, no crash, clean error or best-effort text"
        assert kind in ("corrupt", "text", "old-format", "unsupported")
    else:
        pytest.fail(f"unknown expectation {expect}")


MERGED = [e for e in OK if e.get("has_merged_cells") and e["kind"] != "pdf" and (Path(str(_corpus_dir())) / "refs" /
                                                          f"{_name(e)}.truth.json").exists()]


@pytest.mark.parametrize("entry", MERGED, ids=_name)
def test_merged_cell_texts_in_markdown_tables(entry, corpus_dir, request):
    """Every cell text of the generator's merged tables appears inside a Markdown table row."""
    import json

    _needs_jvm(entry, request)
    truth = json.loads((corpus_dir / "refs" / f"{_name(entry)}.truth.json").read_text("utf-8"))
    x = extract(str(corpus_dir / entry["file"]), timeout=TIMEOUT)
    table_text = normalise("\n".join(ln for ln in x.markdown.splitlines() if ln.startswith("|")))
    texts: list[str] = []

    def walk(obj):
        if isinstance(obj, dict):
            if "rowspan" in obj or "colspan" in obj:
                t = obj.get("text")
                if isinstance(t, str) and t.strip() and (obj.get("rowspan", 1) > 1 or obj.get("colspan", 1) > 1):
                    texts.append(t)
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(truth)
    for sheet in truth.get("sheets", []):
        rows = sheet.get("rows", [])
        for rng in sheet.get("merged", []):
            from openpyxl.utils.cell import range_boundaries
            c1, r1, _, _ = range_boundaries(rng)
            if r1 - 1 < len(rows) and c1 - 1 < len(rows[r1 - 1]) and str(rows[r1 - 1][c1 - 1]).strip():
                texts.append(str(rows[r1 - 1][c1 - 1]))
    if not texts:
        pytest.skip("truth lists no merged cells with text")
    missing = [t for t in texts if normalise(t) not in table_text]
    assert not missing, f"merged cell texts missing from tables: {missing[:5]}"


def _first(kind: str) -> dict | None:
    return next((e for e in OK if e["kind"] == kind and e.get("origin", {}).get("source") == "generated"), None)


def _jvm_read(kind: str, corpus_dir: Path) -> str | None:
    """A corpus file of this kind that goes through the JVM (plain BIFF8 workbooks are read in-process)."""
    from tender_pool.extract.xls_stream import read_stream

    if kind == "doc":
        entry = _first("doc")
        return str(corpus_dir / entry["file"]) if entry else None
    for e in ENTRIES:
        path = corpus_dir / e["file"]
        if e["kind"] == "xls" and path.stat().st_size > 4096 and read_stream(str(path)) is None:
            try:
                extract(str(path), timeout=TIMEOUT)
            except ExtractError:
                continue
            return str(path)
    return None


@pytest.mark.parametrize("kind", ["doc", "xls"])
def test_timings_include_jvm_start(kind, corpus_dir, request):
    """A cold extraction reports the JVM's start-up apart from the extraction and the conversion."""
    request.getfixturevalue("jvm_build")
    path = _jvm_read(kind, corpus_dir)
    assert path is not None, f"no {kind} in the corpus goes through the JVM"
    x = extract(path, timeout=TIMEOUT)
    assert {"jvm_start", "jvm", "extraction", "conversion"} <= set(x.timings), x.timings
    assert 0 < x.timings["jvm_start"] < x.timings["jvm"] <= x.timings["extraction"]


def test_sheet_page_setup_from_jvm(corpus_dir, request):
    """HSSF sheets carry their page setup (paper, margins, column widths) for the page estimate."""
    from tender_pool.extract.api import read_blocks
    from tender_pool.extract.blocks import Sheet

    entry = _first("xls")
    if entry is None:
        pytest.skip("no generated xls in the corpus")
    request.getfixturevalue("jvm_build")
    sheets = [b for b in read_blocks(str(corpus_dir / entry["file"]), timeout=TIMEOUT) if isinstance(b, Sheet)]
    visible = [s for s in sheets if s.cells]
    assert visible and all(s.setup is not None for s in visible)
    s = visible[0].setup
    assert len(s.margins) == 4 and s.widths and s.default_height > 0
