"""A large bill of quantities (工程量清单), generated: the .xlsx written by openpyxl, its .xls twin by LibreOffice.

Shared by the twin/speed tests and bench/bench_extract.py. Six sheets, 12,000 data rows in all, three of
them 1,500–2,600 rows × 9 columns of Chinese text with set column widths, numbers with formats, merged
title rows, one hidden sheet, A4 page setup with repeated header rows — the shape of the workbooks behind
the issue's figures. Files are cached under $TMPDIR by generator version (never in the repo); the .xls
needs ``soffice`` (Debian: libreoffice-calc-nogui).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

VERSION = 3
SHEETS = [("分部分项工程量清单", 2600), ("措施项目清单", 2400), ("其他项目清单", 1500), ("安装工程", 2500),
          ("材料设备表", 2000), ("(隐藏)单价分析", 1000)]
APT_PACKAGE = "libreoffice-calc-nogui"
_WORDS = ["混凝土", "钢筋", "模板", "砌体", "防水", "保温", "土方开挖", "回填", "桩基", "脚手架", "给水管道", "排水",
          "电缆敷设", "桥架", "配电箱", "照明灯具", "消防喷淋", "风管", "涂料", "石材", "C30", "HRB400", "DN100"]


def cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / f"tender-pool-bigbook-v{VERSION}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_WORDS) for _ in range(n))


def make_xlsx(path: Path) -> Path:
    import openpyxl
    from openpyxl.styles import Alignment

    rng = random.Random(13)
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    wrap = Alignment(wrap_text=True, vertical="top")
    for si, (title, rows) in enumerate(SHEETS):
        ws = wb.create_sheet(title)
        if title.startswith("(隐藏)"):
            ws.sheet_state = "hidden"
        ws.append([f"{title}(工程名称:某市政道路改造工程)"])
        ws.merge_cells(start_row=1, start_column=1, end_row=1, end_column=9)
        ws.append(["序号", "项目编码", "项目名称", "项目特征描述", "计量单位", "工程量", "综合单价", "合价", "备注"])
        for r in range(rows):
            qty = round(rng.uniform(1, 5000), 3)
            price = round(rng.uniform(10, 900), 2)
            ws.append([r + 1, f"0{si + 1}0{rng.randint(1000000, 9999999)}", _text(rng, 2),
                       _text(rng, rng.randint(3, 9)), rng.choice(["m", "m2", "m3", "t", "个", "套"]), qty, price,
                       round(qty * price, 2), _text(rng, 1) if r % 7 == 0 else None])
            row = ws.max_row
            ws.cell(row, 4).alignment = wrap
            ws.cell(row, 6).number_format = "0.000"
            ws.cell(row, 7).number_format = "#,##0.00"
            ws.cell(row, 8).number_format = "#,##0.00"
            if r % 200 == 199:
                ws.append([f"小计{r // 200 + 1}"])
                ws.merge_cells(start_row=ws.max_row, start_column=1, end_row=ws.max_row, end_column=7)
        for col, width in zip("ABCDEFGHI", (6, 14, 16, 36, 8, 11, 11, 13, 10)):
            ws.column_dimensions[col].width = width
        ws.page_setup.paperSize = 9
        ws.page_setup.orientation = "landscape" if si % 2 else "portrait"
        ws.print_title_rows = "2:2"
        ws.oddFooter.center.text = "第 &P 页 共 &N 页"
    tmp = path.with_suffix(".tmp.xlsx")
    wb.save(tmp)
    os.replace(tmp, path)
    return path


def soffice() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


def convert(src: Path, fmt: str, out_dir: Path) -> Path:
    """``soffice --convert-to fmt`` with a private profile (concurrent runs must not share one)."""
    exe = soffice()
    if exe is None:
        raise RuntimeError(f"soffice not found (apt-get install {APT_PACKAGE})")
    with tempfile.TemporaryDirectory(prefix="tp-lo-") as profile:
        r = subprocess.run([exe, f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", fmt,
                            "--outdir", str(out_dir), str(src)], capture_output=True, timeout=300)
    out = out_dir / (src.stem + "." + fmt.split(":")[0])
    if r.returncode != 0 or not out.is_file():
        raise RuntimeError(f"soffice --convert-to {fmt} failed: {r.stderr.decode(errors='replace')[-500:]}")
    return out


def paths() -> tuple[Path, Path]:
    """(bill.xlsx, bill.xls): the openpyxl original resaved by LibreOffice as .xlsx and as .xls, so both twins
    are LibreOffice-written, as the issue's pair is."""
    d = cache_dir()
    xlsx, xls = d / "bill.xlsx", d / "bill.xls"
    if xlsx.is_file() and xls.is_file():
        return xlsx, xls
    src_dir = d / "src"
    src_dir.mkdir(exist_ok=True)
    src = make_xlsx(src_dir / "bill.xlsx")
    work = Path(tempfile.mkdtemp(prefix="conv-", dir=d))
    got_xls = convert(src, "xls", work)
    got_xlsx = convert(got_xls, "xlsx", work)  # from the .xls: the same LibreOffice model behind both
    os.replace(got_xlsx, xlsx)
    os.replace(got_xls, xls)
    shutil.rmtree(work, ignore_errors=True)
    return xlsx, xls


