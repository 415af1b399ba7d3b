"""Safe access to the parts of an OOXML zip (shared by the docx and xlsx readers).

Why: a .docx is an untrusted zip of XML. Zip bombs are ``too-large`` before they are inflated: every
part's declared size is capped (``zipparts.MAX_PART``) and so is the package's (``MAX_TOTAL``), and a part
is only ever inflated through ``zipparts`` (chunks that stop at the cap, whatever the header says), the
bytes inflated by one Package counting against ``MAX_TOTAL`` too. XML is parsed with entity resolution and
network access off (XXE). Zip/XML damage becomes ``corrupt``; running out of memory ``too-large``; an
``ExtractError`` raised inside (the deadline's ``timeout``) passes through unchanged.
"""

from __future__ import annotations

import posixpath
import zipfile

from lxml import etree

from tender_pool.extract.errors import ExtractError, short
from tender_pool.extract.zipparts import MAX_PART, MAX_TOTAL, BoundedPart, check_declared, read_member

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True, remove_comments=True,
                          load_dtd=False)

REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"


class Package:
    def __init__(self, path: str):
        try:
            self.zf = zipfile.ZipFile(path)
            infos = self.zf.infolist()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ExtractError("corrupt", f"damaged ZIP container ({short(exc, 120)})") from None
        for info in infos:
            check_declared(info, MAX_PART)
        total = sum(i.file_size for i in infos)
        if total > MAX_TOTAL:
            raise ExtractError("too-large", f"the package unpacks to {total} bytes (limit {MAX_TOTAL})")
        self.names = {i.filename for i in infos}
        self.inflated = 0  # bytes read through read(), re-reads included: capped at MAX_TOTAL

    def close(self) -> None:
        self.zf.close()

    def read(self, name: str) -> bytes | None:
        if name not in self.names:
            return None
        try:
            data = read_member(self.zf, name, min(MAX_PART, MAX_TOTAL - self.inflated))
        except ExtractError:
            raise
        except MemoryError:
            raise ExtractError("too-large", f"part {name} needs more memory than allowed") from None
        except Exception as exc:  # CRC errors, truncated members, bad compression
            raise ExtractError("corrupt", f"damaged part {name} ({short(exc, 120)})") from None
        self.inflated += len(data)
        return data

    def open(self, name: str) -> BoundedPart:
        """The part as a stream for ``iterparse`` (a big sheet), bounded like ``read``."""
        return BoundedPart(self.zf, name, MAX_PART)

    def xml(self, name: str):
        data = self.read(name)
        if data is None:
            return None
        try:
            return etree.fromstring(data, _PARSER)
        except etree.XMLSyntaxError as exc:
            if "Memory allocation failed" in str(exc):
                raise ExtractError("too-large", f"parsing {name} needs more memory than allowed") from None
            raise ExtractError("corrupt", f"malformed XML in {name} ({short(exc, 120)})") from None

    def rels(self, part: str) -> dict[str, tuple[str, str]]:
        """Relationship id → (type suffix, target part name) for ``part``."""
        d, f = posixpath.split(part)
        root = self.xml(posixpath.join(d, "_rels", f + ".rels"))
        out: dict[str, tuple[str, str]] = {}
        if root is None:
            return out
        for rel in root.iter(f"{{{REL_NS}}}Relationship"):
            target = rel.get("Target", "")
            if rel.get("TargetMode") == "External":
                continue
            full = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(d, target))
            out[rel.get("Id", "")] = (rel.get("Type", "").rsplit("/", 1)[-1], full)
        return out

    def app_pages(self) -> int | None:
        """docProps/app.xml <Pages>, only when the writer actually computed statistics.

        python-docx and other generators copy a template app.xml saying Pages=1 with Words=0; a count
        next to zero words/characters is the template's, not the document's.
        """
        root = self.xml("docProps/app.xml")
        if root is None:
            return None
        vals = {etree.QName(el).localname: (el.text or "").strip() for el in root}
        try:
            pages = int(vals.get("Pages", ""))
        except ValueError:
            return None
        stats = [vals.get(k, "") for k in ("Words", "Characters", "CharactersWithSpaces", "Lines")]
        if not any(s.isdigit() and int(s) > 0 for s in stats):
            return None
        return pages if pages > 0 else None
