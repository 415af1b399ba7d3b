"""Word 97-2003 ``.doc`` and Excel ``.xls``: POI through ``jvm.py`` first, local fallbacks second.

Why fallbacks: POI 4.0.1 refuses or crashes on files other tools read (lower-case stream names,
Word 2 / Excel 5, fuzzed files that OOM). antiword (``-m UTF-8.txt`` keeps Chinese) reads most
.doc files POI rejects; xlrd reads BIFF2–8. catdoc/xls2csv are never used: they lose CJK text.
The engine that produced the text is recorded in Meta so the metadata says which one it was.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time

from tender_pool.extract.blocks import Block, Cell, Failure, Image, Merge, Meta, Para, Sheet, SheetCell, Table, TableBlock
from tender_pool.extract.errors import ExtractError, short
from tender_pool.extract.numfmt import format_value
from tender_pool.extract.sniff import Sniffed

ANTIWORD = "antiword"
_NO_FALLBACK = {"encrypted", "too-large", "timeout"}
# A .doc POI could not fit in its heap still goes to antiword: a separate process that streams the text in a
# few MiB, so a document too large for POI's object model is not too large for it (xlrd, in-process, is not
# given the same chance with a workbook). The POI error stands when antiword cannot read the file either.
_DOC_NO_FALLBACK = {"encrypted", "timeout"}


def _jvm_module():
    try:
        from tender_pool.extract import jvm  # written by the JVM side; absent until it lands
    except ImportError:
        return None
    return jvm


def _poi(path: str, mode: str, *, timeout: float | None, heap: str, warm, timings: dict) -> list[Block]:
    """Blocks from POI, or raise ExtractError; raises LookupError when POI is not available."""
    jvm = _jvm_module()
    if jvm is None:
        raise LookupError("the POI driver (extract/jvm.py) is not installed")
    t = timeout if timeout is not None else 600.0
    try:
        if warm is not None:
            blocks = warm.extract(path, mode, t)
            if getattr(warm, "last_start", None) is not None:
                timings["jvm_start"] = warm.last_start
        else:
            blocks = jvm.run_cold(path, mode, heap=heap, timeout=t, timings=timings)
    except jvm.JvmError as exc:
        raise ExtractError(exc.kind, exc.message) from None
    except (FileNotFoundError, PermissionError) as exc:
        raise LookupError(f"the POI CLI cannot be started ({short(exc, 120)})") from None
    for b in blocks:
        if isinstance(b, Failure):
            raise ExtractError(b.kind, b.message)
    return blocks


# ---------------------------------------------------------------- .doc


def _doc_encrypted(path: str) -> bool:
    import olefile

    try:
        with olefile.OleFileIO(path) as ole:
            for name in ole.listdir():
                if "/".join(name).lower() == "worddocument":
                    head = ole.openstream(name).read(12)
                    break
            else:
                return False
    except Exception:
        return False
    if len(head) < 12:
        return False
    flags = struct.unpack_from("<H", head, 10)[0]
    return bool(flags & 0x0100)


def _word_version(path: str) -> int | None:
    """nFib of the WordDocument stream (< 101 means Word 6/95 or older)."""
    import olefile

    try:
        with olefile.OleFileIO(path) as ole:
            for name in ole.listdir():
                if "/".join(name).lower() == "worddocument":
                    head = ole.openstream(name).read(4)
                    return struct.unpack_from("<H", head, 2)[0] if len(head) == 4 else None
    except Exception:
        return None
    return None


def antiword(path: str, timeout: float | None) -> list[Block]:
    exe = shutil.which(ANTIWORD)
    if exe is None:
        raise ExtractError("unsupported", "antiword is not installed")
    env = dict(os.environ, LC_ALL="C.UTF-8")
    try:
        proc = subprocess.run([exe, "-w", "0", "-m", "UTF-8.txt", path], capture_output=True,
                              timeout=timeout if timeout else 120, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ExtractError("timeout", "antiword did not finish in time") from None
    err = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        low = err.lower()
        if "encrypted" in low:
            raise ExtractError("encrypted", "password-protected Word document")
        if "too small" in low or "not a word document" in low or "version" in low:
            raise ExtractError("corrupt", f"antiword: {err.splitlines()[0] if err else 'unreadable'}")
        raise ExtractError("corrupt", f"antiword failed: {err[:200] or proc.returncode}")
    text = proc.stdout.decode("utf-8", "replace")
    blocks: list[Block] = [Meta(format="doc", engine="antiword")]
    rows: list[list[Cell]] = []

    def flush() -> None:
        if rows:
            blocks.append(TableBlock(Table(rows=list(rows))))
            rows.clear()

    for line in text.splitlines():
        s = line.strip()
        if s.startswith("|") and s.endswith("|") and len(s) > 1:
            rows.append([Cell(text=c.strip()) for c in s[1:-1].split("|")])
            continue
        flush()
        if s == "[pic]":
            blocks.append(Image())
        elif s:
            blocks.append(Para(text=s.replace("[pic]", "").strip() or s))
    flush()
    return blocks


def _try_poi(path: str, mode: str, *, timeout: float | None, heap: str, warm, timings: dict,
             final: set[str] = _NO_FALLBACK) -> tuple[list[Block] | None, ExtractError | None, str]:
    """POI first, for both formats. Returns (blocks, None, "") on success, else (None, POI's error or
    None when POI is not installed, why) for the caller's fallback; ``final`` kinds raise."""
    t0 = time.monotonic()
    try:
        blocks = _poi(path, mode, timeout=timeout, heap=heap, warm=warm, timings=timings)
    except LookupError as exc:
        return None, None, str(exc)
    except ExtractError as exc:
        if exc.kind in final:
            raise
        return None, exc, f"POI: {exc.kind}: {exc.message}"
    timings["jvm"] = time.monotonic() - t0
    return blocks, None, ""


