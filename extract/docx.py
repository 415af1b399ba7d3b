"""Word 2007+ (.docx) reader working on the XML directly.

Why not python-docx: it hides nested tables inside cells, footnotes/endnotes and text boxes, and
gives no vMerge/gridSpan model; the raw WordprocessingML carries all of that in a few element types.
"""

from __future__ import annotations

import re


from tender_pool.extract.blocks import Block, Cell, Image, Meta, Para, Section, Table, TableBlock
from tender_pool.extract.ooxml import Package

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
A_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"
WP_NS = "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
V_NS = "urn:schemas-microsoft-com:vml"


def _page_breaks(root) -> int:
    """Hard page breaks, page-break-before paragraphs and section breaks that start a new page."""
    n = sum(1 for br in root.iter(w("br")) if br.get(w("type")) == "page")
    n += sum(1 for pb in root.iter(w("pageBreakBefore")) if pb.get(w("val"), "true") not in ("0", "false", "off"))
    for sect in root.iter(w("sectPr")):
        if sect.getparent() is not None and sect.getparent().tag == w("pPr"):
            kind = sect.find(w("type"))
            if kind is None or kind.get(w("val")) not in ("continuous",):
                n += 1
    return n


def w(tag: str) -> str:
    return f"{{{W}}}{tag}"


P, TBL, TR, TC, R, T, SDT, SDTCONTENT = (w(x) for x in ("p", "tbl", "tr", "tc", "r", "t", "sdt", "sdtContent"))
HEADING_RE = re.compile(r"^(heading|标题)\s*(\d)$", re.I)


def _val(el, tag: str) -> str | None:
    if el is None:
        return None
    child = el.find(w(tag))
    return None if child is None else child.get(w("val"))


# ---------------------------------------------------------------- numbering


