"""The PDF reader (PDFium): ruled tables come back as tables, cell for cell, against the generator's
truth (the corpus's PDFs are LibreOffice exports of its .docx files); encrypted and damaged files
fail with their kind; a PDF with no text at all is empty."""

from __future__ import annotations

import io
import json

import pytest

from tender_pool.extract.api import extract, read_blocks
from tender_pool.extract.blocks import Meta, TableBlock
from tender_pool.extract.errors import ExtractError

from .cells import in_place
from .corpus import corpus_dir, manifest, name_of

PDFS = [e for e in manifest() if e["kind"] == "pdf" and (corpus_dir() / "refs" / f"{name_of(e)}.truth.json").exists()]


@pytest.mark.parametrize("entry", PDFS, ids=name_of)
def test_ruled_tables_come_back_cell_for_cell(entry):
    blocks = read_blocks(str(corpus_dir() / entry["file"]), timeout=60)
    truth = json.loads((corpus_dir() / "refs" / f"{name_of(entry)}.truth.json").read_text("utf-8"))
    found, total = in_place(truth, [b.table for b in blocks if isinstance(b, TableBlock)])
    assert total and found / total >= 0.9, f"{found}/{total} truth cells in place"
    meta = blocks[0]
    assert isinstance(meta, Meta) and meta.engine == "pdfium" and meta.pages == entry["pages"]


def test_a_wrapped_cjk_cell_is_one_text_and_the_table_stays_where_it_stands():
    x = extract(str(corpus_dir() / "files" / "tender-01-notice.pdf"), timeout=60)
    lines = x.markdown.splitlines()
    row = next(ln for ln in lines if "数据库审计系统采购" in ln)  # wrapped as 数据库审计 / 系统采购 in its cell
    assert row.startswith("| 1 |") and row.count("|") == 7
    before = next(i for i, ln in enumerate(lines) if ln.startswith("采购需求"))
    after = next(i for i, ln in enumerate(lines) if ln.startswith("合同履行期限"))
    assert before < lines.index(row) < after  # the table sits between the text around it
    assert x.tables >= 2


def _pdf(write) -> bytes:
    from pypdf import PdfWriter

    w = PdfWriter()
    w.add_blank_page(width=200, height=200)
    write(w)
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


def test_encrypted_damaged_and_textless_pdfs(tmp_path):
    enc = tmp_path / "enc.pdf"
    enc.write_bytes(_pdf(lambda w: w.encrypt("secret")))
    with pytest.raises(ExtractError) as e:
        extract(str(enc), timeout=30)
    assert e.value.kind == "encrypted"
    good = (corpus_dir() / "files" / "tender-01-notice.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(good[: len(good) // 3])
    try:
        x = extract(str(cut), timeout=30)  # PDFium may rebuild what is left: text, never a crash
        assert x.format == "pdf"
    except ExtractError as err:
        assert err.kind == "corrupt"
    junk = tmp_path / "junk.pdf"
    junk.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    with pytest.raises(ExtractError) as e:
        extract(str(junk), timeout=30)
    assert e.value.kind == "corrupt"
    blank = tmp_path / "blank.pdf"
    blank.write_bytes(_pdf(lambda w: None))
    with pytest.raises(ExtractError) as e:
        extract(str(blank), timeout=30)
    assert e.value.kind == "empty"
