"""What an attempt recorded of its input: the hash skip trusts (CONTRACT.md, Runs).

The hash stored with a completed job (and its ``done:<kind>:<user>:<hash>`` key) is the hash of
what that attempt read, not the one taken at submit time: the file may change between the two.
So before the handler (or the extraction child) starts, the slot hashes the input with the
client's own function (``digest.input_hash``: the submit-time lookup and the stored key agree), and
after the attempt it checks the file is still what it hashed; a file that changed meanwhile fails
the attempt (``handler_failed``, retried): its result may be of either content.

The check after the attempt is a stat fingerprint taken with the hash (device, inode, size,
mtime_ns, ctime_ns of the resolved path, and the path the payload names still resolving to it),
not a second hash: one stat (~2 µs) against a second full read (200 MiB: 0.14 s of SHA-256 from a
warm page cache, a disk read from a cold one). Any write changes ctime, which no user can set back;
a rename over the path changes the inode. The one gap is timestamp granularity (the kernel stamps
with a clock tick of a few ms): a write in the same tick as our stat could leave the fingerprint
equal. As git does for its "racy" index entries, a file changed within ``RACY_NS`` of the hash is
hashed again after the attempt instead of trusted by its fingerprint (only freshly written files
pay the second read).

The hash is taken in the slot, which beats while it reads (``each_chunk``): at ~1.5 GB/s a large
file takes seconds, longer than the supervisor's patience with a silent slot.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from typing import Any, Callable

from tender_pool.store import digest

RACY_NS = 1_000_000_000  # a file changed this recently may share a timestamp tick with a later write
HASH_TRIES = 3  # a file that changes during every one of these reads fails the attempt before it starts


class InputChanging(Exception):
    """The input changed while it was being hashed, every time: the attempt does not start."""


def fingerprint(path: str) -> tuple[int, int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Recorded:
    """The input hash an attempt took before its handler read anything, and how to tell whether
    the file is still what was hashed."""

    hash: str  # "" when the payload names a file that could not be read: never skippable
    path: str | None = None  # the resolved file hashed (None: the payload names no file)
    named: str | None = None  # the payload's file as named (it must still resolve to ``path``)
    stamp: tuple[int, int, int, int, int] | None = None
    file_hash: str | None = None
    racy: bool = False  # changed within RACY_NS of the hash: check the bytes, not the stamp

    def changed(self, each_chunk: Callable[[], object] | None = None) -> str | None:
        """Why the input is no longer what was hashed (a message naming the file), or None.
        ``each_chunk``: as ``record``'s, for a racy file read again."""
        if self.path is None or self.stamp is None:
            return None
        try:
            now = fingerprint(self.path)
            moved = self.named is not None and os.path.realpath(self.named) != self.path
        except (OSError, ValueError) as e:
            return f"input file {self.path} changed during the attempt ({getattr(e, 'strerror', e)})"
        if moved:
            return f"input file {self.named} changed during the attempt (it no longer resolves to {self.path})"
        if now != self.stamp:
            what = [n for n, a, b in zip(("device", "inode", "size", "mtime", "ctime"), self.stamp, now) if a != b]
            return f"input file {self.path} changed during the attempt ({', '.join(what)} differ from when it was hashed)"
        if self.racy:
            try:
                again = digest.file_sha256(self.path, each_chunk)
            except OSError as e:
                return f"input file {self.path} changed during the attempt ({e.strerror})"
            if again != self.file_hash:
                return f"input file {self.path} changed during the attempt (its bytes differ from when it was hashed)"
        return None


def record(kind: str, payload: dict[str, Any], path: str | None,
           each_chunk: Callable[[], object] | None = None) -> Recorded:
    """Hash the attempt's input before anything reads it. ``path``: the payload's file resolved and
    checked by the kind (``handlers.input_file``), None when it names none. Raises InputChanging
    when every read saw the file change under it."""
    if path is None:
        return Recorded(digest.input_hash(kind, payload, None))
    named = payload.get("file") if isinstance(payload.get("file"), str) else None
    for _ in range(HASH_TRIES):
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # swapped for a FIFO or a device: reading could block
                return Recorded("")
            before = fingerprint(path)
            file_hash = digest.file_sha256(path, each_chunk, limit=before[2])  # a size change shows below
            after = fingerprint(path)
        except OSError:
            return Recorded("")  # gone or unreadable: the handler reports it; nothing to skip by
        if before == after:
            racy = time.time_ns() - max(before[3], before[4]) < RACY_NS
            return Recorded(digest.input_hash(kind, payload, file_hash), path, named, before, file_hash, racy)
    raise InputChanging(f"input file {path} changed while it was being hashed ({HASH_TRIES} reads)")
