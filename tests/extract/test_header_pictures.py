"""Pictures in Word page headers (a company logo, a seal) are counted and rendered as image lines, in the
page-header section of the Markdown, for .docx (header parts) and .doc (HWPF header stories, via POI).
Before, a .doc header's picture came out among the body's pictures and a .docx one after the body text."""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from tender_pool.extract.api import extract

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
REL = "http://schemas.openxmlformats.org/package/2006/relationships"


def _png(width: int = 8, height: int = 4) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


_DRAWING = (
    '<w:r><w:drawing><wp:inline xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing">'
    '<wp:extent cx="952500" cy="476250"/><wp:docPr id="1" name="logo"/>'
    '<a:graphic xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main">'
    '<a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/picture">'
    '<pic:pic xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture">'
    '<pic:nvPicPr><pic:cNvPr id="1" name="logo.png"/><pic:cNvPicPr/></pic:nvPicPr>'
    '<pic:blipFill><a:blip r:embed="rIdLogo"/><a:stretch><a:fillRect/></a:stretch></pic:blipFill>'
    '<pic:spPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="952500" cy="476250"/></a:xfrm>'
    '<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></pic:spPr></pic:pic></a:graphicData></a:graphic>'
    '</wp:inline></w:drawing></w:r>')


def make_docx(path: Path) -> Path:
    """A one-paragraph document whose page header holds a company name and a PNG logo."""
    files = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/><Default Extension="png" ContentType="image/png"/>'
            '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'wordprocessingml.document.main+xml"/><Override PartName="/word/header1.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.wordprocessingml.header+xml"/></Types>'),
        "_rels/.rels": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="{REL}">'
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'officeDocument" Target="word/document.xml"/></Relationships>'),
        "word/_rels/document.xml.rels": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="{REL}">'
            '<Relationship Id="rIdH" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'header" Target="header1.xml"/></Relationships>'),
        "word/document.xml": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{W}" xmlns:r="{R}">'
            '<w:body><w:p><w:r><w:t>投标文件正文</w:t></w:r></w:p><w:sectPr><w:headerReference w:type="default" '
            'r:id="rIdH"/><w:pgSz w:w="11906" w:h="16838"/></w:sectPr></w:body></w:document>'),
        "word/header1.xml": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:hdr xmlns:w="{W}" xmlns:r="{R}">'
            f'<w:p><w:r><w:t>某某建设集团有限公司</w:t></w:r>{_DRAWING}</w:p></w:hdr>'),
        "word/_rels/header1.xml.rels": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="{REL}">'
            '<Relationship Id="rIdLogo" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'image" Target="media/logo.png"/></Relationships>'),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text.encode("utf-8"))
        zf.writestr("word/media/logo.png", _png())
    return path


def _header_section(markdown: str) -> str:
    assert "## [Page headers]" in markdown, markdown
    return markdown.split("## [Page headers]", 1)[1].split("\n## ", 1)[0]


def test_docx_header_picture_is_an_image_line_in_the_header_section(tmp_path):
    x = extract(str(make_docx(tmp_path / "logo.docx")))
    assert x.images == 1
    header = _header_section(x.markdown)
    assert "某某建设集团有限公司" in header and "*[image: png 100×50]*" in header
    assert "[image" not in x.markdown.split("## [Page headers]", 1)[0]


@pytest.mark.timeout(300)
def test_doc_header_picture_is_an_image_line_in_the_header_section(corpus_dir, request):
    """tender-03-award.doc carries its issuer's logo in the page header (HWPF header story)."""
    request.getfixturevalue("jvm_build")
    x = extract(str(corpus_dir / "files" / "tender-03-award.doc"), timeout=120)
    assert x.format == "doc" and x.images == 1, x.markdown
    assert "*[image: " in _header_section(x.markdown)
    assert "[image" not in x.markdown.split("## [Page headers]", 1)[0]
