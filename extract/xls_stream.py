"""The fast .xls path for large workbooks: the BIFF8 record stream read once, in file order, in this process.

Why not POI for these: a 12k-row workbook costs the warm JVM ~0.6 s to build its HSSFWorkbook and format
every number through DataFormatter, and ~0.05 s more to ship and decode the JSON; one pass over the
records here reads the same cells, formats, merges, widths, heights and page setup in a fraction of that
(bench/bench_extract.py --large has both rows). What POI's usermodel adds that this pass does not model —
chart or macro sheets, encryption, BIFF5 and older — makes ``read_stream``
return None, and the caller uses the JVM as before; so do files below ``MIN_STREAM`` bytes, where the
JVM's answer costs milliseconds anyway.

Owns the POI-compatible reading of (strings in ``xls_strings``, drawings in ``officeart``): SST (strings
split across CONTINUE records), XF/FORMAT (number formats, wrap), cell records (LABELSST, LABEL, NUMBER, RK,
MULRK, FORMULA with its cached result and STRING, BOOLERR), MERGEDCELLS, ROW/COLINFO/DEFCOLWIDTH/STANDARDWIDTH/
DEFAULTROWHEIGHT, the first FONT (the default font), SETUP, margins, WSBOOL's fit-to-page, page breaks,
HEADER/FOOTER, the built-in names Print_Area and Print_Titles, and pictures (the OfficeArt shapes of
MSODRAWING with a blip index, typed by the drawing group's blip store). The blocks
are the ones XlsReader.java emits (tests/extract/test_xls_stream.py compares both on the corpus).
Hazards: the stream is untrusted — every read is bounds-checked by ``struct`` (errors end in None, never a
crash), record lengths are the stream's own, and nothing is allocated from a count the file states.
"""

from __future__ import annotations

import datetime as dt
import struct

from tender_pool.extract.blocks import Block, Image, Merge, Meta, PageSetup, Sheet, SheetCell
from tender_pool.extract.numfmt import formatter, is_date_format
from tender_pool.extract.officeart import blip_types, shapes
from tender_pool.extract.xls_strings import clean_cell, header_footer, shared_strings, xl_string

MIN_STREAM = 0  # every plain BIFF8 workbook the pass models (tests compare it with POI on the corpus)

_HDR = struct.Struct("<HH").unpack_from
_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_D = struct.Struct("<d").unpack_from
_RC_XF = struct.Struct("<HHH").unpack_from
_CELL_SST = struct.Struct("<HHHI").unpack_from
_NUMBER = struct.Struct("<HHHd").unpack_from
_RK = struct.Struct("<HHHi").unpack_from
_XF_RK = struct.Struct("<Hi").unpack_from
_ROW = struct.Struct("<HHHHHHH").unpack_from
_DOUBLE_FROM_HI = struct.Struct("<d").unpack
_Q = struct.Struct("<Q").pack

# record types
BOF, EOF, CONTINUE, FILEPASS, SST, FORMAT, XF, BOUNDSHEET, DATEMODE, NAME = (
    0x809, 0x0A, 0x3C, 0x2F, 0xFC, 0x41E, 0xE0, 0x85, 0x22, 0x18)
LABELSST, LABEL, NUMBER, RK, MULRK, FORMULA, STRING, BOOLERR = 0xFD, 0x204, 0x203, 0x27E, 0xBD, 0x06, 0x207, 0x205
ROW, COLINFO, DEFCOLWIDTH, DEFAULTROWHEIGHT, MERGEDCELLS = 0x208, 0x7D, 0x55, 0x225, 0xE5
FONT, STANDARDWIDTH = 0x31, 0x99
SETUP, LEFTM, RIGHTM, TOPM, BOTTOMM, WSBOOL, HBREAKS, VBREAKS, HEADER, FOOTER = (
    0xA1, 0x26, 0x27, 0x28, 0x29, 0x81, 0x1B, 0x1A, 0x14, 0x15)
