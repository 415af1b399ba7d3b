"""The public entry point for Python callers: ``extract()`` (the CLI's is ``command.main_extract``).

Why this shape: the daemon and the CLI need one typed result (msgspec Struct, the contract's
success JSON) and one exception type; everything format-specific stays behind ``sniff``.
"""

from __future__ import annotations

import gc
import os
import time

import msgspec

from tender_pool.extract.blocks import Block, Meta
from tender_pool.extract.deadline import Deadline
from tender_pool.extract.errors import ExtractError, short
from tender_pool.extract.markdown import render
from tender_pool.extract.pages import estimate
from tender_pool.extract.sniff import sniff

DEFAULT_MAX_BYTES = 200 * 1024 * 1024


class Extraction(msgspec.Struct):
    format: str
    engine: str
    pages: int
    pages_source: str
    markdown: str
    chars: int
    tables: int
    images: int
    sheets: int
    warnings: list[str]
    timings: dict[str, float]


def _max_bytes() -> int:
    try:
        return int(os.environ.get("TENDER_POOL_EXTRACT_MAX_BYTES", DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES


def read_blocks(path: str, *, timeout: float | None = None, jvm_heap: str = "512m", jvm=None,
                timings: dict | None = None) -> list[Block]:
    """Sniff and read ``path`` into blocks (no rendering)."""
    timings = timings if timings is not None else {}
    if not os.path.exists(path):
        raise ExtractError("file_not_found", f"no such file: {path}")
    if not os.path.isfile(path):
        raise ExtractError("file_not_found", f"not a regular file: {path}")
    size = os.path.getsize(path)
    if size > _max_bytes():
        raise ExtractError("too-large", f"{size} bytes exceeds the {_max_bytes()} byte limit")
    try:
        s = sniff(path)
    except PermissionError:
        raise ExtractError("file_not_found", f"cannot read {path}: permission denied") from None
    if s.format == "docx":
        from tender_pool.extract.docx import read_docx
        return read_docx(path)
    if s.format == "xlsx":
        from tender_pool.extract.xlsx import read_xlsx
        return read_xlsx(path)
    if s.format == "pdf":
        from tender_pool.extract.pdf import read_pdf
        return read_pdf(path)
    if s.format == "rtf":
        from tender_pool.extract.rtf import read_rtf
        return read_rtf(path)
    if s.format == "html":
        from tender_pool.extract.html import read_html
        return read_html(path, mht=s.detail == "mht")
    if s.format == "csv":
        from tender_pool.extract.delimited import read_csv
        return read_csv(path)
    from tender_pool.extract.legacy import read_doc, read_xls
    if s.format == "doc":
        return read_doc(path, s, timeout=timeout, heap=jvm_heap, warm=jvm, timings=timings)
    if s.format == "xls":
        return read_xls(path, s, timeout=timeout, heap=jvm_heap, warm=jvm, timings=timings)
    raise ExtractError("unsupported", s.format)


def extract(path: str, *, timeout: float | None = None, jvm_heap: str = "512m", jvm=None) -> Extraction:
    t0 = time.monotonic()
    timings: dict = {}
    limit = Deadline(timeout)
    # No cyclic collections while a document is read: a large workbook allocates hundreds of thousands of
    # containers (pattern matches, cells), each 700 of which start a collection that walks every tracked object,
    # in a slot's forked job child the whole inherited heap too (its pages then copied). The blocks hold no
    # cycles; what a library leaves cyclic is collected once the collector runs again (~10 % of a 12k-row bill).
    collecting = gc.isenabled()
    gc.disable()
    try:
        with limit:
            blocks = read_blocks(path, timeout=timeout, jvm_heap=jvm_heap, jvm=jvm, timings=timings)
            t1 = time.monotonic()
            rendered = render(blocks)
            pages, source = estimate(blocks)
    except Exception as exc:
        if limit.expired:  # whatever a reader made of the deadline's error (corrupt, a bare exception)
            raise limit.error() from None
        if isinstance(exc, ExtractError):
            raise
        if isinstance(exc, MemoryError):
            raise ExtractError("too-large", "the document needs more memory than allowed") from None
        if isinstance(exc, RecursionError):
            raise ExtractError("corrupt", "the document is nested too deeply to read") from None
        # a reader bug or an unforeseen library error: typed, never a traceback
        raise ExtractError("corrupt", f"unreadable document ({short(exc)})") from None
    finally:
        if collecting:
            gc.enable()
    if limit.expired:  # a reader swallowed the deadline's error and went on: its answer came too late
        raise limit.error()
    t2 = time.monotonic()
    meta = rendered.meta or Meta()
    if not _has_content(blocks):
        if not rendered.sheets:
            raise ExtractError("empty", "the document contains no text")
        # A workbook's sheet names are content (and all a caller can list); say it is empty instead.
        rendered.warnings.append("the workbook has no cell values")
    out_timings = {"extraction": round(t1 - t0, 4), "conversion": round(t2 - t1, 4)}
    if "jvm" in timings:
        out_timings["jvm"] = round(timings["jvm"], 4)
    for k in ("jvm_start",):
        if k in timings:
            out_timings[k] = round(timings[k], 4)
    return Extraction(
        format=meta.format or "unknown", engine=meta.engine or "unknown", pages=pages, pages_source=source,
        markdown=rendered.markdown, chars=len(rendered.markdown), tables=rendered.tables,
        images=rendered.images, sheets=rendered.sheets, warnings=rendered.warnings, timings=out_timings,
    )


def _has_content(blocks: list[Block]) -> bool:
    from tender_pool.extract.blocks import Para, Sheet, TableBlock

    for b in blocks:
        if isinstance(b, Para) and b.text.strip():
            return True
        if isinstance(b, Sheet) and any(c.v.strip() for c in b.cells):
            return True
        if isinstance(b, TableBlock) and any(c.text.strip() or c.table is not None
                                             for row in b.table.rows for c in row):
            return True
    return False


# What each format's reader imports lazily (the heavy libraries). A daemon slot calls ``preload``
# before forking a job's child, so the child is a warm copy and never pays an import per job, while
# a slot that never sees a format never carries its library.
_PRELOAD = {
    "docx": ("tender_pool.extract.docx",),
    "xlsx": ("tender_pool.extract.xlsx", "tender_pool.extract.xlsx_stream", "openpyxl", "openpyxl.styles.numbers",
             "openpyxl.worksheet.header_footer", "openpyxl.worksheet.page", "openpyxl.worksheet.dimensions",
             "openpyxl.worksheet.print_settings", "openpyxl.utils.datetime", "openpyxl.utils.cell"),
    "pdf": ("tender_pool.extract.pdf", "pypdfium2"),
    "rtf": ("tender_pool.extract.rtf", "striprtf.striprtf"),
    "html": ("tender_pool.extract.html",),
    "csv": ("tender_pool.extract.delimited",),
    "doc": ("tender_pool.extract.legacy", "olefile"),
    "xls": ("tender_pool.extract.legacy", "olefile", "xlrd"),
}


def preload(path: str) -> str | None:
    """Import the reader for ``path``'s format in this process; returns the format, None if unknown."""
    import importlib

    try:
        fmt = sniff(path).format
    except Exception:  # noqa: BLE001 - the real extraction reports the error properly
        return None
    for mod in _PRELOAD.get(fmt, ()):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    return fmt
