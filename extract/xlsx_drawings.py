"""Pictures anchored on worksheets, read from the drawing parts: for the streaming reader, and for the openpyxl
path (openpyxl loads none without Pillow), so both give the same Image blocks.
"""

from __future__ import annotations

import posixpath
import re

from tender_pool.extract.blocks import Block, Image
from tender_pool.extract.ooxml import Package
from tender_pool.extract.xlsx_parts import R_NS, workbook

XDR = "http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing"
A_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"


def images(pkg: Package, part: str, rid: str | None, title: str) -> list[Block]:
    """Pictures anchored on the sheet whose <drawing> has relationship id ``rid`` (type from the image part's
    extension, anchor cell, size in pixels)."""
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
        for title, _, part in workbook(pkg)[0]:
            if part is None or part not in pkg.names:
                continue
            m = _DRAWING_REF.search(pkg.read(part) or b"")
            if m is None:
                continue
            out[title] = images(pkg, part, m.group(1).decode(), title)
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
