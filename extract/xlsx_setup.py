"""Page setup and header/footer text of a worksheet, as the page estimate and the Markdown need them.

Shared by both .xlsx paths: ``xlsx`` hands it an openpyxl Worksheet, ``xlsx_stream`` a ``xlsx_view.SheetView`` with
the same attributes, so the page estimate sees one decoding of margins, widths, heights, breaks and areas.
"""

from __future__ import annotations

from tender_pool.extract.blocks import PageSetup


def hf_text(hf) -> str:
    """The left, centre and right parts of an openpyxl header or footer, page fields as placeholders."""
    parts = []
    for part in ("left", "center", "right"):
        sub = getattr(hf, part, None)
        if sub is not None and sub.text:
            parts.append(sub.text)
    text = "  ".join(parts)
    return text.replace("&P", "{PAGE}").replace("&N", "{NUMPAGES}").replace("&&", "&")


def _int(v, default: int) -> int:
    try:
        return int(v) if v is not None else default
    except (TypeError, ValueError):
        return default


def _default_font(ws) -> tuple[str, float]:
    """(name, points) of the workbook's first font: the stream's SheetView carries it, openpyxl's workbook has it."""
    font = getattr(ws, "default_font", None)
    if font is None:
        try:
            f = ws.parent._fonts[0]
            font = (f.name or "", float(f.sz or 0.0))
        except (AttributeError, IndexError, TypeError, ValueError):
            font = None
    return font or ("", 0.0)


def page_setup(ws) -> PageSetup | None:
    """The sheet's print settings (pages.py paginates by them); None when openpyxl cannot read them."""
    from openpyxl.utils.cell import column_index_from_string, range_boundaries

    try:
        ps = ws.page_setup
        props = ws.sheet_properties.pageSetUpPr
        m = ws.page_margins
        areas = []
        for part in (ws.print_area or "").split(",") if isinstance(ws.print_area, str) else (ws.print_area or []):
            ref = part.rsplit("!", 1)[-1].replace("$", "").strip()
            try:
                c1, r1, c2, r2 = range_boundaries(ref)
            except (ValueError, TypeError):
                continue
            if None not in (c1, r1, c2, r2):
                areas.append([r1 - 1, c1 - 1, r2 - 1, c2 - 1])
        repeat = 0
        if ws.print_title_rows:
            a, _, b = str(ws.print_title_rows).replace("$", "").partition(":")
            repeat = _int(b or a, 0) - _int(a, 1) + 1
        fmt = ws.sheet_format
        default_width = float(fmt.baseColWidth or 8)  # characters; defaultColWidth (with padding) is the standard
        standard_width = float(fmt.defaultColWidth or 0.0)
        font = _default_font(ws)
        widths: list[float] = []
        for key, dim in ws.column_dimensions.items():
            try:
                lo = dim.min or column_index_from_string(key)
                hi = dim.max or lo
            except ValueError:
                continue
            if hi > 16384 or lo < 1:
                continue
            w = 0.0 if dim.hidden else float(dim.width or default_width)
            if hi > len(widths):
                widths.extend([default_width] * (min(hi, ws.max_column) - len(widths)))
            for c in range(lo, min(hi, len(widths)) + 1):
                widths[c - 1] = w
        default_height = float(fmt.defaultRowHeight or 15.0)
        # a height the application fits again that is the default anyway says nothing to the estimate (LibreOffice
        # stores one on every row): left out, 12k fewer entries for a 12k-row sheet
        heights = [[r - 1, 0.0 if d.hidden else float(d.ht)] + ([] if d.hidden or d.customHeight else [0])
                   for r, d in ws.row_dimensions.items()
                   if d.hidden or d.ht is not None and (d.customHeight or float(d.ht) != default_height)]
        return PageSetup(
            paper=_int(ps.paperSize, 0), landscape=ps.orientation == "landscape", scale=_int(ps.scale, 100),
            fit=bool(props is not None and props.fitToPage), fit_width=_int(ps.fitToWidth, 1),
            fit_height=_int(ps.fitToHeight, 1),
            margins=[float(m.left), float(m.right), float(m.top), float(m.bottom)] if m is not None else [],
            areas=areas, repeat_rows=max(0, repeat), default_width=default_width,
            default_height=default_height, widths=widths, heights=heights,
            row_breaks=[b.id for b in ws.row_breaks.brk], col_breaks=[b.id for b in ws.col_breaks.brk],
            standard_width=standard_width, font=font[0], font_pt=font[1],
        )
    except (AttributeError, TypeError, ValueError):
        return None
