"""Hostile documents, made on the fly in a second or two: a .docx whose part inflates past 1 GiB
(a zip bomb), workbooks and CSVs of 10⁶ cells, and the ZIP writer they need.

The bomb is written by hand: its 1 MiB chunk is deflated once with a full flush (byte-aligned, no
back-reference across it), so the compressed member is that segment repeated; writing 1.1 GiB
through zlib instead takes ~25 s. The CRC is computed over the real inflated bytes, so the member is
valid and a reader must really inflate it to find out.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
S_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
CT_NS = "http://schemas.openxmlformats.org/package/2006/content-types"
OOXML = "application/vnd.openxmlformats-officedocument"

Member = tuple[str, bytes, int, int]  # name, raw deflate data, CRC-32, inflated size


def member(name: str, data: bytes) -> Member:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return name, c.compress(data) + c.flush(), zlib.crc32(data) & 0xFFFFFFFF, len(data)


def repeated_member(name: str, head: bytes, chunk: bytes, n: int, tail: bytes) -> Member:
    """``head + chunk * n + tail``, deflated in about the time of deflating ``chunk`` once."""

    def segment(data: bytes) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)

    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    end = c.compress(tail) + c.flush(zlib.Z_FINISH)
    crc = zlib.crc32(head)
    for _ in range(n):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(tail, crc)
    return name, segment(head) + segment(chunk) * n + end, crc & 0xFFFFFFFF, len(head) + len(chunk) * n + len(tail)


def write_zip(path: Path, members: list[Member]) -> Path:
    """A plain ZIP (no zip64: every member stays under 4 GiB) of deflated members."""
    out, central = bytearray(), bytearray()
    for name, data, crc, size in members:
        nb = name.encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(data), size, len(nb), 0) + nb + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(data), size, len(nb),
                               0, 0, 0, 0, 0, offset) + nb
    start = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), start, 0)
    path.write_bytes(bytes(out))
    return path


def _docx_members(document: Member) -> list[Member]:
    ct = (f'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="{CT_NS}">'
          f'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
          f'<Default Extension="xml" ContentType="application/xml"/>'
          f'<Override PartName="/word/document.xml" ContentType="{OOXML}.wordprocessingml.document.main+xml"/></Types>')
    rels = (f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_REL}">'
            f'<Relationship Id="rId1" Type="{R_NS}/officeDocument" Target="word/document.xml"/></Relationships>')
    return [member("[Content_Types].xml", ct.encode()), member("_rels/.rels", rels.encode()), document]


def docx_bomb(path: Path, inflated: int = 1_100 * 2**20) -> Path:
    """A .docx of ~3 MiB whose word/document.xml inflates to ``inflated`` bytes of paragraphs."""
    para = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>"
    chunk = para * (2**20 // len(para))
    head = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W_NS}"><w:body>'.encode()
    doc = repeated_member("word/document.xml", head, chunk, inflated // len(chunk) + 1, b"</w:body></w:document>")
    return write_zip(path, _docx_members(doc))


def content_types_bomb(path: Path, inflated: int = 1_100 * 2**20) -> Path:
    """The inflation case: ``[Content_Types].xml`` itself inflates to ``inflated`` bytes (what a
    sniffer reads first)."""
    head = f'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="{CT_NS}">'.encode()
    entry = f'<Default Extension="x" ContentType="{OOXML}.wordprocessingml.document.main+xml"/>'.encode()
    chunk = entry * (2**20 // len(entry))
    ct = repeated_member("[Content_Types].xml", head, chunk, inflated // len(chunk) + 1, b"</Types>")
    members = _docx_members(member("word/document.xml", f'<w:document xmlns:w="{W_NS}"><w:body><w:p><w:r><w:t>x'
                                                         f"</w:t></w:r></w:p></w:body></w:document>".encode()))
    return write_zip(path, [ct, *members[1:]])


def _col(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(65 + r) + s
    return s


def big_xlsx(path: Path, rows: int = 1000, cols: int = 1000) -> Path:
    """One sheet of rows × cols numeric cells (10⁶ by default), every cell with its reference."""
    names = [_col(c) for c in range(cols)]
    parts = [f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns="{S_NS}"><sheetData>']
    for r in range(1, rows + 1):
        parts.append(f'<row r="{r}">' + "".join(f'<c r="{n}{r}"><v>{r}</v></c>' for n in names) + "</row>")
    parts.append("</sheetData></worksheet>")
    ct = (f'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="{CT_NS}">'
          f'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
          f'<Default Extension="xml" ContentType="application/xml"/>'
          f'<Override PartName="/xl/workbook.xml" ContentType="{OOXML}.spreadsheetml.sheet.main+xml"/>'
          f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{OOXML}.spreadsheetml.worksheet+xml"/></Types>')
    rels = (f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_REL}">'
            f'<Relationship Id="rId1" Type="{R_NS}/officeDocument" Target="xl/workbook.xml"/></Relationships>')
    wb = (f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{S_NS}" xmlns:r="{R_NS}"><sheets>'
          f'<sheet name="Big" sheetId="1" r:id="rId1"/></sheets></workbook>')
    wb_rels = (f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_REL}">'
               f'<Relationship Id="rId1" Type="{R_NS}/worksheet" Target="worksheets/sheet1.xml"/></Relationships>')
    return write_zip(path, [member("[Content_Types].xml", ct.encode()), member("_rels/.rels", rels.encode()),
                            member("xl/workbook.xml", wb.encode()), member("xl/_rels/workbook.xml.rels", wb_rels.encode()),
                            member("xl/worksheets/sheet1.xml", "".join(parts).encode())])


def big_csv(path: Path, rows: int = 1000, cols: int = 1000) -> Path:
    path.write_text("\n".join(",".join([str(r)] * cols) for r in range(rows)) + "\n")
    return path
