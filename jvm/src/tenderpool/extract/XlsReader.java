package tenderpool.extract;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.poi.hpsf.SummaryInformation;
import org.apache.poi.hssf.usermodel.HSSFCell;
import org.apache.poi.hssf.usermodel.HSSFClientAnchor;
import org.apache.poi.hssf.usermodel.HSSFPatriarch;
import org.apache.poi.hssf.usermodel.HSSFPicture;
import org.apache.poi.hssf.usermodel.HSSFPictureData;
import org.apache.poi.hssf.usermodel.HSSFPrintSetup;
import org.apache.poi.hssf.usermodel.HSSFRow;
import org.apache.poi.hssf.usermodel.HSSFShape;
import org.apache.poi.hssf.usermodel.HSSFShapeContainer;
import org.apache.poi.hssf.usermodel.HSSFSheet;
import org.apache.poi.hssf.usermodel.HSSFWorkbook;
import org.apache.poi.hssf.usermodel.HeaderFooter;
import org.apache.poi.ss.formula.eval.ErrorEval;
import org.apache.poi.ss.usermodel.CellType;
import org.apache.poi.ss.usermodel.DataFormatter;
import org.apache.poi.ss.usermodel.DateUtil;
import org.apache.poi.ss.usermodel.Sheet;
import org.apache.poi.ss.util.CellRangeAddress;
import org.apache.poi.ss.util.NumberToTextConverter;
import org.apache.poi.poifs.filesystem.POIFSFileSystem;

/**
 * Reads every sheet's displayed values through HSSF's usermodel. Formulas are never evaluated: the cached
 * result is what Excel showed when the file was saved, and evaluation of hostile formulas is a DoS vector.
 */
final class XlsReader {
    private final HSSFWorkbook wb;
    private final DataFormatter fmt = new DataFormatter(Locale.US);
    private final List<String> warnings = new ArrayList<>();
    private final List<String> blocks = new ArrayList<>();
    private final Map<String, String> formats = new HashMap<>();

    private XlsReader(HSSFWorkbook wb) {
        this.wb = wb;
    }

    static List<String> read(POIFSFileSystem fs) throws java.io.IOException {
        return new XlsReader(new HSSFWorkbook(fs.getRoot(), false)).run();
    }

    private List<String> run() {
        for (int i = 0; i < wb.getNumberOfSheets(); i++) sheet(i);
        StringBuilder meta = Json.obj("meta");
        Json.field(meta, "format", "xls");
        Json.field(meta, "engine", "poi-hssf");
        try {
            SummaryInformation si = wb.getSummaryInformation();
            if (si != null) {
                if (si.getPageCount() > 0) Json.field(meta, "pages", si.getPageCount());
                if (si.getTitle() != null) Json.field(meta, "title", Text.clean(si.getTitle()));
                if (si.getAuthor() != null) Json.field(meta, "author", Text.clean(si.getAuthor()));
            }
        } catch (RuntimeException e) {
            warnings.add("summary information: " + Main.shortMessage(e));
        }
        Main.warnings(meta, warnings);
        List<String> out = new ArrayList<>(blocks.size() + 1);
        out.add(meta.append('}').toString());
        out.addAll(blocks);
        return out;
    }

