"""The fast .xlsx path: a worksheet's cells by regular expressions over its bytes, element parsing for the rest.

Owns the cell semantics of openpyxl's ``data_only`` reader, restated for speed: shared and inline strings
(phonetic runs dropped, ``x005F_`` removed), booleans, errors, ISO dates, numbers cast to int or float, date
and duration styles converted with the workbook's epoch, number formats as displayed (``numfmt``), wrap flags
from the cell's alignment. ``_fast_cells`` reads the common shapes of sheetData (every writer's ``<c r s t>``)
with one pattern and builds the cells a kind at a time (``_cells_of``); any other shape goes to the element
path (``_sheet_elements``, expat; a part over WHOLE_PART bytes streamed with its rows cleared). The small
elements around the cells (page setup, margins, sheet format, header/footer, print titles and areas) are
decoded by openpyxl's own classes and handed to ``xlsx_setup.page_setup`` through ``_SheetView``, so the page
estimate sees exactly what the openpyxl path gives it.

Formula cells without a cached value (generators such as openpyxl store none) are collected while the sheets
are read and computed once every sheet's values are in (``xlsx_formulas``, ``formula``), so such a workbook
stays on this path. ``NeedsOpenpyxl`` is raised for what this path does not model (a shared formula without a
cached value); the caller then takes the openpyxl path. Hazards: the zip is untrusted — ``ooxml.Package`` caps
every part's inflated size (declared, and while it is read or streamed); the big parts (sheets, shared
strings) go through ElementTree's expat, which never loads a DTD or an external entity and, from expat
2.4 on, stops entity-amplification bombs.
"""

from __future__ import annotations

import itertools
import operator
import posixpath
import re

import xml.etree.ElementTree as ET

from tender_pool.extract.blocks import Block, Image, Merge, Meta, Sheet, SheetCell
from tender_pool.extract.numfmt import format_all, format_value, formatter, general
from tender_pool.extract.ooxml import Package
from tender_pool.extract.formula import Formula
from tender_pool.extract.xlsx_formulas import Pending, SheetValues, evaluate_workbook, formula_warnings
from tender_pool.extract.xlsx_setup import hf_text, page_setup

NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
XDR = "http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing"
A_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"
_ROW, _C, _V, _F, _IS, _T, _R, _RPH = (f"{{{NS}}}{t}" for t in ("row", "c", "v", "f", "is", "t", "r", "rPh"))
_DIGITS = "0123456789"
_FIRST = operator.itemgetter(0)
_TRUE = ("1", "true")
WHOLE_PART = 32 << 20  # uncompressed bytes up to which a part is parsed in one go


class NeedsOpenpyxl(Exception):
    """The workbook needs the openpyxl path (shared formulas without cached values)."""


def _text_of(si) -> str:
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


def _shared_strings(pkg: Package, name: str | None) -> list[str]:
    if name is None or name not in pkg.names:
        return []
    fast = _fast_strings(pkg.read(name) or b"")
    if fast is not None:
        return fast
    out = []
    for si in _elements(pkg, name, (f"{{{NS}}}si",)):
        if len(si) == 1 and si[0].tag == _T:  # the common case: one plain <t>
            text = si[0].text or ""
        else:
            text = _text_of(si)
        out.append(text.replace("x005F_", "") if "x005F_" in text else text)
        si.clear()
    return out