MSODRAWINGGROUP, MSODRAWING = 0xEB, 0xEC
# OfficeArt (Escher): blip store entries, shape containers, their properties (pib = picture index) and anchors
_BSE, _SP_CONTAINER, _FOPT, _CLIENT_ANCHOR, _CLIENT_DATA, _PIB = 0xF007, 0xF004, 0xF00B, 0xF010, 0xF011, 0x104
TXO = 0x1B6
OBJ, OT_PICTURE = 0x5D, 8  # each shape with client data has an OBJ record; ot 8 is what POI calls a picture
_BLIP_EXT = {0xF01A: "emf", 0xF01B: "wmf", 0xF01C: "pict", 0xF01D: "jpeg", 0xF01E: "png", 0xF01F: "dib"}
_BT_EXT = {2: "emf", 3: "wmf", 4: "pict", 5: "jpeg", 6: "png", 7: "dib"}  # FBSE.btWin32 without an inline blip

_ERRORS = {0x00: "#NULL!", 0x07: "#DIV/0!", 0x0F: "#VALUE!", 0x17: "#REF!", 0x1D: "#NAME?", 0x24: "#NUM!",
           0x2A: "#N/A"}
# Excel's built-in number formats (ids a BIFF file need not store), as POI's BuiltinFormats names them
_BUILTIN = {0: "General", 1: "0", 2: "0.00", 3: "#,##0", 4: "#,##0.00", 5: '"$"#,##0_);("$"#,##0)',
            6: '"$"#,##0_);[Red]("$"#,##0)', 7: '"$"#,##0.00_);("$"#,##0.00)',
            8: '"$"#,##0.00_);[Red]("$"#,##0.00)', 9: "0%", 10: "0.00%", 11: "0.00E+00", 12: "# ?/?",
            13: "# ??/??", 14: "m/d/yy", 15: "d-mmm-yy", 16: "d-mmm", 17: "mmm-yy", 18: "h:mm AM/PM",
            19: "h:mm:ss AM/PM", 20: "h:mm", 21: "h:mm:ss", 22: "m/d/yy h:mm", 37: "#,##0_);(#,##0)",
            38: "#,##0_);[Red](#,##0)", 39: "#,##0.00_);(#,##0.00)", 40: "#,##0.00_);[Red](#,##0.00)",
            41: '_(* #,##0_);_(* (#,##0);_(* "-"_);_(@_)', 42: '_("$"* #,##0_);_("$"* (#,##0);_("$"* "-"_);_(@_)',
            43: '_(* #,##0.00_);_(* (#,##0.00);_(* "-"??_);_(@_)',
            44: '_("$"* #,##0.00_);_("$"* (#,##0.00);_("$"* "-"??_);_(@_)', 45: "mm:ss", 46: "[h]:mm:ss",
            47: "mm:ss.0", 48: "##0.0E+0", 49: "@"}
_BUILTIN_DATES = {14, 15, 16, 17, 18, 19, 20, 21, 22, 45, 46, 47}


class _Unmodelled(Exception):
    """Something this pass leaves to POI: the caller falls back to the JVM."""


def read_stream(path: str, *, min_bytes: int = MIN_STREAM) -> list[Block] | None:
    """Blocks of a BIFF8 .xls, or None when the JVM should read it (small, drawings, encrypted, unusual)."""
    import olefile

    try:
        with olefile.OleFileIO(path) as ole:
            if not ole.exists("Workbook"):
                return None
            if ole.get_size("Workbook") < min_bytes:
                return None
            data = ole.openstream("Workbook").read()
            meta = _meta(ole)
    except (OSError, ValueError, IndexError, struct.error, TypeError, AttributeError):
        return None
    try:
        blocks = _Book(data).blocks(meta)
        # neither a value nor a picture anywhere: POI tells an empty workbook from a damaged one (fuzzed files
        # read as empty here); a sheet of pictures alone is content
        return blocks if any(isinstance(b, Image) or isinstance(b, Sheet) and b.cells for b in blocks) else None
    except (_Unmodelled, struct.error, IndexError, KeyError, ValueError, UnicodeDecodeError, OverflowError):
        return None


def _meta(ole) -> Meta:
    """The stored page count, as XlsReader reads it from SummaryInformation (it reports no title or author)."""
    try:
        pages = ole.get_metadata().num_pages
    except Exception:  # noqa: BLE001 - a damaged property set costs the count, never the workbook
        pages = None
    return Meta(format="xls", engine="xls-stream", pages=pages if isinstance(pages, int) and pages > 0 else None)


