package tenderpool.extract;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.apache.poi.hpsf.SummaryInformation;
import org.apache.poi.hssf.usermodel.HSSFCell;
import org.apache.poi.hssf.usermodel.HSSFClientAnchor;
import org.apache.poi.hssf.usermodel.HSSFPatriarch;
import org.apache.poi.hssf.usermodel.HSSFPicture;
import org.apache.poi.hssf.usermodel.HSSFPictureData;
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
        for (org.apache.poi.ss.usermodel.Row r : sheet) {
            HSSFRow row = (HSSFRow) r;
            for (org.apache.poi.ss.usermodel.Cell c : row) {
                HSSFCell cell = (HSSFCell) c;
                String[] vt = value(cell);
                if (vt == null || vt[0].strip().isEmpty()) continue;
                if (!first) sb.append(',');
                first = false;
                sb.append("{\"r\":").append(cell.getRowIndex()).append(",\"c\":").append(cell.getColumnIndex());
                sb.append(",\"v\":");
                Json.str(sb, vt[0]);
                if (!vt[1].equals("string")) sb.append(",\"type\":\"").append(vt[1]).append('"');
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
                case NUMERIC:
                    return new String[] {fmt.formatCellValue(cell), DateUtil.isCellDateFormatted(cell) ? "date" : "number"};
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
                String f = cell.getCellStyle().getDataFormatString();
                try {
                    return fmt.formatRawCellContents(d, cell.getCellStyle().getDataFormat(), f == null ? "General" : f);
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
                }
                blocks.add(sb.append('}').toString());
            }
        }
    }
}
