"""OfficeArt (Escher) records as BIFF8 workbooks store pictures: the drawing group's blip store (what type each
picture is) and a sheet's shape containers (which blip, which anchor cells).

Used by ``xls_stream``; a sheet's drawing arrives in pieces (MSODRAWING and CONTINUE records between OBJ and
TXO records), joined by the caller. Lengths come from the file, so every walk stops at its container's end.
"""

from __future__ import annotations

import struct

_U16 = struct.Struct("<H").unpack_from
# blip store entries, shape containers, their properties (pib = picture index), anchors and client data
_BSE, _SP_CONTAINER, _FOPT, _CLIENT_ANCHOR, _CLIENT_DATA, _PIB = 0xF007, 0xF004, 0xF00B, 0xF010, 0xF011, 0x104
_BLIP_EXT = {0xF01A: "emf", 0xF01B: "wmf", 0xF01C: "pict", 0xF01D: "jpeg", 0xF01E: "png", 0xF01F: "dib"}
_BT_EXT = {2: "emf", 3: "wmf", 4: "pict", 5: "jpeg", 6: "png", 7: "dib"}  # FBSE.btWin32 without an inline blip


def _escher(buf: bytes, start: int, end: int):
    """(record type, instance, body start, body end) of the OfficeArt records in buf[start:end], depth first."""
    p = start
    while p + 8 <= end:
        ver_inst, rt, ln = struct.unpack_from("<HHI", buf, p)
        body = p + 8
        stop = min(body + ln, end)
        yield rt, ver_inst >> 4, body, stop
        if ver_inst & 0xF == 0xF:
            yield from _escher(buf, body, stop)
        p = stop


def blip_types(group: bytes) -> list[str]:
    """Extension per blip store entry, as POI's HSSFPictureData.suggestFileExtension names it."""
    out = []
    for rt, _, body, stop in _escher(group, 0, len(group)):
        if rt == _BSE:
            ext = ""
            if stop - body >= 44:  # the blip itself follows the 36-byte FBSE
                ext = _BLIP_EXT.get(_U16(group, body + 38)[0], "")
            out.append(ext or _BT_EXT.get(group[body], ""))
    return out


def shapes(drawing: bytes) -> list[tuple]:
    """(blip index, row, col, last row, last col) of every shape with client data (each has an OBJ record), in drawing order;
    row/col from its client anchor (a shape inside a group has a child anchor: None, as POI reports)."""
    out = []
    shape: list | None = None
    for rt, inst, body, stop in _escher(drawing, 0, len(drawing)):
        if rt == _SP_CONTAINER:
            if shape is not None and shape[5]:
                out.append(tuple(shape[:5]))
            shape = [0, None, None, None, None, False]
        elif shape is None:
            continue
        elif rt == _FOPT:
            for k in range(inst):
                opid, op = struct.unpack_from("<HI", drawing, body + 6 * k)
                if opid & 0x3FFF == _PIB and not opid & 0x8000:
                    shape[0] = op
        elif rt == _CLIENT_ANCHOR and stop - body >= 18:
            col1, _, row1, _, col2, _, row2 = struct.unpack_from("<HHHHHHH", drawing, body + 2)
            shape[1:5] = [row1, col1, row2, col2]
        elif rt == _CLIENT_DATA:
            shape[5] = True
    if shape is not None and shape[5]:
        out.append(tuple(shape[:5]))
    return out
