"""Text in .xlsx XML: the shared-string table, rich and inline strings, and escaped text between tags.

Owns openpyxl's ``data_only`` string semantics, restated for speed: phonetic runs dropped, ``x005F_`` removed,
references decoded, line ends normalised as an XML parser does. ``fast_strings`` reads the table by byte
substitutions where its shape allows; anything else goes through expat (``xlsx_parts.elements``).
"""

from __future__ import annotations

import itertools
import re

import xml.etree.ElementTree as ET

from lxml import etree

from tender_pool.extract.ooxml import Package
from tender_pool.extract.xlsx_parts import NS, elements

_T, _R = f"{{{NS}}}t", f"{{{NS}}}r"


def text_of(si) -> str:
    """openpyxl's ``Text.content``: the plain <t> and every run's <t>, never the phonetic <rPh> runs."""
    parts = []
    for ch in si:
        if ch.tag == _T:
            parts.append(ch.text or "")
        elif ch.tag == _R:
            for t in ch:
                if t.tag == _T and t.text is not None:
                    parts.append(t.text)
    return "".join(parts)


def shared_strings(pkg: Package, name: str | None) -> list[str]:
    if name is None or name not in pkg.names:
        return []
    fast = fast_strings(pkg.read(name) or b"")
    if fast is not None:
        return fast
    out = []
    for si in elements(pkg, name, (f"{{{NS}}}si",)):
        if len(si) == 1 and si[0].tag == _T:  # the common case: one plain <t>
            text = si[0].text or ""
        else:
            text = text_of(si)
        out.append(text.replace("x005F_", "") if "x005F_" in text else text)
        si.clear()
    return out


_SST_DROP = re.compile(rb"<rPh\b.*?</rPh>|<rPr>.*?</rPr>|<rPr/>|<phoneticPr\b[^>]*/>|</?[rt](?:\s[^>]*)?>|<t/>", re.S)
_RPR_EMPTY = re.compile(rb"<rPr>(?:<[^<>]*/>)*</rPr>")
_SST_TAGS = (b'<t xml:space="preserve">', b"<t>", b"</t>", b"<r>", b"</r>", b"<rPr/>", b"<t/>")
_ENTITY = re.compile(r"&(#[0-9]+|#x[0-9a-fA-F]+|amp|lt|gt|quot|apos);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
# a text between tags, never a document: no DTD, no entity but the five XML defines; a text node past 10 MB
_TEXT = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)


def unescape_all(items: list[bytes]) -> list[str]:
    """Texts between tags with their references decoded, by an XML parser in one parse: a reference at a time in
    Python cost 0.3 s on a bill whose Chinese openpyxl wrote as ``&#…;`` references. libxml2 (lxml) first:
    ElementTree's expat took ~5x longer over that bill's references; where libxml2 refuses the text, expat
    decides as before. (Both normalise line ends, as the element path's parse does, and refuse the same
    characters: tests/extract/test_xlsx_text.py.)"""
    if not items:
        return []
    # one text node, split at a private-use character (no element per item); any text holding that character
    # itself gives more parts than items, and the element per item below
    joined = b"<x>" + b"\xee\x80\x80".join(items) + b"</x>"
    try:
        parts = (etree.fromstring(joined, _TEXT).text or "").split("\ue000")
        if len(parts) == len(items):
            return parts
    except etree.XMLSyntaxError:
        pass
    try:
        parts = (ET.fromstring(joined).text or "").split("\ue000")
        if len(parts) == len(items):
            return parts
        return [t.text or "" for t in ET.fromstring(b"<x><t>" + b"</t><t>".join(items) + b"</t></x>")]
    except ET.ParseError:  # an entity XML does not define: one at a time, the known ones decoded
        return [_ENTITY.sub(_entity, x.decode()) for x in items]