def read_doc(path: str, sniffed: Sniffed, *, timeout: float | None, heap: str, warm,
             timings: dict) -> list[Block]:
    if sniffed.detail != "word2":
        blocks, poi_error, why = _try_poi(path, "doc", timeout=timeout, heap=heap, warm=warm, timings=timings,
                                          final=_DOC_NO_FALLBACK)
        if blocks is not None:
            return blocks
    else:
        poi_error, why = None, "Word 2.x file (POI cannot read it)"
    if poi_error is None and _doc_encrypted(path):
        raise ExtractError("encrypted", "password-protected Word document")
    try:
        blocks = antiword(path, timeout)
    except ExtractError as exc:
        if exc.kind in _NO_FALLBACK:
            raise
        if poi_error is not None and poi_error.kind == "old-format":
            raise poi_error
        nfib = _word_version(path)
        if nfib is not None and nfib < 150:
            raise ExtractError("old-format", "Word 6/95 document: no engine here reads it") from None
        if sniffed.detail == "word2":
            raise ExtractError("old-format", "Word 2.x document: no engine here reads it") from None
        raise poi_error or exc
    nfib = _word_version(path)
    if nfib is not None and nfib < 150 and _looks_mojibake(blocks):
        # antiword decodes Word 6/95 8-bit text as Latin-1; Cyrillic/CJK would come out as junk.
        raise ExtractError("old-format", "Word 6/95 document in a non-Western code page: no engine here "
                                         "decodes it correctly")
    blocks[0] = Meta(format="doc", engine="antiword", warnings=[f"text from antiword ({why})"])
    return blocks


def _looks_mojibake(blocks: list[Block]) -> bool:
    letters = latin1 = 0
    for b in blocks:
        if isinstance(b, Para):
            for ch in b.text:
                if ch.isalpha():
                    letters += 1
                    if "\u00c0" <= ch <= "\u00ff":
                        latin1 += 1
        if letters > 20000:
            break
    return letters > 0 and latin1 / letters > 0.3


# ---------------------------------------------------------------- .xls


