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
