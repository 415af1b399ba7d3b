"""PDF reader (pypdf): text per page, page count exact.

Why pypdf: pure Python, maintained, no native dependency; tender PDFs are mostly exported text.
Scanned PDFs yield (almost) no text: reported through a warning, not an error, since the page
count is still useful to the caller.
"""

from __future__ import annotations

import logging
import warnings as pywarnings

from .blocks import Block, Image, Meta, Para
from .errors import ExtractError, short


def read_pdf(path: str) -> list[Block]:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        with pywarnings.catch_warnings():
            pywarnings.simplefilter("ignore")
            reader = PdfReader(path, strict=False)
            if reader.is_encrypted:
                try:
                    if not reader.decrypt(""):
                        raise ExtractError("encrypted", "password-protected PDF")
                except ExtractError:
                    raise
                except Exception:
                    raise ExtractError("encrypted", "password-protected PDF") from None
            pages = reader.pages
            n = len(pages)
            blocks: list[Block] = [Meta(format="pdf", engine="pypdf", pages=n)]
            chars = 0
            for i, page in enumerate(pages):
                try:
                    text = page.extract_text() or ""
                except Exception as exc:  # one bad content stream must not lose the document
                    blocks.append(Para(text=f"[page {i + 1}: text not extractable ({short(exc, 80)})]"))
                    continue
                chars += len(text.strip())
                for para in _paragraphs(text):
                    blocks.append(Para(text=para))
                try:
                    for img in page.images:
                        ext = img.name.rsplit(".", 1)[-1].lower() if "." in img.name else ""
                        blocks.append(Image(type=ext))
                except Exception:
                    pass
    except ExtractError:
        raise
    except FileNotDecryptedError:
        raise ExtractError("encrypted", "password-protected PDF") from None
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, IndexError, AttributeError,
            RecursionError) as exc:
        raise ExtractError("corrupt", f"unreadable PDF ({short(exc)})") from None
    if n and chars < 20 * n:
        meta = blocks[0]
        assert isinstance(meta, Meta)
        blocks[0] = Meta(format="pdf", engine="pypdf", pages=n,
                         warnings=["little or no text layer: the PDF is probably scanned (no OCR here)"])
    return blocks


def _paragraphs(text: str) -> list[str]:
    """pypdf gives layout lines; keep them, split pages into blank-line separated chunks."""
    out: list[str] = []
    cur: list[str] = []
    for line in text.splitlines():
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            out.append("\n".join(cur))
            cur = []
    if cur:
        out.append("\n".join(cur))
    return out
