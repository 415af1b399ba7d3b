"""Decide what a file really is from its bytes, never from its name.

Why: procurement portals hand out RTF, HTML/MHT, CSV and even .docx files under ``.doc``/``.xls``
names. Routing by content sends each to the reader that can read it and turns everything else into a
typed ``unsupported: <what it is>`` instead of a confusing parser error.
"""

from __future__ import annotations

import codecs
import re
import zipfile
import zlib

import msgspec

from tender_pool.extract.errors import ExtractError, short
from tender_pool.extract.zipparts import read_member

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
HEAD_BYTES = 65536
MAX_CONTENT_TYPES = 16 << 20  # a real [Content_Types].xml is a few KiB; 16 MiB is ~100,000 parts


class Sniffed(msgspec.Struct):
    format: str  # doc, xls, docx, xlsx, pdf, rtf, html, csv
    detail: str = ""  # e.g. "word2", "biff4", "mht", "ole-lowercase"
    encoding: str | None = None  # for text formats


_OTHER_MAGIC: list[tuple[bytes, str]] = [
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"BM", "BMP image"),
    (b"II*\x00", "TIFF image"),
    (b"MM\x00*", "TIFF image"),
    (b"Rar!", "RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh", "bzip2 archive"),
    (b"\x7fELF", "ELF executable"),
    (b"MZ", "Windows executable"),
    (b"%!PS", "PostScript"),
    (b"\xd7\xcd\xc6\x9a", "WMF image"),
    (b"\x01\x00\x00\x00", "EMF image or binary data"),
]


def sniff(path: str) -> Sniffed:
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
        whole = len(head) < HEAD_BYTES or not fh.read(1)  # the window holds the whole file
    if not head:
        raise ExtractError("empty", "the file is 0 bytes")
    if head.startswith(OLE_MAGIC):
        return _sniff_ole(path)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return _sniff_zip(path)
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n\x00")
    if stripped[:5] == b"%PDF-" or b"%PDF-" in head[:1024]:
        return Sniffed("pdf")
    if stripped.startswith(b"{\\rtf"):
        return Sniffed("rtf")
    if head[:2] == b"\xdb\xa5":
        return Sniffed("doc", "word2")
    if head[:2] in (b"\x09\x00", b"\x09\x02", b"\x09\x04", b"\x09\x08") and len(head) >= 8:
        # A bare BIFF2-4 worksheet/workbook stream (pre-OLE Excel).
        return Sniffed("xls", "biff-raw")
    for magic, what in _OTHER_MAGIC:
        if head.startswith(magic):
            raise ExtractError("unsupported", what)
    return _sniff_text(head, whole)


def _sniff_ole(path: str) -> Sniffed:
    import olefile

    try:
        with olefile.OleFileIO(path) as ole:
            names = {"/".join(p).lower() for p in ole.listdir(streams=True, storages=False)}
    except Exception as exc:  # olefile raises OSError/IndexError/struct errors on damage
        raise ExtractError("corrupt", f"damaged OLE2 compound file ({short(exc, 120)})") from None
    top = {n for n in names if "/" not in n}
    if "encryptedpackage" in top or "encryptioninfo" in top:
        raise ExtractError("encrypted", "password-protected Office Open XML file (EncryptedPackage)")
    if "worddocument" in top:
        return Sniffed("doc")
    if "workbook" in top:
        return Sniffed("xls")
    if "book" in top:
        return Sniffed("xls", "biff5")
    if "powerpoint document" in top:
        raise ExtractError("unsupported", "PowerPoint 97-2003 presentation")
    if any(n.startswith("__substg1.0_") for n in top):
        raise ExtractError("unsupported", "Outlook message (.msg)")
    if "contents" in top and "quill" in {n.split("/")[0] for n in names}:
        raise ExtractError("unsupported", "Microsoft Publisher file")
    raise ExtractError("unsupported", "OLE2 compound file without a Word or Excel stream")


