"""Escaped text between tags: ``xlsx_strings.unescape_all`` decodes it with libxml2 and, where libxml2 refuses it,
with expat; both parsers must agree on what a text holds and on what they refuse."""

import xml.etree.ElementTree as ET

import pytest
from lxml import etree

from tender_pool.extract.xlsx_strings import _TEXT, unescape_all

EDGES = [b"\x01", b"\x09\x0a\x0d", b"a\r\nb\rc", b"&#xFFFE;", b"&#xFFFF;", b"&#xFFFD;", b"&#x10FFFF;", b"&#x110000;",
         b"&#0;", b"&#9;", b"&#13;", b"&#x1F;", b"&#xD800;", b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xef\xbf\xbe",
         b"]]>", b"]]", b"&", b"&amp", b"&foo;", b"&amp;&lt;&gt;&quot;&apos;", b"&#65", b"&#X41;", b"&#0065;",
         b"\xf4\x90\x80\x80", b"\x7f", b"\xc2\x85", b"&#x2028;", b"\x00", b" \t ", b"&#32;&#10;", "混凝土".encode()]


@pytest.mark.parametrize("text", EDGES)
def test_libxml2_and_expat_agree(text):
    data = b"<x>" + text + b"</x>"
    try:
        want = ET.fromstring(data).text
    except ET.ParseError:
        want = ParseError
    try:
        got = etree.fromstring(data, _TEXT).text
    except etree.XMLSyntaxError:
        got = ParseError
    assert got == want


class ParseError:
    """Stands for a refused text in the comparison above."""


def test_a_refused_text_falls_back_to_references_one_at_a_time():
    assert unescape_all([b"a&#1;b", b"&amp;&#22797;"]) == ["a\x01b", "&复"]
    assert unescape_all([b"&#22797;&#26680;", b"x\r\ny"]) == ["复核", "x\ny"]


def _outcome(fn, items):
    try:
        return fn(items)
    except (ValueError, UnicodeDecodeError) as exc:  # (UnicodeDecodeError is a ValueError; named for the reader)
        return type(exc)


def test_one_parse_of_every_text_gives_what_decoding_them_one_at_a_time_gives():
    """Speed: the regex path decodes the texts of a sheet's cells (``decode_texts``) and those formulas read
    (``unescape_each``) in one parse of all, texts without references too, where that gives the same as before:
    the texts with references in one parse of those (``unescape_all``) and the others as UTF-8, or each by
    ``unescape``. Whatever edge sits among plain texts (a CR, a refused character, U+E000), each text is what
    that gave."""
    from tender_pool.extract import xlsx_strings

    plain = [b"0107134144", b"", "混凝土".encode(), b"&#22797;&amp;x", b"a > b"]

    def before(items):
        refs = iter(unescape_all([v for v in items if b"&" in v]))
        return [next(refs) if b"&" in v else v.decode() for v in items]

    for edge in EDGES + ["\ue000".encode(), b"&#57344;"]:
        items = plain + [edge] + plain
        assert _outcome(xlsx_strings.decode_texts, items) == _outcome(before, items), edge
        assert _outcome(xlsx_strings.unescape_each, items) == _outcome(
            lambda x: list(map(xlsx_strings.unescape, x)), items), edge
    parsed = []
    real = xlsx_strings.etree.fromstring
    xlsx_strings.etree.fromstring = lambda data, parser: parsed.append(data) or real(data, parser)
    try:
        assert xlsx_strings.decode_texts(plain) == ["0107134144", "", "混凝土", "复&x", "a > b"]
        assert xlsx_strings.unescape_each(plain) == ["0107134144", "", "混凝土", "复&x", "a > b"]
    finally:
        xlsx_strings.etree.fromstring = real
    assert len(parsed) == 2 and all(b"0107134144" in p for p in parsed)  # one parse each, plain texts in it