    private void sheet(int index) {
        HSSFSheet sheet = wb.getSheetAt(index);
        String name = wb.getSheetName(index);
        StringBuilder sb = Json.obj("sheet");
        Json.field(sb, "name", name == null ? "" : name);
        sb.append(",\"cells\":[");
        boolean first = true;
        int maxCol = -1;
        for (org.apache.poi.ss.usermodel.Row r : sheet) {
            HSSFRow row = (HSSFRow) r;
            for (org.apache.poi.ss.usermodel.Cell c : row) {
                HSSFCell cell = (HSSFCell) c;
                String[] vt = value(cell);
                if (vt == null || vt[0].strip().isEmpty()) continue;
                maxCol = Math.max(maxCol, cell.getColumnIndex());
                if (!first) sb.append(',');
                first = false;
                sb.append("{\"r\":").append(cell.getRowIndex()).append(",\"c\":").append(cell.getColumnIndex());
                sb.append(",\"v\":");
                Json.str(sb, vt[0]);
                if (!vt[1].equals("string")) sb.append(",\"type\":\"").append(vt[1]).append('"');
                if (vt[1].equals("string") && cell.getCellStyle().getWrapText()) sb.append(",\"wrap\":true");
                sb.append('}');
            }
        }
        sb.append("],\"merges\":[");
        int merges = sheet.getNumMergedRegions();
        for (int m = 0; m < merges; m++) {
            CellRangeAddress a = sheet.getMergedRegion(m);
            if (m > 0) sb.append(',');
            sb.append('[').append(a.getFirstRow()).append(',').append(a.getFirstColumn()).append(',')
                    .append(a.getLastRow()).append(',').append(a.getLastColumn()).append(']');
        }
        sb.append(']');
        if (wb.isSheetHidden(index) || wb.isSheetVeryHidden(index)) sb.append(",\"hidden\":true");
        try {
            setup(sb, sheet, index, maxCol);
        } catch (RuntimeException e) {
            warnings.add("page setup of " + name + ": " + Main.shortMessage(e));
        }
        try {
            String h = headerFooter(sheet.getHeader(), name);
            String f = headerFooter(sheet.getFooter(), name);
            if (!h.isEmpty()) Json.field(sb, "header", h);
            if (!f.isEmpty()) Json.field(sb, "footer", f);
        } catch (RuntimeException e) {
            warnings.add("header/footer of " + name + ": " + Main.shortMessage(e));
        }
        blocks.add(sb.append('}').toString());
        images(sheet, name);
    }

    /** Returns {displayed value, type}, or null for blank cells. */
    private String[] value(HSSFCell cell) {
        CellType t = cell.getCellType();
        try {
            switch (t) {
                case STRING:
                    return new String[] {Text.cleanCell(cell.getRichStringCellValue().getString()), "string"};
                case NUMERIC: {
                    short idx = cell.getCellStyle().getDataFormat();
                    String f = cell.getCellStyle().getDataFormatString();
                    return new String[] {number(cell.getNumericCellValue(), idx, f),
                            DateUtil.isADateFormat(idx, f) ? "date" : "number"};
                }
                case BOOLEAN:
                    return new String[] {cell.getBooleanCellValue() ? "TRUE" : "FALSE", "bool"};
                case ERROR:
                    return new String[] {ErrorEval.getText(cell.getErrorCellValue()), "error"};
                case FORMULA:
                    return new String[] {cached(cell), "formula"};
                default:
                    return null;
            }
        } catch (RuntimeException | StackOverflowError e) {
            // A number format POI cannot parse (deep regex recursion is a known one) must not cost the sheet.
            if (t == CellType.NUMERIC) return new String[] {NumberToTextConverter.toText(cell.getNumericCellValue()), "number"};
            return null;
        }
    }

    private String cached(HSSFCell cell) {
        switch (cell.getCachedFormulaResultType()) {
            case NUMERIC: {
                double d = cell.getNumericCellValue();
                try {
                    return number(d, cell.getCellStyle().getDataFormat(), cell.getCellStyle().getDataFormatString());
                } catch (RuntimeException | StackOverflowError e) {
                    return NumberToTextConverter.toText(d);
                }
            }
            case STRING:
                return Text.cleanCell(cell.getRichStringCellValue().getString());
            case BOOLEAN:
                return cell.getBooleanCellValue() ? "TRUE" : "FALSE";
            case ERROR:
                return ErrorEval.getText(cell.getErrorCellValue());
            default:
                return "";
        }
    }

    /**
     * A number as LibreOffice shows it (the reference renderer for what a reader sees):
     * General prints up to 15 significant digits (POI's DataFormatter stops at about 10); built-in formats
     * 14 and 22 are the locale's short date, which LibreOffice shows with a four-digit year; fill characters
     * ({@code *x}) are dropped, and a digit-less section such as accounting's zero {@code "-"??} loses its
     * {@code ?} padding, which POI would otherwise print as a stray 0.
     */
    private String number(double d, short idx, String f) {
        if (idx == 14) f = "m/d/yyyy";
        else if (idx == 22) f = "m/d/yyyy h:mm";
        if (f == null || f.isEmpty() || f.equalsIgnoreCase("General")) return NumberToTextConverter.toText(d);
        String g = formats.computeIfAbsent(f, XlsReader::displayFormat);
        return fmt.formatRawCellContents(d, idx, g);
    }

