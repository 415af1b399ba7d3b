"""The workbook-level parts of an .xlsx for the streaming reader: workbook.xml (sheets, epoch, print names, the
shared-strings and styles parts), the styles (number formats, date and wrap flags per cell format), and the
element walk over a part that the slower readers share.

Why its own module: every other piece of the stream (fast cells, the element path, shared strings, drawings)
reads these, and none of them should import another. Hazards: the zip is untrusted — ``ooxml.Package`` caps
every part's inflated size (declared, and while it is read or streamed); the big parts (sheets, shared strings)
go through ElementTree's expat, which never loads a DTD or an external entity and, from expat 2.4 on, stops
entity-amplification bombs.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tender_pool.extract.ooxml import Package

NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
ROW = f"{{{NS}}}row"
TRUE = ("1", "true")
WHOLE_PART = 32 << 20  # uncompressed bytes up to which a part is parsed in one go


class NeedsOpenpyxl(Exception):
    """The workbook needs the openpyxl path (shared formulas without cached values)."""


def elements(pkg: Package, name: str, tags, xml: bytes | None = None):
    """The part's elements with these tags, in document order, as ElementTree elements (expat builds and
    walks them ~3x faster than lxml's proxies). A part up to WHOLE_PART bytes is parsed at once (or ``xml``,
    the part's bytes as the caller edited them); a larger one is streamed, each handled row emptied."""
    wanted = set(tags)
    if xml is not None or pkg.zf.getinfo(name).file_size <= WHOLE_PART:
        root = ET.fromstring(xml if xml is not None else pkg.read(name))
        for el in root.iter():
            if el.tag in wanted:
                yield el
        return
    with pkg.open(name) as part:
        for _, el in ET.iterparse(part, events=("end",)):
            if el.tag in wanted:
                yield el
                if el.tag == ROW:
                    el.clear()


class Styles:
    """Per cell-format index: the number format code, date / duration flags, and the wrap flag."""

    def __init__(self, root):
        from openpyxl.styles.numbers import BUILTIN_FORMATS, is_date_format, is_timedelta_format

        custom = {}
        self.codes: list[str] = []
        self.dates: set[int] = set()
        self.durations: set[int] = set()
        self.wrap: set[int] = set()
        self.font: tuple[str, float] | None = None  # the first font: the workbook's default (column width unit)
        if root is None:
            return
        first = root.find(f"{{{NS}}}fonts/{{{NS}}}font")
        if first is not None:
            name, size = first.find(f"{{{NS}}}name"), first.find(f"{{{NS}}}sz")
            self.font = (name.get("val") or "" if name is not None else "", float_or(size.get("val"), 0.0)
                         if size is not None else 0.0)
        for nf in root.iterfind(f"{{{NS}}}numFmts/{{{NS}}}numFmt"):
            try:
                custom[int(nf.get("numFmtId"))] = nf.get("formatCode") or ""
            except (TypeError, ValueError):
                continue
        for i, xf in enumerate(root.iterfind(f"{{{NS}}}cellXfs/{{{NS}}}xf")):
            try:
                fid = int(xf.get("numFmtId") or 0)
            except ValueError:
                fid = 0
            code = custom[fid] if fid in custom else BUILTIN_FORMATS.get(fid, "General")
            self.codes.append(code)
            if is_date_format(code):
                self.dates.add(i)
            if is_timedelta_format(code):
                self.durations.add(i)
            al = xf.find(f"{{{NS}}}alignment")
            if al is not None and al.get("wrapText") in TRUE:
                self.wrap.add(i)

    def code(self, i: int) -> str:
        return self.codes[i] if 0 <= i < len(self.codes) else "General"


def float_or(v, default=None):
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def col_index(letters: str, cache: dict) -> int:
    n = cache.get(letters)
    if n is None:
        n = 0
        for ch in letters.upper():
            n = n * 26 + ord(ch) - 64
        cache[letters] = n
    return n


def workbook(pkg: Package):
    """(sheets [(title, state, part)], epoch, print areas and titles by sheet position, strings part, styles part)."""
    from openpyxl.utils.datetime import CALENDAR_MAC_1904, CALENDAR_WINDOWS_1900

    rels = pkg.rels("xl/workbook.xml")
    root = pkg.xml("xl/workbook.xml")
    if root is None:
        raise ValueError("no xl/workbook.xml")
    pr = root.find(f"{{{NS}}}workbookPr")
    epoch = CALENDAR_MAC_1904 if pr is not None and pr.get("date1904") in TRUE else CALENDAR_WINDOWS_1900
    sheets = []
    for i, sh in enumerate(root.iterfind(f"{{{NS}}}sheets/{{{NS}}}sheet")):
        typ, part = rels.get(sh.get(f"{{{R_NS}}}id") or "", ("", ""))
        sheets.append((sh.get("name") or "", sh.get("state") or "visible", part if typ == "worksheet" else None))
    names: dict[int, dict[str, str]] = {}
    for dn in root.iterfind(f"{{{NS}}}definedNames/{{{NS}}}definedName"):
        local = dn.get("localSheetId")
        if local is None or not (dn.get("name") or "").startswith("_xlnm."):
            continue
        try:
            names.setdefault(int(local), {})[dn.get("name")[6:]] = dn.text or ""
        except ValueError:
            continue
    strings = styles = None
    for typ, part in rels.values():
        if typ == "sharedStrings":
            strings = part
        elif typ == "styles":
            styles = part
    return sheets, epoch, names, strings, styles
