"""A run's items: reading them from JSONL (with the line number of every refusal), checking them,
and each one's input hash for skip.

Checks are the contract's, judged before any Redis call: a key is 1–200 characters of UTF-8 without
control characters or braces (``submission.check_name``) and unique in the run; a payload is a JSON
object (``submission.check_payload``); at least one item. A refusal is ``BadInput`` naming the line (the
CLI's file) or the item's 1-based position (the library's list).

Input hash: ``store/digest.py`` (one definition for the client and the attempt, which records it
again of what it reads: the stored hash is the attempt's). Here the file is its resolved path; a
file we cannot read gives no hash, so the item simply runs; each distinct file is read once per
submission (``input_hashes``). Equal hashes mean "the same work on the same bytes", whatever the
file is called now.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import msgspec

from tender_pool.store import digest as _digest
from tender_pool.store.submission import BadInput, check_name, check_payload


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
        return _digest.file_sha256(real)
    except (OSError, ValueError):  # ValueError: an embedded NUL
        return None


def input_hash(kind: str, payload: dict[str, Any], digests: dict[str, str | None] | None = None) -> str:
    """The skip key of one item ("" when its file cannot be read: never skipped). ``digests``: the
    file digests this submission already took, by resolved path (``input_hashes``)."""
    if "file" not in payload:
        return _digest.input_hash(kind, payload, None)
    path = payload["file"]
    if digests is None:
        return _digest.input_hash(kind, payload, file_digest(path))
    try:
        real = os.path.realpath(path) if isinstance(path, str) and path else None
    except ValueError:
        real = None
    if real is None:
        return ""
    if real not in digests:
        digests[real] = file_digest(real)
    return _digest.input_hash(kind, payload, digests[real])


def input_hashes(kind: str, payloads: Iterable[dict[str, Any]]) -> list[str]:
    """Every item's skip key, reading each distinct file once (20 items naming one 200 MiB file
    hash it once, not 20 times: ~0.14 s each here)."""
    digests: dict[str, str | None] = {}
    return [input_hash(kind, p, digests) for p in payloads]