_SST_DROP = re.compile(rb"<rPh\b.*?</rPh>|<rPr>.*?</rPr>|<rPr/>|<phoneticPr\b[^>]*/>|</?[rt](?:\s[^>]*)?>|<t/>", re.S)
_RPR_EMPTY = re.compile(rb"<rPr>(?:<[^<>]*/>)*</rPr>")
_SST_TAGS = (b'<t xml:space="preserve">', b"<t>", b"</t>", b"<r>", b"</r>", b"<rPr/>", b"<t/>")
_ENTITY = re.compile(r"&(#[0-9]+|#x[0-9a-fA-F]+|amp|lt|gt|quot|apos);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def unescape_all(items: list[bytes]) -> list[str]:
    """Texts between tags with their references decoded, by expat in one parse: a reference at a time in Python
    cost 0.3 s on a bill whose Chinese openpyxl wrote as ``&#…;`` references. (Expat also normalises line ends,
    as the element path's parse does.)"""
    if not items:
        return []
    try:  # one text node, split at a private-use character (no element per item); any text holding that
        # character itself gives more parts than items, and the element per item below
        parts = (ET.fromstring(b"<x>" + b"\xee\x80\x80".join(items) + b"</x>").text or "").split("\ue000")
        if len(parts) == len(items):
            return parts
        return [t.text or "" for t in ET.fromstring(b"<x><t>" + b"</t><t>".join(items) + b"</t></x>")]
    except ET.ParseError:  # an entity XML does not define: one at a time, the known ones decoded
        return [_ENTITY.sub(_entity, x.decode()) for x in items]


def unescape(b: bytes) -> str:
    """One text between tags, its references decoded."""
    s = b.decode()
    return _ENTITY.sub(_entity, s) if "&" in s else s


def _entity(m: re.Match) -> str:
    e = m.group(1)
    if e[0] != "#":
        return _NAMED[e]
    return chr(int(e[2:], 16) if e[1] in "xX" else int(e[1:]))


def _fast_strings(data: bytes) -> list[str] | None:
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


def _elements(pkg: Package, name: str, tags, xml: bytes | None = None):
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
                if el.tag == _ROW:
                    el.clear()


class _Styles:
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
            self.font = (name.get("val") or "" if name is not None else "", _float(size.get("val"), 0.0)
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
            if al is not None and al.get("wrapText") in _TRUE:
                self.wrap.add(i)

    def code(self, i: int) -> str:
        return self.codes[i] if 0 <= i < len(self.codes) else "General"


class _SheetView:
    """The attributes of an openpyxl Worksheet that ``xlsx_setup.page_setup`` and the header/footer read."""

    def __init__(self, title: str):
        from openpyxl.worksheet.header_footer import HeaderFooter
        from openpyxl.worksheet.page import PageMargins, PrintPageSetup
        from openpyxl.worksheet.dimensions import SheetFormatProperties

        self.title = title
        self.default_font: tuple[str, float] | None = None
        self.page_setup = PrintPageSetup()
        self.sheet_properties = _FitToPage(None)
        self.page_margins = PageMargins()
        self.sheet_format = SheetFormatProperties()
        self.HeaderFooter = HeaderFooter()
        self.print_area: str | None = None
        self.print_title_rows: str | None = None
        self.column_dimensions: dict = {}
        self.row_dimensions: dict = {}
        self.max_column = 1
        self.row_breaks = _Breaks()
        self.col_breaks = _Breaks()

    @property
    def oddHeader(self):
        return self.HeaderFooter.oddHeader

    @property
    def oddFooter(self):
        return self.HeaderFooter.oddFooter


class _Breaks:
    def __init__(self, ids=()):
        self.brk = [_Brk(i) for i in ids]


class _Brk:
    def __init__(self, i: int):
        self.id = i


class _Dim:
    """A column's or row's dimensions. Unlike openpyxl (whose ``customHeight`` is "any height stored"), a row
    keeps the file's own customHeight flag: a stored height without it is one the application fits to the
    content again (LibreOffice regrows wrapped rows), as the .xls reader reports from ROW's fUnsynced."""

    __slots__ = ("min", "max", "width", "hidden", "ht", "customHeight")

    def __init__(self, min=None, max=None, width=None, hidden=False, ht=None, custom=False):
        self.min, self.max, self.width, self.hidden, self.ht = min, max, width, hidden, ht
        self.customHeight = custom


def _float(v, default=None):
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def _col_index(letters: str, cache: dict) -> int:
    n = cache.get(letters)
    if n is None:
        n = 0
        for ch in letters.upper():
            n = n * 26 + ord(ch) - 64
        cache[letters] = n
    return n


def _workbook(pkg: Package):
    """(sheets [(title, state, part)], epoch, print areas and titles by sheet position, strings part, styles part)."""
    from openpyxl.utils.datetime import CALENDAR_MAC_1904, CALENDAR_WINDOWS_1900

    rels = pkg.rels("xl/workbook.xml")
    root = pkg.xml("xl/workbook.xml")
    if root is None:
        raise ValueError("no xl/workbook.xml")
    pr = root.find(f"{{{NS}}}workbookPr")
    epoch = CALENDAR_MAC_1904 if pr is not None and pr.get("date1904") in _TRUE else CALENDAR_WINDOWS_1900
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


def read_stream(path: str) -> list[Block]:
    """Blocks of an .xlsx by streaming; raises NeedsOpenpyxl, or what the XML and zip layers raise."""
    pkg = Package(path)
    try:
        sheets, epoch, names, strings_part, styles_part = _workbook(pkg)
        strings = _shared_strings(pkg, strings_part)
        styles = _Styles(pkg.xml(styles_part) if styles_part else None)
        read = []
        for pos, (title, state, part) in enumerate(sheets):
            if part is None or part not in pkg.names:
                continue
            view = _SheetView(title)
            view.default_font = styles.font
            cells, merges, values, pending = _sheet(pkg, part, view, strings, styles, epoch)
            _print_names(view, names.get(pos, {}))
            read.append((title, state, part, view, cells, merges, values, pending))
        warnings: list[str] = []
        if any(x[7] for x in read):  # formulas without cached values: computed once every sheet's values are in
            more, computed, shown = evaluate_workbook([(x[0], x[6], x[7]) for x in read], styles, epoch, _cells_of)
            for x in read:
                x[4].extend(more.get(x[0], ()))
            warnings += formula_warnings(computed, shown)
        blocks: list[Block] = [Meta(format="xlsx", engine="xlsx-stream", warnings=warnings)]
        for title, state, part, view, cells, merges, _, _ in read:
            hf = view.HeaderFooter
            blocks.append(Sheet(name=title, cells=cells, merges=merges, hidden=state != "visible",
                                header=hf_text(hf.oddHeader) if hf.oddHeader else "",
                                footer=hf_text(hf.oddFooter) if hf.oddFooter else "",
                                setup=page_setup(view)))
            blocks += _images(pkg, part, view, title)
        return blocks
    finally:
        pkg.close()


def _print_names(view: _SheetView, names: dict[str, str]) -> None:
    from openpyxl.worksheet.print_settings import PrintArea, PrintTitles

    if "Print_Area" in names:
        try:
            pa = PrintArea.from_string(names["Print_Area"])
            pa.title = view.title
            view.print_area = str(pa)
        except (TypeError, ValueError):
            pass
    if "Print_Titles" in names:
        rows = PrintTitles.from_string(names["Print_Titles"]).rows
        view.print_title_rows = str(rows) if rows else None


def _sheet(pkg: Package, part: str, view: _SheetView, strings: list[str], styles: _Styles, epoch):
    """(cells, merges, values, pending) of one worksheet: sheetData by ``_fast_cells`` where it can, else element
    by element; ``values`` and ``pending`` (formula cells without a cached value) are for ``xlsx_formulas``."""
    if pkg.zf.getinfo(part).file_size <= WHOLE_PART:
        data = pkg.read(part)
        fast = _fast_cells(data, view, strings, styles, epoch)
        if fast is not None:
            cells, max_col, rest, values, pending = fast
            _, merges, _, _ = _sheet_elements(pkg, part, view, strings, styles, epoch, rest)
            view.max_column = max(view.max_column, max_col)
            return cells, merges, values, pending
    return _sheet_elements(pkg, part, view, strings, styles, epoch)


_ROW_TAG = re.compile(rb'<row r="([0-9]+)"([^>]*)>')  # the attributes end with "/" in an empty row
_DEFAULT_HEIGHT = re.compile(rb'<(?:\w+:)?sheetFormatPr\b[^>]*?\bdefaultRowHeight="([^"]*)"')
_ROW_HT, _ROW_HIDDEN, _ROW_CUSTOM = (re.compile(rb'\s%s="([^"]*)"' % a) for a in (b"ht", b"hidden", b"customHeight"))
# the cell shape every common writer uses (attributes r, s, t in this order; an optional formula; a value)
# (group 7: a plain inline string, as openpyxl writes every string). The formula element: a greedy scan to its
# first ">" then its text, before the self-closing form: a lazy "[^>]*?/>" first tried "/>" at every character of
# the attributes (LibreOffice writes aca="false" on each), half the time of the whole match
_CELL = re.compile(rb'<c r="([A-Z]{1,3})([0-9]+)"(?: s="([0-9]+)")?(?: t="([a-zA-Z]+)")?\s*'
                   rb'(?:/>|>(<f\b[^>]*>[^<]*</f>|<f\b[^>]*/>)?'
                   rb'(?:<v>([^<]*)</v>|<v/>|<is><t(?: xml:space="preserve")?>([^<]*)</t></is>)?</c>)')
# the commonest shapes in one pattern (see _cells_of): a shared string (group 4), an empty cell (no value; its
# column still counts for the sheet's width), a number (group 5; cached values of formulas too)
_OTHER_TYPE = re.compile(rb' t="(?!s"|n")[a-zA-Z]+">')  # a typed cell with content _SN_CELL never matches
_SN_CELL = re.compile(rb'<c r="([A-Z]{1,3})([0-9]+)"(?: s="([0-9]+)")?(?: t="s"><v>([0-9]+)</v></c>'
                      rb'|(?: t="[a-zA-Z]+")?/>|(?: t="n")?>(?:<f\b[^>]*>[^<]*</f>|<f\b[^>]*/>)?<v>([^<]+)</v></c>)')


def _fast_cells(data: bytes, view: _SheetView, strings: list[str], styles: _Styles, epoch):
    """The sheetData of a worksheet by two regular expressions instead of an XML tree: (cells, max column,
    the part without its cells) — or None for a shape this does not model (namespace prefixes, cells without
    ``r``, inline strings, CDATA or comments), which the element path then reads. Same cell semantics as
    ``_sheet_elements`` (tests/extract/test_xlsx.py compares both): a 12k-row sheet in ~1/10 of the time."""
    start = data.find(b"<sheetData")
    if start < 0 or data.find(b"<sheetData", start + 1) >= 0:
        return None
    open_end = data.find(b">", start)
    if data[open_end - 1: open_end] == b"/":
        end = open_end + 1
        body = b""
    else:
        close = data.find(b"</sheetData>", open_end)
        if close < 0:
            return None
        end = close + len(b"</sheetData>")
        body = data[open_end + 1: close]
    # comments could hide cells from nothing but a parser; prefixed names (x:c) from the counts below. Inline
    # strings, CDATA and other shapes match neither cell pattern, so the counts refuse them.
    if b"<!--" in body or b":c " in body:
        return None
    rest_xml = data[:start] + b"<sheetData/>" + data[end:]
    rows = _ROW_TAG.findall(body)
    if len(rows) != body.count(b"<row"):
        return None  # a row without r="…" first: the element path counts rows itself
    # only a height or the hidden flag reaches the page setup (xlsx_setup.page_setup); other attributes would
    # give a _Dim it skips, so such rows are not looked at further. Rows mostly share one attribute string
    # (LibreOffice writes ht, hidden and customHeight on every row): one _Dim each, shared by its rows.
    # A row refitted by the application at the default height is left out here as xlsx_setup.page_setup leaves
    # it out (LibreOffice stores one on every row).
    fmt = _DEFAULT_HEIGHT.search(data, 0, start)
    default_height = _float(fmt.group(1), 15.0) if fmt else 15.0
    dims = {}
    for attrs in {a for _, a in rows}:
        if b"ht=" not in attrs and b"hidden=" not in attrs:
            continue
        ht = _ROW_HT.search(attrs)
        hidden = _ROW_HIDDEN.search(attrs)
        custom = _ROW_CUSTOM.search(attrs)
        dim = _Dim(hidden=hidden is not None and hidden.group(1) in (b"1", b"true"),
                   ht=_float(ht.group(1)) if ht else None,
                   custom=custom is not None and custom.group(1) in (b"1", b"true"))
        if dim.hidden or dim.customHeight or dim.ht is not None and dim.ht != default_height:
            dims[attrs] = dim
    if dims:
        view.row_dimensions.update({int(r): dims[a] for r, a in rows if a in dims})
    total = body.count(b"<c")  # every cell (sheetData holds no other element starting so; <c> was refused)
    # inline strings (openpyxl writes every string so) never match the common shapes: straight to the general one
    # nor does a cell of another type with content (LibreOffice's t="str" formula results): one search saves
    # a whole findall that would fall short
    common = _SN_CELL.findall(body) if b"<is>" not in body and _OTHER_TYPE.search(body) is None else []
    pending: list = []
    if len(common) == total:  # the commonest shapes are all there is
        rest: list = []
        sst = common
        values = SheetValues(lambda: {c + r: (b"s" if si else b"n", si or num or None, None)
                                      for c, r, _, si, num in sst if si or num}, strings, True, (), unescape,
                             lambda: {(c + r).decode(): float(num) for c, r, _, si, num in sst if num})
        strs = [(c, r, s, si) for c, r, s, si, _ in common if si]
        nums = [(s, c, r, num) for c, r, s, _, num in common if num]
    else:  # other types, formulas, inline strings, values in other spellings: the general shape, same kinds
        found = _CELL.findall(body)
        if len(found) != total:
            return None  # some cell did not match the general shape either (rich inline strings, CDATA …)
        if b"<f" in body:
            pending = _pending(found)
        common = found  # (column, row, style first, as in _SN_CELL's)
        strs = [(c, r, s, v) for c, r, s, t, _, v, _ in found if t == b"s" and v]
        nums = [(s, c, r, v) for c, r, s, t, _, v, _ in found if v and (t == b"n" or not t)]
        rest = [(c, r, s, t, v or inl) for c, r, s, t, _, v, inl in found
                if (v or inl) and t and t != b"s" and t != b"n"]
        values = SheetValues(lambda: {c + r: (t, v or inl or None, f or None) for c, r, _, t, f, v, inl in found
                                      if not v or (t and t != b"n")},  # numbers: in the lambda below
                             strings, True, pending, unescape,
                             lambda: {(c + r).decode(): float(v) for c, r, _, t, _, v, _ in found
                                      if v and (not t or t == b"n")})
    if not common:
        return [], 0, rest_xml, values, pending
    letters = {x[0] for x in common}
    colmap = {c: _col_index(c.decode(), {}) for c in letters}
    max_col = max(colmap.values())
    colmap = {c: i - 1 for c, i in colmap.items()}
    rowmap = {r: int(r) - 1 for r, _ in rows}
    nstyles = len(styles.codes)
    ids = {str(i).encode(): i for i in range(nstyles)}
    ids[b""] = 0
    try:
        cells = _cells_of(strs, nums, rest, rowmap, colmap, ids, strings, styles, epoch)
    except KeyError:  # a row or style spelled otherwise (r="07", s="01") or out of range: maps from the cells
        rowmap = {r: int(r) - 1 for r in {x[1] for part in (common, rest) for x in part}}
        ids = {s: int(s) if s else 0 for s in {x[2] for part in (common, rest) for x in part}}
        cells = _cells_of(strs, nums, rest, rowmap, colmap, ids, strings, styles, epoch)
    return cells, max_col, rest_xml, values, pending


def _pending(found: list) -> list[Pending]:
    """The regex path's formula cells without a cached value (a formula whose cached text result is empty, as
    LibreOffice stores ="" results, has one: the empty string). Shared formulas are left to openpyxl, which
    translates a shared formula to each cell of its range."""
    cells = [(c, r, s, f) for c, r, s, t, f, v, inl in found if f and not v and not inl and t != b"str"]
    heads = [f[: f.find(b">") + 1] for _, _, _, f in cells]
    if any(h.endswith(b"/>") or b'"shared"' in h for h in heads):
        raise NeedsOpenpyxl("shared formula without a cached value")
    bodies = [f[len(h): -4] for (_, _, _, f), h in zip(cells, heads)]  # (_CELL: the element ends with </f>)
    escaped = iter(unescape_all([b for b in bodies if b"&" in b or b"\r" in b]))  # one parse: references, CRs
    texts = [next(escaped) if b"&" in b or b"\r" in b else b.decode() for b in bodies]
    return [Formula(text, r.decode(), c.decode(), int(s) if s else 0) for (c, r, s, _), text in zip(cells, texts)]


def _cells_of(strs: list, nums: list, rest: list, rowmap: dict, colmap: dict, ids: dict, strings: list[str],
              styles: _Styles, epoch) -> list:
    """SheetCells of the matched cells, a kind at a time: ``strs`` (column, row, style, shared-string index) the
    shared strings, ``nums`` (style, column, row, number) the numbers, style by style through
    ``numfmt.format_all`` (sorted here, in place); ``rest`` (column, row, style, type, value) the other types. Why: one Python loop body per
    cell was ~2 µs (0.2 s for a 12k-row bill); comprehensions and C-level ``map`` over a kind take a fraction.
    The list is thus in that order, not the sheet's (nothing reads cells in order). ``ids``: style index by
    its attribute's bytes (a KeyError for one missing, as for a row missing from ``rowmap``)."""
    from openpyxl.utils.datetime import from_excel, from_ISO8601

    codes, dates, durations, wrap = styles.codes, styles.dates, styles.durations, styles.wrap
    nstyles = len(codes)
    wrap_of = {s: i in wrap for s, i in ids.items()}
    cells = [SheetCell(rowmap[r], colmap[c], strings[int(v)], "string", wrap_of[s]) for c, r, s, v in strs]
    if "" in strings:
        cells = [c for c in cells if c.v]
    append = cells.append
    nums.sort(key=_FIRST)  # style by style: one sort in C, not one pass over the cells per style
    for style, same in itertools.groupby(nums, _FIRST):
        sid = ids[style]
        group = [(c, r, v) for _, c, r, v in same]
        if sid in dates:  # dates and durations: one by one
            code = codes[sid] if sid < nstyles else "General"
            for c, r, v in group:
                num = float(v) if (b"." in v or b"E" in v or b"e" in v) else int(v)
                try:
                    value = from_excel(num, epoch, timedelta=sid in durations)
                except (OverflowError, ValueError):
                    append(SheetCell(rowmap[r], colmap[c], "#VALUE!", "error"))
                    continue
                if sid in durations:  # a timedelta: openpyxl's reader does not call it a date
                    append(SheetCell(rowmap[r], colmap[c], format_value(value, code, is_date=False), "number"))
                else:
                    append(SheetCell(rowmap[r], colmap[c], format_value(value, code, is_date=True), "date"))
            continue
        vals = [v for _, _, v in group]
        show = formatter(codes[sid]) if sid < nstyles else general
        exact = False
        try:
            values = list(map(int, vals))
            all_int = True
        except ValueError:
            all_int = False
            if (show is general or hasattr(show, "spec")) and max(map(len, vals)) <= 15:
                values = list(map(float, vals))  # these two show an int < 1e15 and its float alike
                if hasattr(show, "spec"):  # no ties to round (more decimals than shown), no -0: one format() each
                    joined = b" ".join(vals)
                    exact = (b"-" not in joined and b"e" not in joined and b"E" not in joined
                             and re.search(rb"\.[0-9]{%d}" % (show.decimals + 1), joined) is None)
            else:
                values = [float(v) if (b"." in v or b"E" in v or b"e" in v) else int(v) for v in vals]
        texts = format_all(show, values, all_int or exact)
        cells += [SheetCell(rowmap[r], colmap[c], t, "number") for (c, r, _), t in zip(group, texts)]
    escaped = [x[4] for x in rest if b"&" in x[4]]
    plain = iter(unescape_all(escaped))
    texts = [next(plain) if b"&" in x[4] else x[4].decode() for x in rest]
    # text cells (openpyxl writes every string inline, LibreOffice formula text results as str) in one pass
    cells += [SheetCell(rowmap[x[1]], colmap[x[0]], v, "string", wrap_of[x[2]]) for x, v in zip(rest, texts)
              if (x[3] == b"inlineStr" and v) or x[3] == b"str"]
    for (c, r, s, t, _), v in zip(rest, texts):
        if t == b"inlineStr" or t == b"str":
            continue
        r0, c0, sid = rowmap[r], colmap[c], ids[s]
        if t == b"str":
            append(SheetCell(r0, c0, v, "string", sid in wrap))
        elif t == b"b":
            append(SheetCell(r0, c0, "TRUE" if int(v) else "FALSE", "bool"))
        elif t == b"e":
            append(SheetCell(r0, c0, v, "error", sid in wrap))
        elif t == b"inlineStr":
            if v:
                append(SheetCell(r0, c0, v, "string", sid in wrap))
        elif t == b"d":
            append(SheetCell(r0, c0, format_value(from_ISO8601(v), codes[sid] if sid < nstyles else "General",
                                                  is_date=True), "date"))
    return cells


def _sheet_elements(pkg: Package, part: str, view: _SheetView, strings: list[str], styles: _Styles, epoch,
                    xml: bytes | None = None):
    from openpyxl.utils.cell import range_boundaries
    from openpyxl.utils.datetime import from_excel, from_ISO8601
    from openpyxl.utils.units import DEFAULT_COLUMN_WIDTH
    from openpyxl.worksheet.dimensions import SheetFormatProperties
    from openpyxl.worksheet.header_footer import HeaderFooter
    from openpyxl.worksheet.page import PageMargins, PrintPageSetup

    tags = [f"{{{NS}}}{t}" for t in ("row", "col", "mergeCell", "pageMargins", "pageSetup", "headerFooter",
                                     "sheetFormatPr", "pageSetUpPr", "rowBreaks", "colBreaks", "hyperlink",
                                     "drawing")]
    cells: list[SheetCell] = []
    merges: list[Merge] = []
    append = cells.append
    letters: dict[str, int] = {}
    codes, dates, durations, wrap = styles.codes, styles.dates, styles.durations, styles.wrap
    nstyles = len(codes)
    row_no = 0
    max_col = 0
    raw: dict[str, tuple] = {}  # reference -> (type, value, formula text): what formulas without a value read
    pending: list[Pending] = []
    row_breaks: list[int] = []
    col_breaks: list[int] = []
    for el in _elements(pkg, part, tags, xml):
        tag = el.tag
        if tag == _ROW:
            r = el.get("r")
            row_no = (int(r) if r.isdigit() else int(float(r))) if r else row_no + 1
            attrs = el.attrib
            if len(attrs) > (("r" in attrs) + ("spans" in attrs)):
                hidden = attrs.get("hidden") in _TRUE
                view.row_dimensions[row_no] = _Dim(hidden=hidden, ht=_float(attrs.get("ht")),
                                                   custom=attrs.get("customHeight") in _TRUE)
            col = 0
            r0 = row_no - 1
            for c in el:
                if c.tag != _C:
                    continue
                ref = c.get("r")
                if ref:
                    col = _col_index(ref.rstrip(_DIGITS), letters)
                else:
                    col += 1
                if col > max_col:
                    max_col = col
                t = c.get("t") or "n"
                s = c.get("s")
                sid = int(s) if s else 0
                v = None
                f_el = None
                inline = None
                for ch in c:
                    ct = ch.tag
                    if ct == _V:
                        v = ch.text
                    elif ct == _F:
                        f_el = ch
                    elif ct == _IS:
                        inline = ch
                key = (ref if ref else _col_letters(col) + str(row_no)).replace("$", "")
                if t == "inlineStr":
                    if inline is None:
                        continue
                    text = _text_of(inline)
                    raw[key] = (t, text, None)
                    if text:
                        append(SheetCell(r0, col - 1, text, "string", sid in wrap))
                    continue
                if not v:
                    if f_el is not None and t != "str":  # (a cached ="" result is an empty str)
                        if f_el.get("t") == "shared" or not f_el.text:
                            raise NeedsOpenpyxl("shared formula without a cached value")
                        raw[key] = (t, None, f_el.text)
                        pending.append(Pending(key.rstrip(_DIGITS), key[len(key.rstrip(_DIGITS)):], sid, f_el.text))
                    elif f_el is not None:
                        raw[key] = ("str", "", None)
                    continue
                raw[key] = (t, v, None)
                if t == "n":
                    num = float(v) if ("." in v or "E" in v or "e" in v) else int(v)
                    code = codes[sid] if sid < nstyles else "General"
                    if sid in dates:
                        try:
                            value = from_excel(num, epoch, timedelta=sid in durations)
                        except (OverflowError, ValueError):
                            append(SheetCell(r0, col - 1, "#VALUE!", "error"))
                            continue
                        if sid in durations:  # a timedelta: openpyxl's reader does not call it a date
                            append(SheetCell(r0, col - 1, format_value(value, code, is_date=False), "number"))
                        else:
                            append(SheetCell(r0, col - 1, format_value(value, code, is_date=True), "date"))
                    else:
                        append(SheetCell(r0, col - 1, format_value(num, code, is_date=False), "number"))
                elif t == "s":
                    text = strings[int(v)]
                    if text:
                        append(SheetCell(r0, col - 1, text, "string", sid in wrap))
                elif t == "str":
                    append(SheetCell(r0, col - 1, v, "string", sid in wrap))
                elif t == "b":
                    append(SheetCell(r0, col - 1, "TRUE" if int(v) else "FALSE", "bool"))
                elif t == "e":
                    append(SheetCell(r0, col - 1, v, "error", sid in wrap))
                elif t == "d":
                    value = from_ISO8601(v)
                    append(SheetCell(r0, col - 1, format_value(value, codes[sid] if sid < nstyles else "General",
                                                              is_date=True), "date"))
            el.clear()
        elif tag.endswith("}col"):
            try:
                lo = int(el.get("min"))
                hi = int(el.get("max") or lo)
            except (TypeError, ValueError):
                continue
            width = _float(el.get("width"))
            view.column_dimensions[lo] = _Dim(min=lo, max=hi, width=DEFAULT_COLUMN_WIDTH if width is None else width,
                                              hidden=el.get("hidden") in _TRUE)
        elif tag.endswith("}mergeCell"):
            ref = el.get("ref") or ""
            try:
                c1, r1, c2, r2 = range_boundaries(ref)
            except (TypeError, ValueError):
                continue
            merges.append(Merge(r1 - 1, c1 - 1, r2 - 1, c2 - 1))
            max_col = max(max_col, c2)
        elif tag.endswith("}hyperlink"):
            ref = el.get("ref") or ""
            try:
                max_col = max(max_col, range_boundaries(ref)[2])
            except (TypeError, ValueError):
                pass
        elif tag.endswith("Breaks"):
            for brk in el:
                try:
                    (row_breaks if tag.endswith("}rowBreaks") else col_breaks).append(int(brk.get("id") or 0))
                except ValueError:
                    continue
        elif tag.endswith("}pageMargins"):
            view.page_margins = PageMargins.from_tree(el)
        elif tag.endswith("}pageSetup"):
            view.page_setup = PrintPageSetup.from_tree(el)
        elif tag.endswith("}headerFooter"):
            view.HeaderFooter = HeaderFooter.from_tree(el)
        elif tag.endswith("}sheetFormatPr"):
            view.sheet_format = SheetFormatProperties.from_tree(el)
        elif tag.endswith("}pageSetUpPr"):
            view.sheet_properties = _FitToPage(_FitToPage(el.get("fitToPage") in _TRUE))
        elif tag.endswith("}drawing"):
            view.drawing = el.get(f"{{{R_NS}}}id")
    view.max_column = max(1, max_col)
    view.row_breaks, view.col_breaks = _Breaks(row_breaks), _Breaks(col_breaks)
    return cells, merges, SheetValues(lambda: raw, strings, False, pending, None,
                                      lambda: {k: float(v) for k, (t, v, _) in raw.items() if v and t == "n"}), pending


def _col_letters(n: int) -> str:
    s = ""
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(65 + r) + s
    return s


class _FitToPage:
    """Stands in for openpyxl's sheet properties (``.pageSetUpPr``) and page setup properties (``.fitToPage``)."""

    def __init__(self, value):
        self.fitToPage = self.pageSetUpPr = value


def _images(pkg: Package, part: str, view: _SheetView, title: str) -> list[Block]:
    """Pictures anchored on the sheet (type from the image part's extension, anchor cell, size in pixels)."""
    rid = getattr(view, "drawing", None)
    if not rid:
        return []
    typ, drawing = pkg.rels(part).get(rid, ("", ""))
    root = pkg.xml(drawing) if typ == "drawing" else None
    if root is None:
        return []
    rels = pkg.rels(drawing)
    out: list[Block] = []
    for anchor in root:
        pic = anchor.find(f"{{{XDR}}}pic")
        if pic is None:
            continue
        row, col = _cell_of(anchor.find(f"{{{XDR}}}from"))
        row2, col2 = _cell_of(anchor.find(f"{{{XDR}}}to"))  # a two-cell anchor's far corner
        blip = pic.find(f".//{{{A_NS}}}blip")
        target = rels.get(blip.get(f"{{{R_NS}}}embed") or "", ("", ""))[1] if blip is not None else ""
        ext = posixpath.splitext(target)[1].lstrip(".").lower()
        size = pic.find(f".//{{{A_NS}}}xfrm/{{{A_NS}}}ext")
        w = h = None
        if size is not None:
            w = _px(size.get("cx"))
            h = _px(size.get("cy"))
        out.append(Image(type="jpeg" if ext == "jpg" else ext, width=w, height=h, sheet=title, row=row, col=col,
                         row2=row2, col2=col2))
    return out


_DRAWING_REF = re.compile(rb'<(?:\w+:)?drawing\b[^>]*?\b(?:\w+:)?id="([^"]+)"')


def sheet_pictures(path: str) -> dict[str, list[Block]]:
    """Pictures by sheet title, read from the drawing parts (openpyxl loads none without Pillow), for the
    openpyxl path; the same Image blocks the stream gives."""
    pkg = Package(path)
    try:
        out: dict[str, list[Block]] = {}
        for title, _, part in _workbook(pkg)[0]:
            if part is None or part not in pkg.names:
                continue
            m = _DRAWING_REF.search(pkg.read(part) or b"")
            if m is None:
                continue
            view = _SheetView(title)
            view.drawing = m.group(1).decode()
            out[title] = _images(pkg, part, view, title)
        return out
    finally:
        pkg.close()


def _cell_of(marker) -> tuple[int | None, int | None]:
    """(row, col) of an anchor's from/to marker."""
    if marker is None:
        return None, None
    try:
        return int(marker.findtext(f"{{{XDR}}}row")), int(marker.findtext(f"{{{XDR}}}col"))
    except (TypeError, ValueError):
        return None, None


def _px(emu: str | None) -> int | None:
    try:
        return round(int(emu) / 9525) or None
    except (TypeError, ValueError):
        return None