def decode_texts(items: list[bytes]) -> list[str]:
    """Each text between tags decoded: ``unescape_all``'s result for those holding a reference (one parse of
    those), the UTF-8 text for the others — as one parse of all where that gives the same, without a Python step
    per text: where libxml2 parses every text, none holds a CR or a character XML refuses, so an XML text
    without references is its UTF-8 text, and a text with references decodes as in a parse of those alone."""
    parts = _one_parse(items)
    if parts is not None:
        return parts
    plain = iter(unescape_all([v for v in items if b"&" in v]))
    return [next(plain) if b"&" in v else v.decode() for v in items]


def unescape_each(items: list[bytes]) -> list[str]:
    """``unescape`` of each text, by one parse where that gives the same: where libxml2 parses every text, each
    holds only the references ``unescape`` decodes, and none a CR (which the parse would normalise)."""
    parts = _one_parse(items)
    return parts if parts is not None else list(map(unescape, items))


def _one_parse(items: list[bytes]) -> list[str] | None:
    """The texts decoded by one libxml2 parse of them all, joined by a private-use character; None where that
    cannot stand for decoding each alone: no texts, a CR in one (the parse would normalise it), a text libxml2
    refuses, or a text that holds the joining character itself (the split would not give one part a text)."""
    joined = b"\xee\x80\x80".join(items)
    if not items or b"\r" in joined:
        return None
    try:
        parts = (etree.fromstring(b"<x>" + joined + b"</x>", _TEXT).text or "").split("\ue000")
    except etree.XMLSyntaxError:
        return None
    return parts if len(parts) == len(items) else None


def unescape(b: bytes) -> str:
    """One text between tags, its references decoded."""
    s = b.decode()
    return _ENTITY.sub(_entity, s) if "&" in s else s


def _entity(m: re.Match) -> str:
    e = m.group(1)
    if e[0] != "#":
        return _NAMED[e]
    return chr(int(e[2:], 16) if e[1] in "xX" else int(e[1:]))


def fast_strings(data: bytes) -> list[str] | None:
    """The shared-string table by a few C-speed byte substitutions instead of a parse (LibreOffice writes
    every mixed-font string as runs with their fonts: 4 MB for a 12k-row bill, 0.5 s through expat).
    Returns None for anything but the plain unprefixed UTF-8 shape, which the XML parser then reads."""
    head = data[:200]
    if b"encoding=" in head and b'encoding="UTF-8"' not in head and b"encoding='UTF-8'" not in head:
        return None
    start = data.find(b"<si")
    end = data.rfind(b"</sst>")
    if start < 0 or end < 0:
        return [] if start < 0 and end >= 0 else None
    if b"<!DOCTYPE" in data[:start] or b"<!" in data[end:]:
        return None  # comments or CDATA between the items leave a "<" the count below refuses
    body = data[start:end].replace(b"<si/>", b"<si></si>")
    # the common markup by plain byte replaces (C memmem passes); formatting runs' properties, which hold only
    # empty elements, by one pattern that steps a tag at a time; anything left (phonetic runs, attributes on
    # <r>/<t>, other spellings) by the general pattern, and what even that leaves is refused below
    if b"<rPr>" in body:
        body = _RPR_EMPTY.sub(b"", body)
    for tag in _SST_TAGS:
        if tag in body:
            body = body.replace(tag, b"")
    if b"<r" in body or b"<t" in body or b"<p" in body:
        body = _SST_DROP.sub(b"", body)
    n = body.count(b"</si>")
    if body.count(b"<") != 2 * n or body.count(b"<si>") != n:
        return None  # an element this shortcut does not know
    text = body.decode("utf-8")
    if "\r" in text:  # XML end-of-line handling (before references: &#13; stays a CR)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    parts = text.split("</si>")
    if parts.pop().strip() or not all(map(str.startswith, parts, itertools.repeat("<si>"))):
        return None
    out = [p[4:] for p in parts]
    if "&" in text:
        out = [_ENTITY.sub(_entity, t) if "&" in t else t for t in out]
    if "x005F_" in text or "&" in text:
        out = [t.replace("x005F_", "") if "x005F_" in t else t for t in out]
    return out