def ensure_soffice() -> None:
    """Install LibreOffice's calc (no GUI) when missing and we are root; tests and bench need it for the twin."""
    if soffice() is not None:
        return
    if os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", APT_PACKAGE], capture_output=True, env=env, timeout=900)
        if soffice() is None:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
            subprocess.run(["apt-get", "install", "-y", "-qq", APT_PACKAGE], capture_output=True, env=env,
                           timeout=900)
    if soffice() is None:
        raise RuntimeError(f"soffice not found: install Debian's {APT_PACKAGE}")


# ---------------------------------------------------------------- the same bill with formulas, no cached values

FORMULA_VERSION = 1
SUMMARY = "汇总"


def make_formula_xlsx(path: Path, sheets: list[tuple[str, int]] = SHEETS) -> Path:
    """The bill as a generator writes it: openpyxl stores formulas without results. What a
    bill of quantities computes: 合价 = ROUND(工程量*综合单价, 2) on every row, a flag by IF on every row, string
    concatenation in the subtotal labels, SUM over ranges for subtotals and over a list of cells for totals,
    unit prices taken from another sheet (cross-sheet references) on one sheet, and a summary sheet of
    cross-sheet totals, tax and a grand total with a text label."""
    import openpyxl
    from openpyxl.styles import Alignment

    rng = random.Random(17)
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    wrap = Alignment(wrap_text=True, vertical="top")
    totals: list[tuple[str, int]] = []
    first = sheets[0][0]
    assert sheets[0][1] >= max(n for _, n in sheets), "the first sheet prices the others: it needs the most rows"
    for si, (title, rows) in enumerate(sheets):
        ws = wb.create_sheet(title)
        if title.startswith("(隐藏)"):
            ws.sheet_state = "hidden"
        ws.append([f"{title}(工程名称:某市政道路改造工程)"])
        ws.merge_cells(start_row=1, start_column=1, end_row=1, end_column=9)
        ws.append(["序号", "项目编码", "项目名称", "项目特征描述", "计量单位", "工程量", "综合单价", "合价", "备注"])
        block_start = ws.max_row + 1
        subtotals: list[int] = []
        for r in range(rows):
            n = ws.max_row + 1
            qty = round(rng.uniform(1, 5000), 3)
            # the materials sheet prices its rows from the first sheet's unit prices, plus 5 %
            price = f"=ROUND('{first}'!G{n}*1.05,2)" if title == "材料设备表" else round(rng.uniform(10, 900), 2)
            ws.append([r + 1, f"0{si + 1}0{rng.randint(1000000, 9999999)}", _text(rng, 2),
                       _text(rng, rng.randint(3, 9)), rng.choice(["m", "m2", "m3", "t", "个", "套"]), qty, price,
                       f"=ROUND(F{n}*G{n},2)", f'=IF(H{n}>=1000000,"复核:"&E{n},"")'])
            ws.cell(n, 4).alignment = wrap
            ws.cell(n, 6).number_format = "0.000"
            ws.cell(n, 7).number_format = "#,##0.00"
            ws.cell(n, 8).number_format = "#,##0.00"
            if r % 200 == 199 or r == rows - 1:
                k = len(subtotals) + 1
                ws.append([f'="小计"&{k}&"(第"&{block_start - 2}&"-"&{n - 2}&"项)"'])
                s = ws.max_row
                ws.cell(s, 8).value = f"=SUM(H{block_start}:H{n})"
                ws.cell(s, 8).number_format = "#,##0.00"
                ws.merge_cells(start_row=s, start_column=1, end_row=s, end_column=7)
                subtotals.append(s)
                block_start = s + 1
        ws.append(["合计"])
        t = ws.max_row
        ws.cell(t, 8).value = "=" + "+".join(f"H{s}" for s in subtotals[:8]) + \
            (f"+SUM({','.join(f'H{s}' for s in subtotals[8:])})" if len(subtotals) > 8 else "")
        ws.cell(t, 8).number_format = "#,##0.00"
        ws.cell(t, 9).value = f"=COUNT(F3:F{t - 1})"
        totals.append((title, t))
        for col, width in zip("ABCDEFGHI", (6, 14, 16, 36, 8, 11, 11, 13, 10)):
            ws.column_dimensions[col].width = width
        ws.page_setup.paperSize = 9
        ws.page_setup.orientation = "landscape" if si % 2 else "portrait"
        ws.print_title_rows = "2:2"
        ws.oddFooter.center.text = "第 &P 页 共 &N 页"
    ws = wb.create_sheet(SUMMARY, 0)
    ws.append(["分项", "金额", "占比"])
    for title, t in totals:
        n = ws.max_row + 1
        ws.append([title, f"='{title}'!H{t}", f"=ROUND(B{n}/B${len(totals) + 2}*100,1)"])
        ws.cell(n, 2).number_format = "#,##0.00"
    last = ws.max_row
    ws.append(["小计", f"=SUM(B2:B{last})", f"=SUM(C2:C{last})"])
    ws.append(["税金(9%)", f"=ROUND(B{last + 1}*0.09,2)"])
    ws.append(["总价", f"=B{last + 1}+B{last + 2}", f'=IF(B{last + 3}>AVERAGE(B2:B{last})*3,"偏高","正常")'])
    ws.append([f'="含税总价:"&ROUND(B{last + 3}/10000,2)&"万元"'])
    for r in range(2, last + 4):
        ws.cell(r, 2).number_format = "#,##0.00"
    tmp = path.with_suffix(".tmp.xlsx")
    wb.save(tmp)
    os.replace(tmp, path)
    return path


