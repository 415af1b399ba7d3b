package tenderpool.extract;

import java.io.File;
import java.util.ArrayList;
import java.util.List;

import org.apache.poi.hssf.extractor.OldExcelExtractor;
import org.apache.poi.hwpf.HWPFOldDocument;
import org.apache.poi.hwpf.extractor.Word6Extractor;
import org.apache.poi.poifs.filesystem.POIFSFileSystem;

/**
 * Word 6/95 and BIFF2-5 files: POI only has plain-text extractors for them, so they come out as paragraphs and
 * as one single-column sheet. Any failure here is reported as old-format, not corrupt: the file is most likely
 * fine, we just cannot read that generation.
 */
final class OldReaders {
    private OldReaders() {}

    static List<String> doc(POIFSFileSystem fs) {
        try {
            Word6Extractor ex = new Word6Extractor(new HWPFOldDocument(fs.getRoot()));
            List<String> out = new ArrayList<>();
            out.add(meta("doc", "poi-hwpf-old"));
            for (String p : ex.getParagraphText()) {
                String s = Text.clean(p);
                if (s.isEmpty()) continue;
                StringBuilder sb = Json.obj("para");
                Json.field(sb, "text", s);
                out.add(sb.append('}').toString());
            }
            return out;
        } catch (Exception | StackOverflowError e) {
            throw new Main.ExtractFailure("old-format", "Word 6/95 document, old-format reader failed: " + Main.shortMessage(e));
        }
    }

    static List<String> xls(POIFSFileSystem fs, File file) {
        OldExcelExtractor ex = null;
        try {
            ex = fs != null ? new OldExcelExtractor(fs) : new OldExcelExtractor(file);
            String text = ex.getText();
            int biff = ex.getBiffVersion();
            List<String> out = new ArrayList<>();
            out.add(meta("xls", "poi-hssf-old"));
            StringBuilder sb = Json.obj("sheet");
            Json.field(sb, "name", "BIFF" + biff);
            sb.append(",\"cells\":[");
            int r = 0;
            boolean first = true;
            for (String line : text.split("\n")) {
                String s = Text.cleanCell(line).strip();
                if (s.isEmpty()) continue;
                if (!first) sb.append(',');
                first = false;
                sb.append("{\"r\":").append(r++).append(",\"c\":0,\"v\":");
                Json.str(sb, s);
                sb.append('}');
            }
            sb.append("]}");
            out.add(sb.toString());
            return out;
        } catch (Exception | StackOverflowError e) {
            throw new Main.ExtractFailure("old-format", "Excel 5/95 or older workbook, old-format reader failed: " + Main.shortMessage(e));
        } finally {
            if (ex != null) {
                try {
                    ex.close();
                } catch (Exception ignored) {
                    // read-only input
                }
            }
        }
    }

    private static String meta(String format, String engine) {
        StringBuilder sb = Json.obj("meta");
        Json.field(sb, "format", format);
        Json.field(sb, "engine", engine);
        return sb.append('}').toString();
    }
}