class _Book:
    def __init__(self, data: bytes):
        self.data = data
        self.sst: list[str] = []
        self.formats: dict[int, str] = {}
        self.xf_fmt: list[int] = []
        self.xf_wrap: list[bool] = []
        self.font: tuple[str, float] | None = None  # the first FONT record: the workbook's default font
        self.sheets: list[tuple[str, int, bool]] = []  # name, BOF offset, hidden
        self.date1904 = False
        self.blips: list[str] = []  # file extension per blip store entry (pib - 1)
        self.names: dict[tuple[int, int], list[list[int]]] = {}  # (sheet index, builtin code) -> areas

    # ------------------------------------------------------------ globals

    def blocks(self, meta: Meta) -> list[Block]:
        data = self.data
        typ, ln = _HDR(data, 0)
        if typ != BOF or _U16(data, 4)[0] != 0x600 or _U16(data, 6)[0] != 0x5:
            raise _Unmodelled("not a BIFF8 workbook globals substream")
        pos = 4 + ln
        n = len(data)
        while pos + 4 <= n:
            typ, ln = _HDR(data, pos)
            body = pos + 4
            pos = body + ln
            if typ == EOF:
                break
            if typ == FILEPASS:
                raise _Unmodelled("encrypted")
            if typ == SST:
                segs = [data[body + 8: body + ln]]
                while pos + 4 <= n and _HDR(data, pos)[0] == CONTINUE:
                    cl = _HDR(data, pos)[1]
                    segs.append(data[pos + 4: pos + 4 + cl])
                    pos += 4 + cl
                self.sst = shared_strings(segs, _U32(data, body + 4)[0])
            elif typ == FONT and self.font is None and ln >= 16:
                cch, flags = data[body + 14], data[body + 15]
                raw = data[body + 16: body + 16 + (cch * 2 if flags & 1 else cch)]
                self.font = (raw.decode("utf-16-le" if flags & 1 else "latin-1", "replace"), _U16(data, body)[0] / 20.0)
            elif typ == XF:
                ifmt = _U16(data, body + 2)[0]
                self.xf_fmt.append(ifmt)
                self.xf_wrap.append(bool(data[body + 6] & 0x08))
            elif typ == FORMAT:
                ifmt = _U16(data, body)[0]
                self.formats[ifmt] = xl_string(data, body + 2, body + ln)[0]
            elif typ == BOUNDSHEET:
                off = _U32(data, body)[0]
                state, kind = data[body + 4] & 3, data[body + 5]
                if kind != 0:
                    raise _Unmodelled("chart, macro or dialog sheet")
                cch, flags = data[body + 6], data[body + 7]
                raw = data[body + 8: body + 8 + (cch * 2 if flags & 1 else cch)]
                name = raw.decode("utf-16-le" if flags & 1 else "latin-1")
                self.sheets.append((name, off, state != 0))
            elif typ == MSODRAWINGGROUP:
                group = [data[body: body + ln]]  # continued by CONTINUE or by further MSODRAWINGGROUP records
                while pos + 4 <= n and _HDR(data, pos)[0] in (CONTINUE, MSODRAWINGGROUP):
                    cl = _HDR(data, pos)[1]
                    group.append(data[pos + 4: pos + 4 + cl])
                    pos += 4 + cl
                self.blips = blip_types(b"".join(group))
            elif typ == DATEMODE:
                self.date1904 = bool(_U16(data, body)[0])
            elif typ == NAME:
                self._name(body, ln)
        self._plans()
        out: list[Block] = [meta]
        for index, (name, off, hidden) in enumerate(self.sheets):
            sheet, (drawing, objects) = self._sheet(index, name, off, hidden)
            out.append(sheet)
            if OT_PICTURE in objects:
                found = shapes(b"".join(drawing))
                if len(found) != len(objects):
                    raise _Unmodelled("drawing shapes and OBJ records do not pair up")
                out += [Image(type=self.blips[pib - 1] if 0 < pib <= len(self.blips) else "", sheet=name, row=row,
                              col=col, row2=row2, col2=col2)
                        for (pib, row, col, row2, col2), ot in zip(found, objects) if ot == OT_PICTURE]
        return out

    def _name(self, body: int, ln: int) -> None:
        """Built-in Print_Area (6) and Print_Titles (7): their Area3d/Ref3d operands, per sheet (itab)."""
        data = self.data
        grbit, cch, cce, itab = _U16(data, body)[0], data[body + 3], _U16(data, body + 4)[0], _U16(data, body + 8)[0]
        if not grbit & 0x20 or itab == 0:
            return
        p = body + 14
        high = data[p] & 1
        code = data[p + 1]
        if code not in (6, 7):
            return
        p += 1 + cch * (2 if high else 1)
        end = min(p + cce, body + ln)
        areas: list[list[int]] = []
        while p < end:
            ptg = data[p]
            if ptg in (0x3B, 0x5B, 0x7B):  # ptgArea3d: ixti, rwFirst, rwLast, colFirst, colLast
                r1, r2, c1, c2 = struct.unpack_from("<HHHH", data, p + 3)
                areas.append([r1, c1 & 0x3FFF, r2, c2 & 0x3FFF])
                p += 11
            elif ptg in (0x3A, 0x5A, 0x7A):  # ptgRef3d: ixti, rw, col
                r, c = struct.unpack_from("<HH", data, p + 3)
                areas.append([r, c & 0x3FFF, r, c & 0x3FFF])
                p += 7
            elif ptg in (0x29, 0x49, 0x69):  # ptgMemFunc: the list that follows
                p += 3
            elif ptg == 0x10:  # ptgUnion
                p += 1
            else:
                break
        self.names[(itab - 1, code)] = areas

    def _plans(self) -> None:
        """Per XF: how a number in it is displayed, and whether it is a date (XlsReader.number's rules)."""
        self.xf_show: list = []
        self.xf_date: list[str] = []  # the cell type a number in this XF gets: "date" or "number"
        cache: dict[int, tuple] = {}
        for ifmt in self.xf_fmt:
            plan = cache.get(ifmt)
            if plan is None:
                code = self.formats.get(ifmt) or _BUILTIN.get(ifmt, "General")
                if ifmt == 14:
                    code = "m/d/yyyy"  # the locale's short date: LibreOffice shows a four-digit year
                elif ifmt == 22:
                    code = "m/d/yyyy h:mm"
                is_date = ifmt in _BUILTIN_DATES or (ifmt not in _BUILTIN and is_date_format(code))
                plan = cache[ifmt] = (_date_formatter(code, self.date1904) if is_date else formatter(code), is_date)
            self.xf_show.append(plan[0])
            self.xf_date.append("date" if plan[1] else "number")

    # ------------------------------------------------------------ one sheet

    def _sheet(self, index: int, name: str, off: int, hidden: bool) -> tuple[Sheet, tuple[list[bytes], list[int]]]:
        data = self.data
        n = len(data)
        typ, ln = _HDR(data, off)
        if typ != BOF or _U16(data, off + 6)[0] != 0x10:
            raise _Unmodelled("sheet substream is not a worksheet")
        pos = off + 4 + ln
        sst, xf_show, xf_date, xf_wrap = self.sst, self.xf_show, self.xf_date, self.xf_wrap
        nxf = len(xf_show)
        cells: list[SheetCell] = []
        append = cells.append
        merges: list[Merge] = []
        max_col = -1
        rows: list[tuple[int, int, int]] = []  # row, miyRw, grbit
        cols: list[tuple[int, int, int, int]] = []  # first, last, width, hidden
        setup: dict = {}
        margins = [0.75, 0.75, 1.0, 1.0]
        defcol, defrow = 8, 0xFF
        stdwidth = 0
        row_breaks: list[int] = []
        col_breaks: list[int] = []
        header = footer = ""
        fit = False
        pending: tuple[int, int] | None = None  # a string formula waiting for its STRING record
        drawing: list[bytes] = []  # the sheet's OfficeArt stream, in pieces between OBJ/TXO records
        objects: list[int] = []  # ftCmo.ot of each OBJ record, in order: one per shape with client data
        typ = txo_text = txo_runs = 0
        while pos + 4 <= n:
            if typ != CONTINUE:
                last = typ
            typ, ln = _HDR(data, pos)
            body = pos + 4
            pos = body + ln
            if typ == LABELSST:
                r, c, xf, isst = _CELL_SST(data, body)
                text = sst[isst]
                if text:
                    append(SheetCell(r, c, text, "string", xf < nxf and xf_wrap[xf]))
                    if c > max_col:
                        max_col = c
            elif typ == RK:
                r, c, xf, rk = _RK(data, body)
                v = (rk >> 2) if rk & 2 else _DOUBLE_FROM_HI(_Q((rk & -4 & 0xFFFFFFFF) << 32))[0]
                if rk & 1:
                    v /= 100
                append(SheetCell(r, c, xf_show[xf](v), xf_date[xf]) if xf < nxf else _number(r, c, v))
                if c > max_col:
                    max_col = c
            elif typ == NUMBER:
                r, c, xf, v = _NUMBER(data, body)
                append(SheetCell(r, c, xf_show[xf](v), xf_date[xf]) if xf < nxf else _number(r, c, v))
                if c > max_col:
                    max_col = c
            elif typ == MULRK:
                r, c = _U16(data, body)[0], _U16(data, body + 2)[0]
                p, end = body + 4, body + ln - 2
                while p + 6 <= end:
                    xf, rk = _XF_RK(data, p)
                    v = (rk >> 2) if rk & 2 else _DOUBLE_FROM_HI(_Q((rk & -4 & 0xFFFFFFFF) << 32))[0]
                    if rk & 1:
                        v /= 100
                    append(SheetCell(r, c, xf_show[xf](v), xf_date[xf]) if xf < nxf else _number(r, c, v))
                    if c > max_col:
                        max_col = c
                    c += 1
                    p += 6
            elif typ == ROW:
                r, _, _, miy, _, _, grbit = _ROW(data, body)
                rows.append((r, miy, grbit))
            elif typ == FORMULA:
                r, c, xf = _RC_XF(data, body)
                if _U16(data, body + 12)[0] == 0xFFFF:
                    kind, val = data[body + 6], data[body + 8]
                    if kind == 0:
                        pending = (r, c)
                        continue
                    if kind == 1:
                        text = "TRUE" if val else "FALSE"
                    elif kind == 2:
                        text = _ERRORS.get(val, "#ERR")
                    else:
                        continue
                else:
                    v = _D(data, body + 6)[0]
                    text = _show(v, xf, xf_show, nxf)
                if text.strip():
                    append(SheetCell(r, c, text, "formula"))
                    if c > max_col:
                        max_col = c
            elif typ == STRING and pending is not None:
                text = clean_cell(xl_string(data, body, body + ln)[0])
                if text.strip():
                    append(SheetCell(pending[0], pending[1], text, "formula"))
                    if pending[1] > max_col:
                        max_col = pending[1]
                pending = None
            elif typ == LABEL:
                r, c, xf = _RC_XF(data, body)
                text = clean_cell(xl_string(data, body + 6, body + ln)[0])
                if text.strip():
                    append(SheetCell(r, c, text, "string", xf < nxf and xf_wrap[xf]))
                    if c > max_col:
                        max_col = c
            elif typ == BOOLERR:
                r, c, xf = _RC_XF(data, body)
                val, is_err = data[body + 6], data[body + 7]
                if is_err:
                    append(SheetCell(r, c, _ERRORS.get(val, "#ERR"), "error"))
                else:
                    append(SheetCell(r, c, "TRUE" if val else "FALSE", "bool"))
                if c > max_col:
                    max_col = c
            elif typ == EOF:
                break
            elif typ == MSODRAWING:
                drawing.append(data[body: body + ln])
            elif typ == TXO:  # its text and formatting runs follow in CONTINUE records; then the drawing may
                txo_text, txo_runs = _U16(data, body + 10)[0], _U16(data, body + 12)[0]
            elif typ == CONTINUE and last in (MSODRAWING, TXO, OBJ):  # writers continue drawings so too
                if last == TXO and txo_text > 0:
                    txo_text -= (ln - 1) // (2 if data[body] & 1 else 1)
                elif last == TXO and txo_runs > 0:
                    txo_runs -= ln
                else:  # the drawing's OfficeArt stream goes on in a CONTINUE record
                    drawing.append(data[body: body + ln])
            elif typ == OBJ:
                objects.append(_U16(data, body + 4)[0] if _U16(data, body)[0] == 0x15 else -1)
            elif typ == MERGEDCELLS:
                for k in range(_U16(data, body)[0]):
                    r1, r2, c1, c2 = struct.unpack_from("<HHHH", data, body + 2 + 8 * k)
                    merges.append(Merge(r1, c1, r2, c2))
            elif typ == COLINFO:
                first, last, width, _, grbit = struct.unpack_from("<HHHHH", data, body)
                cols.append((first, last, width, grbit & 1))
            elif typ == DEFCOLWIDTH:
                defcol = _U16(data, body)[0]
            elif typ == STANDARDWIDTH:
                stdwidth = _U16(data, body)[0]
            elif typ == DEFAULTROWHEIGHT:
                defrow = _U16(data, body + 2)[0]
            elif typ == SETUP:
                paper, scale, _, fw, fh, grbit = struct.unpack_from("<HHHHHH", data, body)
                setup = {"paper": paper, "scale": scale, "fit_width": fw, "fit_height": fh, "grbit": grbit}
            elif LEFTM <= typ <= BOTTOMM:
                margins[typ - LEFTM] = _D(data, body)[0]
            elif typ == WSBOOL:
                fit = bool(_U16(data, body)[0] & 0x100)  # fFitToPage
            elif typ in (HBREAKS, VBREAKS):
                got = [_U16(data, body + 2 + 6 * k)[0] for k in range(_U16(data, body)[0])]
                (row_breaks if typ == HBREAKS else col_breaks).extend(got)
            elif typ in (HEADER, FOOTER) and ln:
                text = header_footer(xl_string(data, body, body + ln)[0], name)
                if typ == HEADER:
                    header = text
                else:
                    footer = text
        ps = self._setup(index, setup, margins, fit, defcol, defrow, cols, rows, max_col, row_breaks, col_breaks,
                         stdwidth)
        return Sheet(name=name, cells=cells, merges=merges, hidden=hidden, header=header, footer=footer,
                     setup=ps), (drawing, objects)

    def _setup(self, index, setup, margins, fit, defcol, defrow, cols, rows, max_col, row_breaks,
               col_breaks, stdwidth) -> PageSetup:
        """XlsReader.setup's fields from the records (POI's defaults where a record is missing)."""
        grbit = setup.get("grbit", 2)
        width = {}
        for first, last, w, hid in cols:
            for c in range(first, min(last, 255) + 1):
                width[c] = 0.0 if hid else w / 256.0
        widths = [width.get(c, float(defcol)) for c in range(min(max_col, 255) + 1)]
        heights: list[list[float]] = []
        for r, miy, grbit_row in rows:
            h = 0 if grbit_row & 0x20 else (defrow if miy & 0x8000 else miy & 0x7FFF)
            manual = h == 0 or bool(grbit_row & 0x40)  # fDyZero, fUnsynced
            if h == defrow and not manual:
                continue
            heights.append([r, h / 20.0] if manual else [r, h / 20.0, 0])
        areas = self.names.get((index, 6), [])
        repeat = 0
        for r1, c1, r2, c2 in self.names.get((index, 7), []):
            if c1 == 0 and c2 == 255:  # POI's getRepeatingRows: the first area spanning every column
                repeat = r2 - r1 + 1
                break
        return PageSetup(
            paper=setup.get("paper", 1), valid=not grbit & 0x4, landscape=not grbit & 0x2,
            scale=setup.get("scale", 100), fit=fit, fit_width=setup.get("fit_width", 1),
            fit_height=setup.get("fit_height", 1), margins=margins, areas=areas, repeat_rows=repeat,
            default_width=float(defcol), default_height=defrow / 20.0, widths=widths, heights=heights,
            row_breaks=row_breaks, col_breaks=col_breaks, standard_width=stdwidth / 256.0,
            font=self.font[0] if self.font else "", font_pt=self.font[1] if self.font else 0.0)


def _number(r: int, c: int, v) -> SheetCell:
    """A number whose XF index is out of range (damaged file): General, as POI falls back to."""
    from tender_pool.extract.numfmt import general

    return SheetCell(r, c, general(v), "number")


def _show(v, xf: int, show, nxf: int) -> str:
    if xf < nxf:
        return show[xf](v)
    from tender_pool.extract.numfmt import general

    return general(v)


def _date_formatter(code: str, date1904: bool):
    from tender_pool.extract.numfmt import format_value

    base = dt.datetime(1904, 1, 1) if date1904 else dt.datetime(1899, 12, 30)

    def show(v) -> str:
        if not date1904 and v < 61:
            v = v + 1 if v < 60 else v  # Excel's phantom 1900-02-29
        try:  # to the nearest second, as POI's DataFormatter rounds (08:04:59.997 shows 08:05)
            return format_value(base + dt.timedelta(seconds=round(v * 86400)), code, is_date=True)
        except (OverflowError, ValueError):
            return format_value(v, "General")
    return show


