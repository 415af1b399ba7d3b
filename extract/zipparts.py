"""Bounded reading of ZIP members: the only way extract/ inflates a part of an OOXML package.

Why: a ZIP member inflates to whatever its deflate stream says. A bomb of ~3 MiB declares 1.1 GiB
honestly (and was inflated whole: 4 GiB of RSS, ~50 s, or a MemoryError reported as ``corrupt``), or
declares less than the truth. So a member is refused as ``too-large`` *before* inflating when its
declared size passes the cap, and is inflated in ``CHUNK`` pieces that stop at the cap whatever its
header says (zipfile's ``ZipExtFile.read(n)`` inflates at most about ``n`` bytes per call), so no
member costs more than ``cap`` bytes of memory. Nothing here parses XML: the sniffer imports it.
"""

from __future__ import annotations

import io
import zipfile

from tender_pool.extract.errors import ExtractError

MAX_PART = 256 << 20  # inflated bytes of one part
MAX_TOTAL = 1 << 30  # inflated bytes of a whole package (declared), and read from one
CHUNK = 1 << 20


def too_large(name: str, cap: int) -> ExtractError:
    return ExtractError("too-large", f"part {name} unpacks to more than {cap} bytes")


def check_declared(info: zipfile.ZipInfo, cap: int = MAX_PART) -> None:
    """``too-large`` when the member's header declares more than ``cap`` inflated bytes."""
    if info.file_size > cap:
        raise ExtractError("too-large", f"part {info.filename} unpacks to {info.file_size} bytes (limit {cap})")


def read_member(zf: zipfile.ZipFile, name: str, cap: int = MAX_PART) -> bytes:
    """The member's inflated bytes, never more than ``cap`` of them in memory: ``too-large`` before
    inflating when the header says more, and as soon as the inflated stream passes ``cap``."""
    check_declared(zf.getinfo(name), cap)
    out = io.BytesIO()  # getvalue() hands over its buffer: no second copy of a big part
    with zf.open(name) as fh:
        while chunk := fh.read(CHUNK):
            if out.tell() + len(chunk) > cap:
                raise too_large(name, cap)
            out.write(chunk)
    return out.getvalue()


class BoundedPart(io.RawIOBase):
    """A member opened for streaming (``iterparse``): reads pass through until ``cap`` inflated bytes,
    then ``too-large`` (the header's size is checked on open, the stream's on every read)."""

    def __init__(self, zf: zipfile.ZipFile, name: str, cap: int = MAX_PART):
        self._fh = None
        check_declared(zf.getinfo(name), cap)
        self._fh = zf.open(name)
        self._name, self._cap, self._seen = name, cap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # read(n) and readall() of io.RawIOBase come through here
        data = self._fh.read(min(len(b), CHUNK))
        self._seen += len(data)
        if self._seen > self._cap:
            raise too_large(self._name, self._cap)
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        fh = getattr(self, "_fh", None)  # None when __init__ refused the member (close runs on __del__ too)
        if fh is not None:
            fh.close()
        super().close()
