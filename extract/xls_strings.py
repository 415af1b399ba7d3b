"""BIFF8 text: the shared-string table (strings split across CONTINUE records), XLUnicodeString, cell text
cleaned as XlsReader.java cleans it, and sheet header/footer codes turned into plain text.

Used by ``xls_stream``; every read is bounded by the record it comes from (the stream is untrusted).
"""

from __future__ import annotations

import re
import struct

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f]")  # XlsReader's Text.cleanCell: \n and \t stay, other controls go


def clean_cell(text: str) -> str:
    """XlsReader's Text.cleanCell: line breaks and tabs stay, other control characters go."""
    return _CTRL.sub("", text) if _CTRL.search(text) else text


def _header(data: bytes, p: int) -> tuple[int, int, int, int, int]:
    """An XLUnicodeString's header at ``p``: (character count, flags, rich-text runs, phonetic block
    bytes, where the characters start)."""
    cch, flags = _U16(data, p)[0], data[p + 2]
    p += 3
    runs = ext = 0
    if flags & 8:
        runs = _U16(data, p)[0]
        p += 2
    if flags & 4:
        ext = _U32(data, p)[0]
        p += 4
    return cch, flags, runs, ext, p


def xl_string(data: bytes, p: int, end: int) -> tuple[str, int]:
    """XLUnicodeString (16-bit count, flags, characters; rich-text and phonetic blocks skipped)."""
    cch, flags, runs, ext, p = _header(data, p)
    size = cch * 2 if flags & 1 else cch
    raw = data[p: min(p + size, end)]
    text = raw.decode("utf-16-le", "replace") if flags & 1 else raw.decode("latin-1")
    return text, p + size + 4 * runs + ext


def shared_strings(segs: list[bytes], count: int) -> list[str]:
    """The shared strings; a string's characters may continue in the next CONTINUE, after a new flags byte."""
    out: list[str] = []
    si, pos = 0, 0
    nseg = len(segs)
    seg = segs[0]
    while len(out) < count:
        if pos >= len(seg):
            si += 1
            if si >= nseg:
                break
            seg, pos = segs[si], 0
            continue
        cch, flags, runs, ext, pos = _header(seg, pos)
        high = flags & 1
        size = cch * 2 if high else cch
        if pos + size <= len(seg):  # the common case: the whole string in this record
            text = seg[pos: pos + size].decode("utf-16-le", "replace") if high else seg[pos: pos + size].decode("latin-1")
            pos += size
            if "\r" in text or _CTRL.search(text):
                text = clean_cell(text.replace("\r", ""))
            out.append(text if text.strip() else "")
            if runs or ext:
                pos, si, seg = _skip(segs, si, seg, pos, 4 * runs + ext)
            continue
        need = cch
        parts = []
        while need:
            avail = len(seg) - pos
            if avail <= 0:
                si += 1
                if si >= nseg:
                    raise ValueError("SST ends inside a string")
                seg = segs[si]
                high = seg[0] & 1
                pos = 1
                continue
            k = min(need, avail // 2 if high else avail)
            if k == 0:
                raise ValueError("SST string split inside a character")
            if high:
                parts.append(seg[pos: pos + 2 * k].decode("utf-16-le", "replace"))
                pos += 2 * k
            else:
                parts.append(seg[pos: pos + k].decode("latin-1"))
                pos += k
            need -= k
        text = parts[0] if len(parts) == 1 else "".join(parts)
        if "\r" in text or _CTRL.search(text):
            text = clean_cell(text.replace("\r", ""))
        out.append(text if text.strip() else "")  # XlsReader skips blank cells
        if runs or ext:
            pos, si, seg = _skip(segs, si, seg, pos, 4 * runs + ext)
    return out


def _skip(segs: list[bytes], si: int, seg: bytes, pos: int, skip: int) -> tuple[int, int, bytes]:
    """Past a string's rich-text runs and phonetic block, which continue without a flags byte."""
    while skip:
        avail = len(seg) - pos
        if skip <= avail:
            return pos + skip, si, seg
        skip -= avail
        si += 1
        if si >= len(segs):
            return 0, si - 1, b""
        seg, pos = segs[si], 0
    return pos, si, seg


_HF_SECTION = re.compile(r"&([LCR])")
_HF_FONT = re.compile(r'&"[^"]*"|&\d+|&[BIUSEXYKOHGZF]|&K[0-9A-Fa-f]{6}')


def header_footer(raw: str, sheet: str) -> str:
    """XlsReader.headerFooter: left, centre, right parts with page fields as placeholders, codes stripped."""
    parts = {"L": "", "C": "", "R": ""}
    cur = "C"
    last = 0
    for m in _HF_SECTION.finditer(raw):
        if m.start() > 0 and raw[m.start() - 1] == "&":
            continue
        parts[cur] += raw[last: m.start()]
        cur, last = m.group(1), m.end()
    parts[cur] += raw[last:]
    out = []
    for key in ("L", "C", "R"):
        s = parts[key]
        if not s:
            continue
        s = s.replace("&&", "\x00").replace("&P", "{PAGE}").replace("&N", "{NUMPAGES}").replace("&A", sheet)
        s = s.replace("&D", "{DATE}").replace("&T", "{TIME}")
        s = _HF_FONT.sub("", s).replace("\x00", "&")
        s = clean_cell(s.replace("\r", "")).strip()
        if s:
            out.append(s)
    return " ".join(out)