def _roman(n: int) -> str:
    vals = [(1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"), (40, "xl"),
            (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")]
    out = ""
    for v, s in vals:
        while n >= v:
            out += s
            n -= v
    return out


_CN = "〇一二三四五六七八九"


def _chinese(n: int) -> str:
    if n < 10:
        return _CN[n]
    if n < 20:
        return "十" + (_CN[n % 10] if n % 10 else "")
    if n < 100:
        return _CN[n // 10] + "十" + (_CN[n % 10] if n % 10 else "")
    return str(n)


def _fmt(n: int, fmt: str) -> str:
    if fmt in ("lowerLetter", "upperLetter"):
        s = ""
        k = n
        while k > 0:
            k, rem = divmod(k - 1, 26)
            s = chr(97 + rem) + s
        return s.upper() if fmt == "upperLetter" else s
    if fmt in ("lowerRoman", "upperRoman"):
        s = _roman(n)
        return s.upper() if fmt == "upperRoman" else s
    if fmt in ("chineseCounting", "chineseCountingThousand", "ideographTraditional", "taiwaneseCounting",
               "japaneseCounting"):
        return _chinese(n)
    if fmt == "decimalZero":
        return f"{n:02d}"
    if fmt == "none":
        return ""
    return str(n)


class Numbering:
    """Enough of numbering.xml to print list markers as Word shows them."""

    def __init__(self, root):
        self.levels: dict[str, dict[int, tuple[str, str, int]]] = {}  # abstractId -> ilvl -> (fmt, text, start)
        self.num_to_abs: dict[str, str] = {}
        self.counters: dict[str, list[int]] = {}
        if root is None:
            return
        for ab in root.iter(w("abstractNum")):
            aid = ab.get(w("abstractNumId"), "")
            lv: dict[int, tuple[str, str, int]] = {}
            for lvl in ab.iter(w("lvl")):
                try:
                    il = int(lvl.get(w("ilvl"), "0"))
                    start = int(_val(lvl, "start") or "1")
                except ValueError:
                    continue
                lv[il] = (_val(lvl, "numFmt") or "decimal", _val(lvl, "lvlText") or "", start)
            self.levels[aid] = lv
        for num in root.iter(w("num")):
            aid = _val(num, "abstractNumId")
            if aid is not None:
                self.num_to_abs[num.get(w("numId"), "")] = aid

    def marker(self, num_id: str, ilvl: int) -> str:
        aid = self.num_to_abs.get(num_id)
        if aid is None or num_id == "0":
            return ""
        levels = self.levels.get(aid, {})
        if ilvl not in levels:
            return "-"
        fmt, text, _ = levels[ilvl]
        if fmt == "bullet":
            return "-"
        counts = self.counters.setdefault(aid, [0] * 10)
        if ilvl >= len(counts):
            return "-"
        counts[ilvl] += 1
        if counts[ilvl] == 1:
            counts[ilvl] = levels[ilvl][2]
        for k in range(ilvl + 1, len(counts)):
            counts[k] = 0

        def sub(m: re.Match) -> str:
            k = int(m.group(1)) - 1
            if k not in levels:
                return ""
            n = counts[k] if counts[k] else levels[k][2]
            return _fmt(n, levels[k][0])

        out = re.sub(r"%(\d)", sub, text).strip()
        return out or "-"


# ---------------------------------------------------------------- reader


class DocxReader:
    def __init__(self, pkg: Package):
        self.pkg = pkg
        self.styles: dict[str, tuple[int, tuple[str, int] | None]] = {}
        self.numbering = Numbering(pkg.xml("word/numbering.xml"))
        self.images = 0
        self.textboxes: list[Block] = []
        self._load_styles()

    def _load_styles(self) -> None:
        root = self.pkg.xml("word/styles.xml")
        if root is None:
            return
        raw: dict[str, tuple[int, tuple[str, int] | None, str | None]] = {}
        for st in root.iter(w("style")):
            sid = st.get(w("styleId"), "")
            name = (_val(st, "name") or sid).strip()
            ppr = st.find(w("pPr"))
            level = 0
            m = HEADING_RE.match(name) or HEADING_RE.match(sid)
            if m:
                level = int(m.group(2))
            elif name.lower() == "title":
                level = 1
            elif name.lower() == "subtitle":
                level = 2
            else:
                ol = _val(ppr, "outlineLvl")
                if ol is not None and ol.isdigit() and int(ol) < 6:
                    level = int(ol) + 1
            num = None
            numpr = ppr.find(w("numPr")) if ppr is not None else None
            if numpr is not None:
                nid = _val(numpr, "numId")
                if nid:
                    num = (nid, int(_val(numpr, "ilvl") or "0"))
            raw[sid] = (level, num, _val(st, "basedOn"))
        for sid, (level, num, based) in raw.items():
            seen = {sid}
            while (not level or num is None) and based and based in raw and based not in seen:
                seen.add(based)
                blevel, bnum, based = raw[based]
                num = num if num is not None else bnum
                if not level and blevel and raw[sid][0] == 0 and _inherit_heading(sid):
                    level = blevel
            self.styles[sid] = (level, num)

    # -- text
    def run_text(self, el, story: str) -> str:
        """Text of a paragraph or run container in document order; text boxes collected aside."""
        parts: list[str] = []
        in_field_code = 0
        for node in el.iter():
            tag = node.tag
            if not isinstance(tag, str):
                continue
            if tag == w("t"):
                if not in_field_code:
                    parts.append(node.text or "")
            elif tag == w("tab"):
                parts.append("\t")
            elif tag in (w("br"), w("cr")):
                parts.append("\n")
            elif tag == w("noBreakHyphen"):
                parts.append("-")
            elif tag == w("fldChar"):
                kind = node.get(w("fldCharType"))
                if kind == "begin":
                    in_field_code += 1
                elif kind in ("separate", "end") and in_field_code:
                    in_field_code -= 1
            elif tag == w("sym"):
                ch = node.get(w("char"), "")
                try:
                    code = int(ch, 16)
                    parts.append(chr(code - 0xF000) if code >= 0xF000 and code - 0xF000 >= 32 else chr(code))
                except ValueError:
                    pass
        return "".join(parts)

    def paragraph(self, p, story: str) -> list[Block]:
        out: list[Block] = []
        # Pull text boxes and drawings out first so their text is not glued into the paragraph.
        for alt in list(p.iter(f"{{{MC}}}Fallback")):
            alt.getparent().remove(alt)
        for txbx in list(p.iter(w("txbxContent"))):
            for child in txbx:
                if child.tag == P:
                    for b in self.paragraph(child, "textbox"):
                        self.textboxes.append(b)
                elif child.tag == TBL:
                    self.textboxes.append(TableBlock(self.table(child, "textbox"), story="textbox"))
            txbx.getparent().remove(txbx)
        for drawing in p.iter(w("drawing"), w("pict")):
            blip = next(drawing.iter(f"{{{A_NS}}}blip"), None)
            vimg = next(drawing.iter(f"{{{V_NS}}}imagedata"), None)
            if blip is None and vimg is None:
                continue
            rid = (blip.get(f"{{{R_NS}}}embed") if blip is not None else vimg.get(f"{{{R_NS}}}id")) or ""
            ext = self._rels.get(rid, ("", ""))[1].rsplit(".", 1)[-1].lower() if rid else ""
            width = height = None
            extent = next(drawing.iter(f"{{{WP_NS}}}extent"), None)
            if extent is not None:
                try:
                    width = int(extent.get("cx", "0")) // 9525 or None
                    height = int(extent.get("cy", "0")) // 9525 or None
                except ValueError:
                    pass
            out.append(Image(type=ext if len(ext) <= 5 else "", width=width, height=height,
                             story=story))  # type: ignore[arg-type]
        text = self.run_text(p, story)
        ppr = p.find(w("pPr"))
        style = _val(ppr, "pStyle") or ""
        level, num = self.styles.get(style, (0, None))
        ol = _val(ppr, "outlineLvl")
        if ol is not None and ol.isdigit() and int(ol) < 6:
            level = int(ol) + 1
        numpr = ppr.find(w("numPr")) if ppr is not None else None
        if numpr is not None:
            nid = _val(numpr, "numId")
            ilvl = _val(numpr, "ilvl")
            if nid is not None:
                num = (nid, int(ilvl or (num[1] if num else 0) or 0) if (ilvl or "0").isdigit() else 0)
        marker = ""
        list_level = 0
        if num is not None and text.strip():
            marker = self.numbering.marker(num[0], num[1])
            list_level = num[1]
        if text.strip():
            if level and marker and marker != "-":
                text = f"{marker} {text}"
                marker = ""
            para = Para(text=text, heading=level if level else 0,
                        list_marker=marker if not level else "", list_level=list_level if marker else 0,
                        story=story)  # type: ignore[arg-type]
            out.insert(0, para)
        return out

    def cell_blocks(self, tc) -> tuple[str, Table | None]:
        texts: list[str] = []
        nested: list[Table] = []
        for child in self._content(tc):
            if child.tag == P:
                for b in self.paragraph(child, "body"):
                    if isinstance(b, Para):
                        texts.append((b.list_marker + " " if b.list_marker and b.list_marker != "-" else "") + b.text)
                    elif isinstance(b, Image):
                        self.images += 1
            elif child.tag == TBL:
                nested.append(self.table(child, "body"))
        table = None
        if nested:
            table = nested[0] if len(nested) == 1 else Table(rows=[r for t in nested for r in t.rows])
        return "\n".join(t for t in texts if t.strip()), table

    def table(self, tbl, story: str) -> Table:
        rows: list[list[Cell]] = []
        for tr in self._content(tbl):
            if tr.tag != TR:
                continue
            cells: list[Cell] = []
            trpr = tr.find(w("trPr"))
            before = _val(trpr, "gridBefore")
            if before and before.isdigit() and int(before) > 0:
                cells.append(Cell(text="", colspan=int(before)))
            for tc in self._content(tr):
                if tc.tag != TC:
                    continue
                tcpr = tc.find(w("tcPr"))
                span = _val(tcpr, "gridSpan")
                vm_el = tcpr.find(w("vMerge")) if tcpr is not None else None
                vmerge = ""
                if vm_el is not None:
                    vmerge = "start" if vm_el.get(w("val")) == "restart" else "cont"
                text, nested = self.cell_blocks(tc)
                cells.append(Cell(text=text, colspan=int(span) if span and span.isdigit() and int(span) > 0 else 1,
                                  vmerge=vmerge, table=nested))  # type: ignore[arg-type]
            rows.append(cells)
        return Table(rows=rows)

    def _content(self, parent):
        """Children, with content controls (sdt), smart tags and custom XML unwrapped."""
        for child in parent:
            tag = child.tag
            if tag == SDT:
                content = child.find(SDTCONTENT)
                if content is not None:
                    yield from self._content(content)
            elif tag in (w("customXml"), w("smartTag")):
                yield from self._content(child)
            elif tag == f"{{{MC}}}AlternateContent":
                choice = child.find(f"{{{MC}}}Choice")
                if choice is not None:
                    yield from self._content(choice)
            else:
                yield child

    def story(self, root, story: str, part: str) -> list[Block]:
        self._rels = {k: v for k, v in self.pkg.rels(part).items()}
        out: list[Block] = []
        body = root.find(w("body")) if root.tag == w("document") else root
        if body is None:
            return out
        for child in self._content(body):
            if child.tag == P:
                out.extend(self.paragraph(child, story))
                ppr = child.find(w("pPr"))
                sect = ppr.find(w("sectPr")) if ppr is not None and story == "body" else None
                if sect is not None:
                    out.append(_section(sect))
            elif child.tag == TBL:
                out.append(TableBlock(self.table(child, story), story=story))  # type: ignore[arg-type]
            elif child.tag == w("sectPr") and story == "body":
                out.append(_section(child))
        return out


def _twips(el, attr: str) -> int:
    if el is None:
        return 0
    try:
        return int(float(el.get(w(attr)) or 0))
    except ValueError:
        return 0


def _section(sect) -> Section:
    """A body section's page geometry (w:pgSz, w:pgMar, w:cols)."""
    sz, mar, cols = sect.find(w("pgSz")), sect.find(w("pgMar")), sect.find(w("cols"))
    width, height = _twips(sz, "w"), _twips(sz, "h")
    if sz is not None and sz.get(w("orient")) == "landscape" and width and height and width < height:
        width, height = height, width
    num = _twips(cols, "num") or 1
    return Section(width=width, height=height, left=_twips(mar, "left"), right=_twips(mar, "right"),
                   top=abs(_twips(mar, "top")), bottom=abs(_twips(mar, "bottom")), columns=max(1, num))


def _inherit_heading(style_id: str) -> bool:
    return bool(HEADING_RE.match(style_id))


def read_docx(path: str) -> list[Block]:
    pkg = Package(path)
    try:
        reader = DocxReader(pkg)
        main = "word/document.xml"
        root = pkg.xml(main)
        if root is None:
            # non-standard main part name: follow the package relationship
            for _, (typ, target) in pkg.rels("").items():
                if typ == "officeDocument":
                    main, root = target, pkg.xml(target)
                    break
        if root is None:
            from tender_pool.extract.errors import ExtractError
            raise ExtractError("corrupt", "the package has no main document part")
        blocks: list[Block] = [Meta(format="docx", engine="docx-xml", pages=pkg.app_pages())]
        rels = pkg.rels(main)
        blocks += reader.story(root, "body", main)
        # headers/footers in the order the section properties reference them
        order: list[str] = []
        for ref in root.iter(w("headerReference"), w("footerReference")):
            rid = ref.get(f"{{{R_NS}}}id", "")
            if rid in rels and rels[rid][1] not in order:
                order.append(rels[rid][1])
        for _, (typ, target) in sorted(rels.items()):
            if typ in ("header", "footer") and target not in order:
                order.append(target)
        for target in order:
            typ = "header" if "header" in target.rsplit("/", 1)[-1] else "footer"
            hroot = pkg.xml(target)
            if hroot is not None:
                blocks += reader.story(hroot, typ, target)
        for typ, tag in (("footnote", "footnote"), ("endnote", "endnote"), ("comment", "comment")):
            target = next((t for _, (ty, t) in rels.items() if ty == tag + "s"), None)
            if target is None:
                continue
            froot = pkg.xml(target)
            if froot is None:
                continue
            for note in froot.iter(w(tag)):
                if note.get(w("type")) in ("separator", "continuationSeparator", "continuationNotice"):
                    continue
                reader._rels = pkg.rels(target)
                for child in reader._content(note):
                    if child.tag == P:
                        blocks += reader.paragraph(child, typ)
                    elif child.tag == TBL:
                        blocks.append(TableBlock(reader.table(child, typ), story=typ))  # type: ignore[arg-type]
        blocks += reader.textboxes
        blocks += [Image() for _ in range(reader.images)]
        blocks[0] = Meta(format="docx", engine="docx-xml", pages=pkg.app_pages(), page_breaks=_page_breaks(root))
        return blocks
    finally:
        pkg.close()