def formula_paths(scale: int = 1) -> tuple[Path, Path]:
    """(bill-formulas.xlsx, bill-formulas-lo.xlsx): the openpyxl-written bill with formulas and no cached
    values, and LibreOffice's resave of it, which computed and stored every formula's value (the reference).
    ``scale`` divides every sheet's rows (the tests use a small bill: LibreOffice takes minutes on the full one
    on a loaded machine; bench/bench_extract.py --formulas uses the full 12,000 rows)."""
    d = Path(tempfile.gettempdir()) / f"tender-pool-formula-bill-v{FORMULA_VERSION}" / f"1-{scale}"
    d.mkdir(parents=True, exist_ok=True)
    raw, ref = d / "bill-formulas.xlsx", d / "bill-formulas-lo.xlsx"
    if raw.is_file() and ref.is_file():
        return raw, ref
    make_formula_xlsx(raw, [(title, rows // scale) for title, rows in SHEETS])
    work = Path(tempfile.mkdtemp(prefix="conv-", dir=d))
    src = work / "src"
    src.mkdir()
    shutil.copyfile(raw, src / "bill-formulas.xlsx")
    got = convert(src / "bill-formulas.xlsx", "xlsx:Calc MS Excel 2007 XML", work)
    os.replace(got, ref)
    shutil.rmtree(work, ignore_errors=True)
    return raw, ref
