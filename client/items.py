"""A run's items: reading them from JSONL (with the line number of every refusal), checking them,
and each one's input hash for skip.

Checks are CONTRACT.md's, judged before any Redis call: a key is 1–200 characters of UTF-8 without
control characters or braces (``types.check_name``) and unique in the run; a payload is a JSON
object (``types.check_payload``); at least one item. A refusal is ``BadInput`` naming the line (the
CLI's file) or the item's 1-based position (the library's list).

Input hash: SHA-256 over the kind, the canonical JSON of the payload (keys sorted, no spaces:
``msgspec``'s ``order="sorted"``) and, when the payload names a ``file``, the SHA-256 of that file's
bytes (its resolved path; a file we cannot read gives no hash, so the item simply runs). Equal
hashes mean "the same work on the same bytes", whatever the file is called now.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Iterable

import msgspec

from tender_pool.supervisor.types import BadInput, check_name, check_payload

FILE_CHUNK = 1 << 20


class Item(msgspec.Struct, forbid_unknown_fields=True):
    """One line of ``items.jsonl``: ``{"key": "1.1.1", "payload": {...}}``."""

    key: str
    payload: dict[str, Any] = {}


def read_jsonl(lines: Iterable[bytes | str]) -> list[Item]:
    """Items from JSONL; blank lines are skipped but counted, so a message's line number is the
    file's. Raises BadInput("line N: …") for a bad line or a repeated key, and for no item."""
    items: list[Item] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = msgspec.json.decode(line, type=Item)
        except msgspec.ValidationError as e:
            raise BadInput(f"line {n}: {e}") from None
        except msgspec.DecodeError as e:
            raise BadInput(f"line {n}: not a JSON object: {e}") from None
        except RecursionError:
            raise BadInput(f"line {n}: nested too deeply") from None
        _check(item, f"line {n}", seen, n, "line")
        items.append(item)
    if not items:
        raise BadInput("no items: the file holds no line")
    return items


def check_items(raw: Iterable[Any]) -> list[Item]:
    """The library's items (dicts with ``key`` and ``payload``, or ``Item``s) → checked Items."""
    items: list[Item] = []
    seen: dict[str, int] = {}
    for n, x in enumerate(raw, 1):
        if isinstance(x, Item):
            item = x
        else:
            try:
                item = msgspec.convert(x, Item)
            except msgspec.ValidationError as e:
                raise BadInput(f"item {n}: {e}") from None
        _check(item, f"item {n}", seen, n, "item")
        items.append(item)
    if not items:
        raise BadInput("no items")
    return items


def _check(item: Item, where: str, seen: dict[str, int], n: int, unit: str) -> None:
    try:
        check_name(item.key, "key")
        check_payload(item.payload)
    except BadInput as e:
        raise BadInput(f"{where}: {e}") from None
    if item.key in seen:
        raise BadInput(f"{where}: key {item.key!r} repeats {unit} {seen[item.key]}")
    seen[item.key] = n


def file_digest(path: Any) -> str | None:
    """SHA-256 hex of a file's bytes, or None when it is not a readable regular file."""
    if not isinstance(path, str) or not path:
        return None
    try:
        real = os.path.realpath(path)
        if not os.path.isfile(real):  # never open a FIFO or a device: it could block or never end
            return None
        h = hashlib.sha256()
        with open(real, "rb") as f:
            while chunk := f.read(FILE_CHUNK):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def input_hash(kind: str, payload: dict[str, Any]) -> str:
    """The skip key of one item ("" when its file cannot be read: never skipped)."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(b"\0")
    h.update(msgspec.json.encode(payload, order="sorted"))
    if "file" in payload:
        digest = file_digest(payload["file"])
        if digest is None:
            return ""
        h.update(b"\0")
        h.update(digest.encode())
    return h.hexdigest()