    static String displayFormat(String f) {
        StringBuilder out = new StringBuilder(f.length());
        StringBuilder section = new StringBuilder();
        boolean digits = false;
        for (int i = 0; i < f.length(); i++) {
            char c = f.charAt(i);
            if (c == '"') {
                int j = f.indexOf('"', i + 1);
                if (j < 0) j = f.length() - 1;
                section.append(f, i, j + 1);
                i = j;
            } else if (c == '\\' || c == '_') {
                if (i + 1 < f.length()) section.append(c).append(f.charAt(++i));
            } else if (c == '[') {
                int j = f.indexOf(']', i + 1);
                if (j < 0) j = f.length() - 1;
                section.append(f, i, j + 1);
                i = j;
            } else if (c == '*') {
                i++;  // fill: LibreOffice's text export does not repeat the character
            } else if (c == ';') {
                out.append(digits ? section : section.toString().replace("?", "")).append(';');
                section.setLength(0);
                digits = false;
            } else {
                if (c == '0' || c == '#') digits = true;
                section.append(c);
            }
        }
        out.append(digits ? section : section.toString().replace("?", ""));
        return out.toString();
    }

    /** Print settings, column widths and non-default row heights: pages.py paginates the sheet from them. */
    private void setup(StringBuilder sb, HSSFSheet sheet, int index, int maxCol) {
        HSSFPrintSetup ps = sheet.getPrintSetup();
        StringBuilder s = new StringBuilder("{");
        num(s, "paper", ps.getPaperSize());
        // POI names the BIFF fNoPls bit "validSettings": set means paper, scale and orientation were never set
        if (ps.getValidSettings()) s.append("\"valid\":false,");
        if (ps.getLandscape()) s.append("\"landscape\":true,");
        num(s, "scale", ps.getScale());
        if (fitToPage(sheet)) s.append("\"fit\":true,");
        num(s, "fit_width", ps.getFitWidth());
        num(s, "fit_height", ps.getFitHeight());
        s.append("\"margins\":[").append(sheet.getMargin(Sheet.LeftMargin)).append(',')
                .append(sheet.getMargin(Sheet.RightMargin)).append(',').append(sheet.getMargin(Sheet.TopMargin))
                .append(',').append(sheet.getMargin(Sheet.BottomMargin)).append("],");
        String area = null;
        try {
            area = wb.getPrintArea(index);
        } catch (RuntimeException e) {
            // POI needs a COUNTRY record to resolve defined names; without one the used range is printed
        }
        if (area != null && !area.isEmpty()) {
            s.append("\"areas\":[");
            boolean firstArea = true;
            for (String part : area.split(",")) {
                String ref = part.substring(part.lastIndexOf('!') + 1).replace("$", "").strip();
                try {
                    CellRangeAddress a = ref.contains(":") ? CellRangeAddress.valueOf(ref)
                            : CellRangeAddress.valueOf(ref + ":" + ref);
                    if (!firstArea) s.append(',');
                    firstArea = false;
                    s.append('[').append(a.getFirstRow()).append(',').append(a.getFirstColumn()).append(',')
                            .append(a.getLastRow()).append(',').append(a.getLastColumn()).append(']');
                } catch (RuntimeException e) {
                    // a print area naming a deleted range (#REF!): the used range is printed instead
                }
            }
            s.append("],");
        }
        CellRangeAddress rep = null;
        try {
            rep = sheet.getRepeatingRows();
        } catch (RuntimeException e) {
            // same name-table failure as above
        }
        if (rep != null && rep.getFirstRow() >= 0) num(s, "repeat_rows", rep.getLastRow() - rep.getFirstRow() + 1);
        s.append("\"default_width\":").append(sheet.getDefaultColumnWidth()).append(',');
        s.append("\"default_height\":").append(sheet.getDefaultRowHeightInPoints()).append(',');
        int standard = org.apache.poi.hssf.usermodel.SheetAccess.standardWidth(sheet);
        if (standard > 0) s.append("\"standard_width\":").append(standard / 256.0).append(',');
        if (wb.getNumberOfFontsAsInt() > 0) {  // the first FONT record: the workbook's default font
            org.apache.poi.hssf.usermodel.HSSFFont font = wb.getFontAt(0);
            s.append("\"font\":");
            Json.str(s, font.getFontName() == null ? "" : font.getFontName());
            s.append(",\"font_pt\":").append(font.getFontHeight() / 20.0).append(',');
        }
        s.append("\"widths\":[");
        for (int c = 0; c <= Math.min(maxCol, 255); c++) {
            if (c > 0) s.append(',');
            s.append(sheet.isColumnHidden(c) ? 0.0 : sheet.getColumnWidth(c) / 256.0);
        }
        s.append("],\"heights\":[");
        short def = sheet.getDefaultRowHeight();
        boolean firstRow = true;
        for (org.apache.poi.ss.usermodel.Row r : sheet) {
            HSSFRow row = (HSSFRow) r;
            short h = row.getZeroHeight() ? 0 : row.getHeight();
            // fUnsynced (POI: "bad font height"): the height was set by hand and is not refitted to the content
            boolean manual = h == 0 || org.apache.poi.hssf.usermodel.RowAccess.manualHeight(row);
            if (h == def && !manual) continue;
            if (!firstRow) s.append(',');
            firstRow = false;
            s.append('[').append(row.getRowNum()).append(',').append(h / 20.0).append(manual ? "]" : ",0]");
        }
        s.append("],\"row_breaks\":[");
        int[] rb = sheet.getRowBreaks();
        for (int i = 0; i < rb.length; i++) s.append(i > 0 ? "," : "").append(rb[i]);
        s.append("],\"col_breaks\":[");
        int[] cb = sheet.getColumnBreaks();
        for (int i = 0; i < cb.length; i++) s.append(i > 0 ? "," : "").append(cb[i]);
        s.append("]}");
        sb.append(",\"setup\":").append(s);
    }

