"""The document model every format reader produces and the Markdown renderer consumes.

Owns: the block Structs, and the wire form of the Java CLI's output (one JSON object per line, tagged
by ``t``). The JVM emits exactly these shapes, so ``decode_line`` is the whole Java→Python boundary.

Why one model: ``.doc`` (HWPF), ``.docx``, RTF and HTML all become paragraphs and tables; ``.xls``,
``.xlsx`` and CSV all become sheets. The renderer and the page estimate then know nothing of formats.

Table geometry: a Word table row is a list of cells that each carry ``left``/``width`` (twips) when the
reader knows them, and ``vmerge`` flags. POI reports a horizontal merge in a LibreOffice-written table as
one wide cell rather than a merge flag, so the grid is rebuilt from edges in ``markdown.py`` rather
than trusted from cell counts. Readers that know spans directly (docx gridSpan, HTML colspan) set
``colspan``/``rowspan`` instead and leave the edges ``None``.
"""

from __future__ import annotations

from typing import Literal, Union

import msgspec

Story = Literal["body", "header", "footer", "footnote", "endnote", "textbox", "comment"]


class Cell(msgspec.Struct, omit_defaults=True):
    text: str = ""
    colspan: int = 1
    rowspan: int = 1
    # "start" opens a vertical merge, "cont" continues the one above (its text is usually empty).
    vmerge: Literal["", "start", "cont"] = ""
    left: int | None = None
    width: int | None = None
    # A table nested inside this cell, rendered after the cell's row (see markdown.py).
    table: "Table | None" = None


class Table(msgspec.Struct, omit_defaults=True):
    rows: list[list[Cell]] = []


class Para(msgspec.Struct, tag_field="t", tag="para", omit_defaults=True):
    text: str
    heading: int = 0  # 1..6, 0 = body text
    list_marker: str = ""  # "1.", "a)", "•" … as the document shows it; "" = not a list item
    list_level: int = 0
    story: Story = "body"


class TableBlock(msgspec.Struct, tag_field="t", tag="table", omit_defaults=True):
    table: Table
    story: Story = "body"


class Image(msgspec.Struct, tag_field="t", tag="image", omit_defaults=True):
    type: str = ""  # png, jpeg, emf, wmf …
    width: int | None = None  # pixels where known
    height: int | None = None
    sheet: str | None = None  # for workbooks: anchor sheet, row, col
    row: int | None = None
    col: int | None = None
    row2: int | None = None  # the anchor's far corner (last row and column it covers), where the reader knows it
    col2: int | None = None
    story: Story = "body"  # a picture in a page header or footer belongs to that story (a logo, a seal)


class SheetCell(msgspec.Struct, omit_defaults=True, gc=False):  # ints and strings only: no cycles to collect
    r: int
    c: int
    v: str  # the value as the spreadsheet displays it (number formats and dates applied)
    type: Literal["string", "number", "date", "bool", "formula", "error", "blank"] = "string"
    wrap: bool = False  # the cell's style wraps text (a spreadsheet grows the row to fit it when printing)


class Merge(msgspec.Struct, array_like=True, gc=False):
    r1: int
    c1: int
    r2: int
    c2: int


class PageSetup(msgspec.Struct, omit_defaults=True):
    """A sheet's print settings as the file stores them: what LibreOffice paginates a sheet by (pages.py).

    Every field is optional; a reader that knows none of them leaves ``Sheet.setup`` None.
    """

    paper: int = 0  # Excel paper-size code (1 Letter, 5 Legal, 8 A3, 9 A4 …); 0 = not stored
    valid: bool = True  # False: the file says paper/scale/orientation were never set (BIFF fNoPls)
    landscape: bool = False
    scale: int = 100  # percent
    fit: bool = False  # fit to fit_width × fit_height pages; 0 in one direction = unconstrained
    fit_width: int = 1
    fit_height: int = 1
    margins: list[float] = []  # inches: left, right, top, bottom
    areas: list[list[int]] = []  # print areas [r1, c1, r2, c2], 0-based inclusive; [] = the used range
    repeat_rows: int = 0  # rows printed again at the top of every page
    default_width: float = 0.0  # default column width in characters (0 = unknown): xls DEFCOLWIDTH, xlsx baseColWidth
    # the default width with its padding, where the file stores it (xls STANDARDWIDTH, xlsx defaultColWidth); 0 = not
    standard_width: float = 0.0
    default_height: float = 0.0  # default row height in points (0 = unknown)
    # width in characters of columns 0, 1, …; 0 = hidden; past the end, or equal to default_width = the default
    widths: list[float] = []
    # [row, points] for rows with a height set by hand (0 = hidden); [row, points, 0] for a stored height the
    # application may fit to the content again once the row is edited (LibreOffice prints it as stored)
    heights: list[list[float]] = []
    row_breaks: list[int] = []  # manual page breaks: a new page starts at each of these rows
    col_breaks: list[int] = []
    # the workbook's default font (xls FONT 0, xlsx styles' first font): its digit width is the unit of the
    # column widths above; "" / 0 = not known
    font: str = ""
    font_pt: float = 0.0


class Sheet(msgspec.Struct, tag_field="t", tag="sheet", omit_defaults=True):
    name: str
    cells: list[SheetCell] = []
    merges: list[Merge] = []
    hidden: bool = False
    header: str = ""
    footer: str = ""
    setup: PageSetup | None = None


class Meta(msgspec.Struct, tag_field="t", tag="meta", omit_defaults=True):
    """Document properties as the file stores them; ``pages`` is None when the file has no count."""

    format: str = ""
    engine: str = ""
    pages: int | None = None
    title: str = ""
    author: str = ""
    warnings: list[str] = []
    # Word processing: hard page breaks and section breaks that start a new page (None = not counted).
    page_breaks: int | None = None
    # Epoch milliseconds at which the JVM began this document (lets the caller time the JVM's start-up).
    started_at_ms: int | None = None


class Section(msgspec.Struct, tag_field="t", tag="section", omit_defaults=True):
    """Word processing: the page geometry of the body blocks since the previous Section block (or the start).

    Emitted *after* the section's content, as Word stores it (a section's properties end the section).
    Twips (1/1440 inch); 0 = not stored. Only the page estimate reads it.
    """

    width: int = 0
    height: int = 0
    left: int = 0
    right: int = 0
    top: int = 0
    bottom: int = 0
    columns: int = 1


class Failure(msgspec.Struct, tag_field="t", tag="error"):
    """A typed failure from a reader (the JVM prints it as its last line and exits 3)."""

    kind: Literal["encrypted", "corrupt", "empty", "old-format", "unsupported", "too-large"]
    message: str


class End(msgspec.Struct, tag_field="t", tag="end"):
    """Last line of one document in the JVM's output; lets a warm JVM serve documents back to back."""


Block = Union[Para, TableBlock, Image, Sheet, Meta, Section, Failure, End]

_decoder = msgspec.json.Decoder(Block)


def decode_line(line: bytes | str) -> Block:
    """Decode one line of the Java CLI's output; raises msgspec.ValidationError/DecodeError on junk."""
    return _decoder.decode(line)

