"""Sniffing by content, the small-format readers, the API/CLI and the runner (no corpus needed)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from tender_pool.extract.api import extract
from tender_pool.extract.command import main_extract
from tender_pool.extract.errors import ExtractError
from tender_pool.extract.numfmt import format_value
from tender_pool.extract.runner import run_job
from tender_pool.extract.sniff import sniff


def write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_sniff_ignores_names(tmp_path):
    assert sniff(write(tmp_path, "a.doc", b"{\\rtf1\\ansi hello}")).format == "rtf"
    assert sniff(write(tmp_path, "b.xls", "<html><body><table><tr><td>a</td></tr></table>".encode())).format == "html"
    assert sniff(write(tmp_path, "c.xls", "名称,数量\n电脑,3\n".encode("gb18030"))).format == "csv"
    assert sniff(write(tmp_path, "d.pdf.doc", b"%PDF-1.4\n")).format == "pdf"
    mht = b"MIME-Version: 1.0\nContent-Type: multipart/related; boundary=\"b\"\n\n--b\nContent-Type: text/html\n\n<p>x</p>\n--b--\n"
    s = sniff(write(tmp_path, "e.doc", mht))
    assert (s.format, s.detail) == ("html", "mht")


def test_sniff_errors(tmp_path):
    with pytest.raises(ExtractError) as e:
        sniff(write(tmp_path, "z.doc", b""))
    assert e.value.kind == "empty"
    with pytest.raises(ExtractError) as e:
        sniff(write(tmp_path, "img.doc", b"\x89PNG\r\n\x1a\n" + b"\0" * 20))
    assert e.value.kind == "unsupported" and "PNG" in e.value.message
    with pytest.raises(ExtractError) as e:
        sniff(write(tmp_path, "t.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100))
    assert e.value.kind == "corrupt"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("[Content_Types].xml", "<Types><Override ContentType='application/vnd.openxmlformats-"
                    "officedocument.presentationml.presentation.main+xml'/></Types>")
    with pytest.raises(ExtractError) as e:
        sniff(write(tmp_path, "p.doc", buf.getvalue()))
    assert e.value.kind == "unsupported" and "PowerPoint" in e.value.message


def test_html_saved_as_xls_tables_and_spans(tmp_path):
    html = ("<html><head><meta charset='gb2312'><style>td{}</style></head><body><h1>报价表</h1>"
            "<table><tr><td rowspan=2>类别</td><td colspan=2>价格|元</td></tr><tr><td>a</td><td>b</td></tr></table>"
            "</body></html>").encode("gb18030")
    x = extract(write(tmp_path, "q.xls", html))
    assert x.format == "html" and x.tables == 1
    assert "# 报价表" in x.markdown
    assert "| 类别 | 价格\\|元 | ← |" in x.markdown
    assert "| 类别 | a | b |" in x.markdown


def test_csv_gb18030_tab(tmp_path):
    x = extract(write(tmp_path, "c.xls", "序号\t名称\n1\t服务器\n".encode("gb18030")))
    assert x.format == "csv" and x.sheets == 1
    assert "| 1 | 服务器 |" in x.markdown


def test_numfmt_display_strings():
    import datetime as dt
    assert format_value(1234.5, "#,##0.00") == "1,234.50"
    assert format_value(0.125, "0.0%") == "12.5%"
    assert format_value(dt.datetime(2024, 3, 1), "yyyy-mm-dd") == "2024-03-01"
    assert format_value(12, '0.00"元"') == "12.00元"
    assert format_value(0.1 + 0.2, "General") == "0.3"


def test_main_extract_json_and_errors(tmp_path, capsys):
    p = write(tmp_path, "n.doc", "<html><body><p>你好</p></body></html>".encode())
    assert main_extract(p, True, 30) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"format", "engine", "pages", "pages_source", "markdown", "chars", "tables", "images",
                        "sheets", "warnings", "timings"}
    assert out["markdown"].strip() == "你好" and out["pages_source"] == "estimated"
    assert main_extract(str(tmp_path / "missing.doc"), True, 30) == 3
    assert json.loads(capsys.readouterr().out) == {"error": {"kind": "file_not_found",
                                                             "message": f"no such file: {tmp_path / 'missing.doc'}"}}
    assert main_extract(write(tmp_path, "e.doc", b""), False, 30) == 3
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("extract: empty:")


def test_too_large(tmp_path, monkeypatch):
    monkeypatch.setenv("TENDER_POOL_EXTRACT_MAX_BYTES", "10")
    with pytest.raises(ExtractError) as e:
        extract(write(tmp_path, "big.csv", b"a,b\n" * 10))
    assert e.value.kind == "too-large"


def test_run_job_writes_atomically(tmp_path):
    p = write(tmp_path, "in.doc", b"{\\rtf1\\ansi{\\b Title}\\par Body text\\par}")
    out = run_job(p, str(tmp_path / "out"), "job1", timeout=30, jvm_heap="256m")
    assert out.format == "rtf" and out.pages == 1
    md = (tmp_path / "out" / "job1.md").read_text("utf-8")
    meta = json.loads((tmp_path / "out" / "job1.json").read_text("utf-8"))
    assert "Body text" in md and "markdown" not in meta and meta["format"] == "rtf"
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == ["job1.json", "job1.md"]
