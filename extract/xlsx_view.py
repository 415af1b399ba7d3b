"""The stand-in for an openpyxl Worksheet that the streaming reader fills: what ``xlsx_setup.page_setup`` and
the header/footer read (page setup, margins, sheet format, header/footer, dimensions, breaks, print titles and
areas), decoded by openpyxl's own small element classes so the page estimate sees exactly what the openpyxl
path gives it.
"""

from __future__ import annotations


class SheetView:
    """The attributes of an openpyxl Worksheet that ``xlsx_setup.page_setup`` and the header/footer read."""

    def __init__(self, title: str):
        from openpyxl.worksheet.header_footer import HeaderFooter
        from openpyxl.worksheet.page import PageMargins, PrintPageSetup
        from openpyxl.worksheet.dimensions import SheetFormatProperties

        self.title = title
        self.default_font: tuple[str, float] | None = None
        self.page_setup = PrintPageSetup()
        self.sheet_properties = FitToPage(None)
        self.page_margins = PageMargins()
        self.sheet_format = SheetFormatProperties()
        self.HeaderFooter = HeaderFooter()
        self.print_area: str | None = None
        self.print_title_rows: str | None = None
        self.column_dimensions: dict = {}
        self.row_dimensions: dict = {}
        self.max_column = 1
        self.row_breaks = Breaks()
        self.col_breaks = Breaks()
        self.drawing: str | None = None  # the relationship id of the sheet's <drawing>, if any

    @property
    def oddHeader(self):
        return self.HeaderFooter.oddHeader

    @property
    def oddFooter(self):
        return self.HeaderFooter.oddFooter


class Breaks:
    def __init__(self, ids=()):
        self.brk = [Brk(i) for i in ids]


class Brk:
    def __init__(self, i: int):
        self.id = i


class Dim:
    """A column's or row's dimensions. Unlike openpyxl (whose ``customHeight`` is "any height stored"), a row
    keeps the file's own customHeight flag: a stored height without it is one the application fits to the
    content again (LibreOffice regrows wrapped rows), as the .xls reader reports from ROW's fUnsynced."""

    __slots__ = ("min", "max", "width", "hidden", "ht", "customHeight")

    def __init__(self, min=None, max=None, width=None, hidden=False, ht=None, custom=False):
        self.min, self.max, self.width, self.hidden, self.ht = min, max, width, hidden, ht
        self.customHeight = custom


class FitToPage:
    """Stands in for openpyxl's sheet properties (``.pageSetUpPr``) and page setup properties (``.fitToPage``)."""

    def __init__(self, value):
        self.fitToPage = self.pageSetUpPr = value


def print_names(view: SheetView, names: dict[str, str]) -> None:
    """The sheet's print area and print titles from its ``_xlnm.`` defined names, as openpyxl reads them."""
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