    /**
     * WSBOOL's fFitToPage. POI 4.0.1 reads the record's two bytes swapped, so its getFitToPage() reports
     * fShowAutoBreaks and its getAutobreaks() reports fFitToPage; a sheet without the record is not fitted.
     */
    private static boolean fitToPage(HSSFSheet sheet) {
        try {
            return sheet.getAutobreaks();
        } catch (RuntimeException e) {
            return false;
        }
    }

    private static void num(StringBuilder s, String name, long v) {
        s.append('"').append(name).append("\":").append(v).append(',');
    }

    private static String headerFooter(HeaderFooter hf, String sheetName) {
        if (hf == null) return "";
        StringBuilder sb = new StringBuilder();
        for (String part : new String[] {hf.getLeft(), hf.getCenter(), hf.getRight()}) {
            if (part == null || part.isEmpty()) continue;
            String s = part.replace("&&", "\u0000").replace("&P", "{PAGE}").replace("&N", "{NUMPAGES}")
                    .replace("&A", sheetName == null ? "" : sheetName).replace("&D", "{DATE}").replace("&T", "{TIME}");
            s = org.apache.poi.hssf.usermodel.HeaderFooter.stripFields(s).replace("\u0000", "&");
            s = Text.cleanCell(s).strip();
            if (s.isEmpty()) continue;
            if (sb.length() > 0) sb.append(' ');
            sb.append(s);
        }
        return sb.toString();
    }

    private void images(HSSFSheet sheet, String name) {
        try {
            HSSFPatriarch p = sheet.getDrawingPatriarch();
            if (p != null) shapes(p, name);
        } catch (RuntimeException | StackOverflowError e) {
            warnings.add("pictures of " + name + ": " + Main.shortMessage(e));
        }
    }

    private void shapes(HSSFShapeContainer container, String name) {
        for (HSSFShape s : container.getChildren()) {
            if (s instanceof HSSFShapeContainer) {
                shapes((HSSFShapeContainer) s, name);
            } else if (s instanceof HSSFPicture) {
                HSSFPicture pic = (HSSFPicture) s;
                StringBuilder sb = Json.obj("image");
                String ext = "";
                try {
                    HSSFPictureData data = pic.getPictureData();
                    if (data != null) ext = data.suggestFileExtension();
                } catch (RuntimeException e) {
                    // picture bytes missing from the drawing group: keep the anchor anyway
                }
                Json.field(sb, "type", ext == null ? "" : ext);
                Json.field(sb, "sheet", name == null ? "" : name);
                if (pic.getAnchor() instanceof HSSFClientAnchor) {
                    HSSFClientAnchor a = (HSSFClientAnchor) pic.getAnchor();
                    Json.field(sb, "row", a.getRow1());
                    Json.field(sb, "col", a.getCol1());
                    // the far corner: the page estimate counts every page the picture crosses
                    Json.field(sb, "row2", Math.max(a.getRow1(), a.getRow2()));
                    Json.field(sb, "col2", Math.max(a.getCol1(), a.getCol2()));
                }
                blocks.add(sb.append('}').toString());
            }
        }
    }
}
