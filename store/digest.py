"""The input hash that makes a run item skippable, defined once for both sides (the contract, "Runs").

The client computes it at submit time to look up ``done:<kind>:<user>:<hash>``; the attempt that
runs the item computes it again of the bytes it is about to read, and that is the hash the settle
stores (``slots/inputs.py``). Both must agree bit for bit, so both call ``input_hash`` here.

Input hash: SHA-256 over the kind, the canonical JSON of the payload (keys sorted, no spaces:
``msgspec``'s ``order="sorted"``) and, when the payload names a ``file``, the SHA-256 of that
file's bytes. A payload that names a file we could not read has no hash (""): never skipped.

A leaf: imports nothing of ours (the client library uses it without the daemon).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import msgspec

FILE_CHUNK = 1 << 20


def file_sha256(path: str, each_chunk: Callable[[], object] | None = None, limit: int | None = None) -> str:
    """SHA-256 hex of the file's bytes, read in 1 MiB chunks into one buffer (no copy per chunk);
    ``each_chunk`` is called after every chunk (the slot beats there: a 5 GB file takes seconds).
    ``limit``: read no further (the size the caller saw: a file growing as fast as it is read would
    otherwise never end). Raises OSError. The caller checks it is a regular file: a FIFO or a
    device could block."""
    h = hashlib.sha256()
    buf = bytearray(FILE_CHUNK)
    view = memoryview(buf)
    left = -1 if limit is None else limit
    with open(path, "rb", buffering=0) as f:
        while left and (n := f.readinto(buf if left < 0 or left >= FILE_CHUNK else view[:left])):
            h.update(view[:n])
            left = left - n if left > 0 else left
            if each_chunk is not None:
                each_chunk()
    return h.hexdigest()


def input_hash(kind: str, payload: dict[str, Any], file_digest: str | None) -> str:
    """The skip key of one job: ``file_digest`` is the SHA-256 hex of the payload's ``file`` (None:
    it could not be read, and a payload naming a file then has no hash, "")."""
    if "file" in payload and file_digest is None:
        return ""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(b"\0")
    h.update(msgspec.json.encode(payload, order="sorted"))
    if "file" in payload:
        h.update(b"\0")
        h.update(file_digest.encode())  # type: ignore[union-attr]
    return h.hexdigest()