def xlrd_blocks(path: str) -> list[Block]:
    import xlrd

    try:
        try:
            book = xlrd.open_workbook(path, formatting_info=True, on_demand=False, logfile=open(os.devnull, "w"))
        except NotImplementedError:
            book = xlrd.open_workbook(path, formatting_info=False, logfile=open(os.devnull, "w"))
    except xlrd.biffh.XLRDError as exc:
        msg = str(exc)
        if "encrypt" in msg.lower():
            raise ExtractError("encrypted", "password-protected workbook") from None
        raise ExtractError("corrupt", f"unreadable workbook (xlrd: {msg[:160]})") from None
    except (AssertionError, struct.error, IndexError, KeyError, ValueError, TypeError, UnicodeDecodeError,
            OverflowError, MemoryError) as exc:
        raise ExtractError("corrupt", f"unreadable workbook (xlrd: {short(exc, 160)})") from None
    except Exception as exc:  # xlrd's compdoc raises its own errors on damaged containers
        raise ExtractError("corrupt", f"unreadable workbook (xlrd: {short(exc, 160)})") from None
    warnings: list[str] = []
    if book.biff_version and book.biff_version < 80:
        warnings.append(f"Excel BIFF{book.biff_version // 10} workbook read by xlrd")
    blocks: list[Block] = [Meta(format="xls", engine="xlrd", warnings=warnings)]
    fmt_map = book.format_map if book.formatting_info else {}
    for sh in book.sheets():
        cells: list[SheetCell] = []
        for r in range(sh.nrows):
            for c, cell in enumerate(sh.row(r)):
                ct = cell.ctype
                if ct in (xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK):
                    continue
                code = None
                if fmt_map:
                    try:
                        key = book.xf_list[cell.xf_index].format_key
                        # built-in 14 is the locale's short date: LibreOffice shows a four-digit year
                        code = "m/d/yyyy" if key == 14 else fmt_map[key].format_str
                    except (IndexError, KeyError, AttributeError):
                        code = None
                if ct == xlrd.XL_CELL_TEXT:
                    if cell.value.strip():
                        cells.append(SheetCell(r, c, cell.value))
                elif ct == xlrd.XL_CELL_NUMBER:
                    cells.append(SheetCell(r, c, format_value(cell.value, code, is_date=False), "number"))
                elif ct == xlrd.XL_CELL_DATE:
                    try:
                        value = xlrd.xldate.xldate_as_datetime(cell.value, book.datemode)
                        text = format_value(value, code, is_date=True)
                    except (xlrd.xldate.XLDateError, ValueError, OverflowError):
                        text = format_value(cell.value, None)
                    cells.append(SheetCell(r, c, text, "date"))
                elif ct == xlrd.XL_CELL_BOOLEAN:
                    cells.append(SheetCell(r, c, "TRUE" if cell.value else "FALSE", "bool"))
                elif ct == xlrd.XL_CELL_ERROR:
                    cells.append(SheetCell(r, c, xlrd.error_text_from_code.get(cell.value, "#ERR"), "error"))
        merges = [Merge(rlo, clo, rhi - 1, chi - 1) for rlo, rhi, clo, chi in getattr(sh, "merged_cells", [])]
        blocks.append(Sheet(name=sh.name, cells=cells, merges=merges, hidden=bool(sh.visibility)))
    return blocks


def read_xls(path: str, sniffed: Sniffed, *, timeout: float | None, heap: str, warm,
             timings: dict) -> list[Block]:
    if sniffed.format == "xls" and not sniffed.detail:
        from tender_pool.extract.xls_stream import read_stream

        fast = read_stream(path)  # large plain BIFF8 workbooks: one pass here instead of the JVM
        if fast is not None:
            return fast
    if sniffed.detail != "biff-raw":
        blocks, poi_error, why = _try_poi(path, "xls", timeout=timeout, heap=heap, warm=warm, timings=timings)
        if blocks is not None:
            return blocks
    else:
        poi_error, why = None, "pre-OLE Excel 2-4 file"
    try:
        blocks = xlrd_blocks(path)
    except ExtractError as exc:
        if exc.kind == "encrypted" and sniffed.detail == "biff5":
            raise ExtractError("old-format", "Excel 5/95 workbook with legacy encryption: no engine here reads it") \
                from None
        if poi_error is not None and poi_error.kind == "old-format" and exc.kind == "corrupt":
            raise poi_error from None
        raise
    meta = blocks[0]
    assert isinstance(meta, Meta)
    blocks[0] = Meta(format="xls", engine="xlrd", warnings=list(meta.warnings) + [f"read by xlrd ({why})"])
    return blocks