def _sniff_zip(path: str) -> Sniffed:
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if "[Content_Types].xml" not in names:
                if "mimetype" in names:
                    with zf.open("mimetype") as fh:
                        mime = fh.read(100).decode("ascii", "replace").strip()
                    raise ExtractError("unsupported", f"OpenDocument file ({mime})")
                raise ExtractError("unsupported", "ZIP archive")
            ct = read_member(zf, "[Content_Types].xml", MAX_CONTENT_TYPES).decode("utf-8", "replace")
    except ExtractError:
        raise
    except MemoryError:
        raise ExtractError("too-large", "[Content_Types].xml needs more memory than allowed") from None
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, zlib.error) as exc:
        raise ExtractError("corrupt", f"damaged ZIP container ({short(exc, 120)})") from None
    if "wordprocessingml.document.main" in ct or "ms-word.document.macroEnabled.main" in ct \
            or "wordprocessingml.template.main" in ct:
        return Sniffed("docx")
    if "spreadsheetml.sheet.main" in ct or "ms-excel.sheet.macroEnabled.main" in ct \
            or "spreadsheetml.template.main" in ct:
        return Sniffed("xlsx")
    if "presentationml" in ct:
        raise ExtractError("unsupported", "PowerPoint presentation (.pptx)")
    if "ms-excel.sheet.binary" in ct:
        raise ExtractError("unsupported", "Excel binary workbook (.xlsb)")
    raise ExtractError("unsupported", "Office Open XML package of an unknown kind")


def decode_text(data: bytes) -> tuple[str, str] | None:
    """Decode bytes as text (BOMs, UTF-8, then GB18030); None when it looks binary."""
    for bom, enc in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                     (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            try:
                return data.decode(enc), enc
            except UnicodeDecodeError:
                return None
    if b"\x00" in data[:4096]:
        return None
    for enc in ("utf-8", "gb18030"):
        try:
            text = data.decode(enc)
        except UnicodeDecodeError as exc:
            # A sniff window may cut a multi-byte character at its end.
            if exc.start >= len(data) - 4:
                text = data[: exc.start].decode(enc)
            else:
                continue
        ctrl = sum(1 for ch in text[:4096] if ord(ch) < 32 and ch not in "\t\r\n\f")
        if ctrl > 4096 // 100:
            return None
        return text, enc
    return None


_HTML_RE = re.compile(r"<\s*(!doctype\s+html|html|head|body|table|meta|div|p)\b", re.I)


def _sniff_text(head: bytes, whole: bool = True) -> Sniffed:
    decoded = decode_text(head)
    if decoded is None:
        raise ExtractError("unsupported", "binary data of an unknown format")
    text, enc = decoded
    start = text.lstrip("\ufeff \t\r\n")
    low = start[:4096].lower()
    if low.startswith("mime-version:") or ("mime-version:" in low[:1024] and "multipart" in low):
        if "text/html" in text.lower():
            return Sniffed("html", "mht", enc)
        raise ExtractError("unsupported", "MIME message without an HTML part")
    if low.startswith("<?xml") and ("urn:schemas-microsoft-com:office" in low or "<html" in low):
        return Sniffed("html", "", enc)
    if low.startswith("<?xml"):
        raise ExtractError("unsupported", "XML document")
    if _HTML_RE.search(low[:2048]) and low.startswith("<"):
        return Sniffed("html", "", enc)
    if _looks_delimited(start, whole):
        return Sniffed("csv", "", enc)
    raise ExtractError("unsupported", "plain text without a table structure")


def _looks_delimited(text: str, whole: bool = True) -> bool:
    """Rows with about as many separators each. Unless ``text`` is the whole file, its last line was
    cut by the sniff window (fewer separators than the rows before it: a 1,000-column CSV was
    ``unsupported``) and is left out, unless it is the only line."""
    lines = text.splitlines()
    if not whole and len(lines) > 1:
        lines.pop()
    lines = [ln for ln in lines[:50] if ln.strip()]
    if not lines:
        return False
    for sep in ("\t", ",", ";", "|"):
        counts = [ln.count(sep) for ln in lines]
        if min(counts) >= 1 and (len(lines) == 1 or max(counts) - min(counts) <= max(2, max(counts) // 2)):
            return True
    return False
