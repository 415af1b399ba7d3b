"""Blocks → Markdown: merges, nested tables, CJK, escaping, stories, sheets."""

from __future__ import annotations

from tender_pool.extract.blocks import Cell, Merge, Meta, Para, Sheet, SheetCell, Table, TableBlock, Failure
from tender_pool.extract.errors import ExtractError
from tender_pool.extract.markdown import COVERED, render, table_grid

import pytest


def rows_of(md: str) -> list[list[str]]:
    out = []
    for ln in md.splitlines():
        if ln.startswith("|") and not ln.startswith("|---"):
            out.append([c.strip() for c in ln.strip()[1:-1].split(" | ")])
    return out


def test_colspan_rowspan_spans_place_values():
    t = Table(rows=[
        [Cell("序号", rowspan=2), Cell("评分因素", colspan=2), Cell("分值", rowspan=2)],
        [Cell("一级指标"), Cell("二级指标")],
        [Cell("1"), Cell("价格分"), Cell("价格"), Cell("20")],
    ])
    grid, _ = table_grid(t)
    assert grid[0] == ["序号", "评分因素", COVERED, "分值"]
    assert grid[1] == ["序号", "一级指标", "二级指标", "分值"]
    assert grid[2] == ["1", "价格分", "价格", "20"]


def test_vmerge_cont_takes_value_from_above():
    t = Table(rows=[[Cell("商务部分", vmerge="start"), Cell("a")], [Cell("", vmerge="cont"), Cell("b")]])
    grid, _ = table_grid(t)
    assert grid == [["商务部分", "a"], ["商务部分", "b"]]


def test_grid_rebuilt_from_edges_for_wide_cell():
    # POI: a LibreOffice horizontal merge arrives as one wide cell (no merge flag).
    t = Table(rows=[
        [Cell("A", left=0, width=1000), Cell("B", left=1000, width=1000), Cell("C", left=2000, width=1000)],
        [Cell("wide", left=0, width=2000), Cell("D", left=2000, width=1000)],
        [Cell("E", left=0, width=1000, vmerge="start"), Cell("F", left=1000, width=2010)],
        [Cell("", left=5, width=995, vmerge="cont"), Cell("G", left=1000, width=1000), Cell("H", left=2000,
                                                                                            width=1000)],
    ])
    grid, _ = table_grid(t)
    assert grid == [["A", "B", "C"], ["wide", COVERED, "D"], ["E", "F", COVERED], ["E", "G", "H"]]


def test_nested_table_rendered_after_row_and_marked():
    inner = Table(rows=[[Cell("1"), Cell("2")], [Cell("3"), Cell("4")]])
    t = Table(rows=[[Cell("A"), Cell("B")], [Cell("C", table=inner), Cell("D")], [Cell("E"), Cell("F")]])
    md = render([TableBlock(t)]).markdown
    lines = md.splitlines()
    i_row = next(i for i, ln in enumerate(lines) if ln.startswith("| C |"))
    i_mark = next(i for i, ln in enumerate(lines) if "nested table in row 2, column 1" in ln)
    i_inner = next(i for i, ln in enumerate(lines) if ln.startswith("| 3 | 4 |"))
    i_next = next(i for i, ln in enumerate(lines) if ln.startswith("| E |"))
    assert i_row < i_mark < i_inner < i_next


def test_pipe_and_newline_escaped_cjk_intact():
    md = render([TableBlock(Table(rows=[[Cell("甲|乙"), Cell("第一行\n第二行")], [Cell("★≥℃㎡"), Cell("x")]]))]).markdown
    rows = rows_of(md)
    assert md.splitlines()[0] == "| 甲\\|乙 | 第一行<br>第二行 |"
    assert rows[1] == ["★≥℃㎡", "x"]


def test_sheet_merge_hidden_and_header_letters():
    s = Sheet(name="评分", hidden=True, cells=[SheetCell(0, 0, "标题"), SheetCell(1, 0, "类别"), SheetCell(1, 1, "x"),
                                              SheetCell(2, 1, "y")],
              merges=[Merge(0, 0, 0, 1), Merge(1, 0, 2, 0)], footer="第 {PAGE} 页")
    r = render([Meta(format="xlsx"), s])
    assert "## 评分 (hidden sheet)" in r.markdown
    assert rows_of(r.markdown) == [["A", "B"], ["标题", COVERED], ["类别", "x"], ["类别", "y"]]
    assert "*Sheet footer:* 第 {PAGE} 页" in r.markdown
    assert r.sheets == 1


def test_stories_in_own_sections_headers_deduplicated():
    blocks = [Para("正文", heading=1), Para("页眉", story="header"), Para("页眉", story="header"),
              Para("注释", story="footnote"), Para("item", list_marker="1.", list_level=1)]
    md = render(blocks).markdown
    assert md.startswith("# 正文")
    assert "  1. item" in md
    assert md.count("页眉") == 1
    assert md.index("## [Footnotes]") < md.index("## [Page headers]")
    assert md.index("item") < md.index("## [Footnotes]")


def test_failure_block_raises_typed_error():
    with pytest.raises(ExtractError) as ei:
        render([Failure(kind="encrypted", message="x")])
    assert ei.value.kind == "encrypted"
