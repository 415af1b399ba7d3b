package tenderpool.extract;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.poi.hpsf.SummaryInformation;
import org.apache.poi.hwpf.HWPFDocument;
import org.apache.poi.hwpf.converter.AbstractWordUtils;
import org.apache.poi.hwpf.model.FileInformationBlock;
import org.apache.poi.hwpf.model.GenericPropertyNode;
import org.apache.poi.hwpf.model.PicturesTable;
import org.apache.poi.hwpf.model.PlexOfCps;
import org.apache.poi.hwpf.model.StyleDescription;
import org.apache.poi.hwpf.model.StyleSheet;
import org.apache.poi.hwpf.model.SubdocumentType;
import org.apache.poi.hwpf.usermodel.CharacterRun;
import org.apache.poi.hwpf.usermodel.HWPFList;
import org.apache.poi.hwpf.usermodel.HeaderStories;
import org.apache.poi.hwpf.usermodel.Paragraph;
import org.apache.poi.hwpf.usermodel.Picture;
import org.apache.poi.hwpf.usermodel.Range;
import org.apache.poi.hwpf.usermodel.Section;
import org.apache.poi.hwpf.usermodel.Table;
import org.apache.poi.hwpf.usermodel.TableCell;
import org.apache.poi.hwpf.usermodel.TableRow;
import org.apache.poi.poifs.filesystem.POIFSFileSystem;

/**
 * Walks an HWPF document into para/table/image blocks. The body failing is fatal; headers, notes, text boxes
 * and pictures failing only add a warning, because a half-broken side story should not cost the body text.
 */
final class DocReader {
    private static final Pattern HEADING = Pattern.compile("(?:heading|标题|標題|überschrift|titre)\\s*(\\d)");

    private final HWPFDocument doc;
    private final List<String> blocks = new ArrayList<>();
    private final List<String> warnings = new ArrayList<>();
    private final Map<Integer, Integer> headingByStyle = new HashMap<>();
    private final AbstractWordUtils.NumberingState numbering = new AbstractWordUtils.NumberingState();
    private PicturesTable pictures;
    private List<Picture> allPictures;
    private final Set<Integer> claimedPictures = new HashSet<>();
    private boolean picturesBroken;

    private DocReader(HWPFDocument doc) {
        this.doc = doc;
    }

    static List<String> read(POIFSFileSystem fs) throws java.io.IOException {
        DocReader r = new DocReader(new HWPFDocument(fs.getRoot()));
        return r.run();
    }

    private List<String> run() {
        try {
            pictures = doc.getPicturesTable();
        } catch (RuntimeException e) {
            warn("pictures", e);
        }
        emitRange(doc.getRange(), "body", true);
        headersFooters();  // before the leftovers, so a header's own pictures are claimed as the header's
        leftoverPictures();
        side("footnote", () -> doc.getFootnoteRange());
        side("endnote", () -> doc.getEndnoteRange());
        side("comment", () -> doc.getCommentsRange());
        side("textbox", () -> doc.getMainTextboxRange());

        StringBuilder meta = Json.obj("meta");
        Json.field(meta, "format", "doc");
        Json.field(meta, "engine", "poi-hwpf");
        try {
            // Word stores hard page breaks and section breaks alike as U+000C in the main text
            String body = doc.getRange().text();
            int breaks = 0;
            for (int i = 0; i < body.length(); i++) if (body.charAt(i) == '\f') breaks++;
            Range range = doc.getRange();
            for (int i = 0, n = range.numParagraphs(); i < n; i++) if (range.getParagraph(i).pageBreakBefore()) breaks++;
            Json.field(meta, "page_breaks", breaks);
        } catch (RuntimeException e) {
            warn("page breaks", e);
        }
        try {
            SummaryInformation si = doc.getSummaryInformation();
            if (si != null) {
                if (si.getPageCount() > 0) Json.field(meta, "pages", si.getPageCount());
                if (si.getTitle() != null) Json.field(meta, "title", Text.clean(si.getTitle()));
                if (si.getAuthor() != null) Json.field(meta, "author", Text.clean(si.getAuthor()));
            }
        } catch (RuntimeException e) {
            warn("summary information", e);
        }
        Main.warnings(meta, warnings);
        List<String> out = new ArrayList<>(blocks.size() + 1);
        out.add(meta.append('}').toString());
        out.addAll(blocks);
        return out;
    }

    private void warn(String what, Throwable e) {
        warnings.add(what + ": " + Main.shortMessage(e));
    }

    private interface RangeSupplier { Range get(); }

    private void side(String story, RangeSupplier s) {
        try {
            Range r = s.get();
            if (r != null && r.getEndOffset() > r.getStartOffset()) emitRange(r, story, false);
        } catch (RuntimeException | StackOverflowError e) {
            warn(story, e);
        }
    }

    /** Top-level walk: a paragraph in a table stands for the whole table, the rest of whose paragraphs are skipped. */
    private void emitRange(Range r, String story, boolean withPictures) {
        int n = r.numParagraphs();
        List<Section> sections = story.equals("body") ? sections(r) : new ArrayList<>();
        int sec = 0;
        for (int i = 0; i < n; i++) {
            Paragraph p = r.getParagraph(i);
            while (sec < sections.size() && p.getStartOffset() >= sections.get(sec).getEndOffset()) {
                section(sections.get(sec++));
            }
            if (p.isInTable() && p.getTableLevel() > 0) {
                Table t = null;
                try {
                    t = r.getTable(p);
                } catch (RuntimeException e) {
                    warn("table at paragraph " + i, e);
                }
                if (t != null && t.numParagraphs() > 0) {
                    List<String> images = new ArrayList<>();
                    StringBuilder sb = Json.obj("table");
                    sb.append(",\"table\":");
                    table(sb, t, p.getTableLevel(), withPictures ? images : null);
                    if (!story.equals("body")) Json.field(sb, "story", story);
                    blocks.add(sb.append('}').toString());
                    blocks.addAll(images);
                    i += t.numParagraphs() - 1;
                    continue;
                }
            }
            para(p, story, withPictures);
        }
        while (sec < sections.size()) section(sections.get(sec++));
    }

    private List<Section> sections(Range r) {
        List<Section> out = new ArrayList<>();
        try {
            for (int i = 0, n = r.numSections(); i < n; i++) out.add(r.getSection(i));
        } catch (RuntimeException e) {
            warn("sections", e);
        }
        return out;
    }

    /** A body section's page geometry, after its content (the page estimate reads it; see blocks.Section). */
    private void section(Section s) {
        try {
            StringBuilder sb = Json.obj("section");
            Json.field(sb, "width", s.getPageWidth());
            Json.field(sb, "height", s.getPageHeight());
            Json.field(sb, "left", s.getMarginLeft());
            Json.field(sb, "right", s.getMarginRight());
            Json.field(sb, "top", Math.abs(s.getMarginTop()));
            Json.field(sb, "bottom", Math.abs(s.getMarginBottom()));
            Json.field(sb, "columns", Math.max(1, s.getNumColumns()));
            blocks.add(sb.append('}').toString());
        } catch (RuntimeException e) {
            warn("section", e);
        }
    }

    private void para(Paragraph p, String story, boolean withPictures) {
        String raw = p.text();
        String text = Text.clean(raw);
        if (!text.isEmpty()) {
            StringBuilder sb = Json.obj("para");
            Json.field(sb, "text", text);
            int h = heading(p);
            if (h > 0) Json.field(sb, "heading", h);
            if (p.isInList()) {
                String marker = listMarker(p);
                if (!marker.isEmpty()) Json.field(sb, "list_marker", marker);
                if (p.getIlvl() > 0) Json.field(sb, "list_level", p.getIlvl());
            }
            if (!story.equals("body")) Json.field(sb, "story", story);
            blocks.add(sb.append('}').toString());
        }
        if (withPictures) pictures(p, raw, blocks, story);
    }

    private int heading(Paragraph p) {
        return headingByStyle.computeIfAbsent((int) p.getStyleIndex(), idx -> {
            try {
                StyleSheet ss = doc.getStyleSheet();
                StyleDescription sd = ss == null ? null : ss.getStyleDescription(idx);
                String name = sd == null || sd.getName() == null ? "" : sd.getName().strip().toLowerCase(Locale.ROOT);
                Matcher m = HEADING.matcher(name);
                if (m.find()) return Math.max(1, Math.min(6, Integer.parseInt(m.group(1))));
                if (name.equals("title") || name.equals("标题")) return 1;
                if (name.equals("subtitle") || name.equals("副标题")) return 2;
            } catch (RuntimeException e) {
                // An unreadable style sheet only costs heading levels.
            }
            return 0;
        });
    }

    private String listMarker(Paragraph p) {
        try {
            HWPFList list = p.getList();
            if (list == null) return "";
            String s = AbstractWordUtils.getBulletText(numbering, list, (char) p.getIlvl());
            StringBuilder sb = new StringBuilder();
            for (char c : s.strip().toCharArray()) {
                // Symbol-font bullets are stored in the private use area; show them as a plain bullet.
                if (c >= 0xe000 && c <= 0xf8ff) sb.append('•');
                else if (c >= 0x20) sb.append(c);
            }
            return sb.toString().strip();
        } catch (RuntimeException e) {
            return "";
        }
    }

    /** Writes a Table object; level is the table's nesting level (1 = top). Nested tables go to Cell.table. */
    private void table(StringBuilder sb, Table t, int level, List<String> images) {
        sb.append("{\"rows\":[");
        Map<Integer, String> above = new HashMap<>();
        for (int rn = 0; rn < t.numRows(); rn++) {
            TableRow row = t.getRow(rn);
            if (rn > 0) sb.append(',');
            sb.append('[');
            Map<Integer, String> here = new HashMap<>();
            for (int cn = 0; cn < row.numCells(); cn++) {
                if (cn > 0) sb.append(',');
                cell(sb, row.getCell(cn), level, images, above, here);
            }
            above = here;
            sb.append(']');
        }
        sb.append("]}");
    }

    private void cell(StringBuilder sb, TableCell cell, int level, List<String> images, Map<Integer, String> above,
            Map<Integer, String> here) {
        StringBuilder text = new StringBuilder();
        StringBuilder nested = null;
        int n = cell.numParagraphs();
        for (int i = 0; i < n; i++) {
            Paragraph p = cell.getParagraph(i);
            if (p.getTableLevel() > level && nested == null) {
                try {
                    Table inner = cell.getTable(p);
                    nested = new StringBuilder();
                    table(nested, inner, p.getTableLevel(), images);
                    i += inner.numParagraphs() - 1;
                    continue;
                } catch (RuntimeException e) {
                    // POI cannot always delimit a nested table; its text then stays in the outer cell.
                    nested = null;
                }
            }
            String raw = p.text();
            String s = Text.clean(raw);
            if (!s.isEmpty()) {
                if (text.length() > 0) text.append('\n');
                text.append(s);
            }
            if (images != null) pictures(p, raw, images, "body");
        }
        sb.append('{');
        sb.append("\"text\":");
        Json.str(sb, text.toString());
        String vmerge = cell.isFirstVerticallyMerged() ? "start" : cell.isVerticallyMerged() ? "cont" : "";
        // POI 4.0.1 reports Word-written continuation cells as restarts too (table-merges.doc); a "restart"
        // that is empty and sits under a merged cell with the same left edge is a continuation.
        if (vmerge.equals("start") && text.length() == 0 && nested == null
                && !above.getOrDefault(cell.getLeftEdge(), "").isEmpty()) vmerge = "cont";
        here.put(cell.getLeftEdge(), vmerge);
        if (!vmerge.isEmpty()) sb.append(",\"vmerge\":\"").append(vmerge).append('"');
        sb.append(",\"left\":").append(cell.getLeftEdge());
        sb.append(",\"width\":").append(cell.getWidth());
        if (nested != null) sb.append(",\"table\":").append(nested);
        sb.append('}');
    }

    /** Inline pictures are found through their character run; floating ones (\u0008) take the next unclaimed picture. */
    private void pictures(Paragraph p, String raw, List<String> out, String story) {
        if (pictures == null || picturesBroken || (raw.indexOf('\u0001') < 0 && raw.indexOf('\u0008') < 0)) return;
        try {
            int runs = p.numCharacterRuns();
            for (int k = 0; k < runs; k++) {
                CharacterRun cr = p.getCharacterRun(k);
                if (pictures.hasPicture(cr)) {
                    Picture pic = pictures.extractPicture(cr, false);
                    if (pic != null && claimedPictures.add(pic.getStartOffset())) out.add(image(pic, story));
                } else if (cr.text().indexOf('\u0008') >= 0) {
                    Picture pic = nextUnclaimed();
                    if (pic != null) out.add(image(pic, story));
                }
            }
        } catch (RuntimeException e) {
            picturesBroken = true;
            warn("pictures", e);
        }
    }

    private Picture nextUnclaimed() {
        if (allPictures == null) allPictures = allPictures();
        for (Picture pic : allPictures) {
            if (claimedPictures.add(pic.getStartOffset())) return pic;
        }
        return null;
    }

    /**
     * PicturesTable.getAllPictures, the same list in the same order, without its cost: it decodes the properties
     * of every character run of the document to find the inline pictures (runs holding exactly U+0001), ~15 % of
     * a 130-page .doc's time in the JVM. Only runs whose text has a U+0001 can hold one, so only those are
     * decoded; the drawing layer's pictures follow, found as POI does (its search is private). Another POI's
     * internals, or any surprise: POI's own method.
     */
    private List<Picture> allPictures() {
        try {
            StringBuilder text = doc.getText();
            int len = text.length();
            int[] marks = new int[8];
            int count = 0;
            for (int at = text.indexOf("\u0001"); at >= 0; at = text.indexOf("\u0001", at + 1)) {
                if (count == marks.length) marks = java.util.Arrays.copyOf(marks, count * 2);
                marks[count++] = at;
            }
            List<Picture> out = new ArrayList<>();
            if (count > 0) {
                for (org.apache.poi.hwpf.model.CHPX chpx : doc.getCharacterTable().getTextRuns()) {
                    int start = Math.max(0, chpx.getStart());
                    int end = Math.min(len, chpx.getEnd());
                    int k = java.util.Arrays.binarySearch(marks, 0, count, start);
                    if (k < 0) k = -k - 1;
                    if (end <= start || k >= count || marks[k] >= end) continue;
                    CharacterRun run = new Range(start, end, doc).getCharacterRun(0);
                    Picture pic = run == null ? null : pictures.extractPicture(run, false);
                    if (pic != null) out.add(pic);
                }
            }
            java.lang.reflect.Field dgg = PicturesTable.class.getDeclaredField("_dgg");
            dgg.setAccessible(true);
            java.lang.reflect.Method search = PicturesTable.class.getDeclaredMethod("searchForPictures",
                    List.class, List.class);
            search.setAccessible(true);
            search.invoke(pictures, ((org.apache.poi.hwpf.model.EscherRecordHolder) dgg.get(pictures))
                    .getEscherRecords(), out);
            return out;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return pictures.getAllPictures();
        }
    }

    private void leftoverPictures() {
        if (pictures == null || picturesBroken) return;
        try {
            Picture pic;
            while ((pic = nextUnclaimed()) != null) blocks.add(image(pic, "body"));
        } catch (RuntimeException e) {
            warn("pictures", e);
        }
    }

    private static String image(Picture pic, String story) {
        StringBuilder sb = Json.obj("image");
        if (!story.equals("body")) Json.field(sb, "story", story);
        String ext = "";
        try {
            ext = pic.suggestFileExtension();
        } catch (RuntimeException e) {
            // unknown type stays ""
        }
        Json.field(sb, "type", ext == null ? "" : ext);
        // Displayed size: dxaGoal/dyaGoal are twips, 15 twips per pixel at 96 dpi.
        int w = 0, h = 0;
        try {
            w = pic.getDxaGoal() / 15;
            h = pic.getDyaGoal() / 15;
        } catch (RuntimeException e) {
            // floating (Escher) pictures carry no PICF, hence no stored size
        }
        if (w > 0 && h > 0) {
            Json.field(sb, "width", w);
            Json.field(sb, "height", h);
        }
        return sb.append('}').toString();
    }

    /**
     * HeaderStories only exposes the first section's stories; tender documents change headers per section, so
     * walk the whole PlcfHdd: 6 separator stories, then per section even/odd header, even/odd footer, first
     * header/footer. Identical texts are printed once.
     */
    private void headersFooters() {
        try {
            FileInformationBlock fib = doc.getFileInformationBlock();
            int hdrLen = fib.getSubdocumentTextStreamLength(SubdocumentType.HEADER);
            if (hdrLen <= 0) return;
            int base = fib.getSubdocumentTextStreamLength(SubdocumentType.MAIN)
                    + fib.getSubdocumentTextStreamLength(SubdocumentType.FOOTNOTE);
            PlexOfCps plex = new PlexOfCps(doc.getTableStream(), fib.getPlcfHddOffset(), fib.getPlcfHddSize(), 0);
            Set<String> seen = new LinkedHashSet<>();
            for (int i = 6; i < plex.length(); i++) {
                GenericPropertyNode node = plex.getProperty(i);
                int start = base + node.getStart(), end = base + Math.min(node.getEnd(), hdrLen);
                if (end <= start) continue;
                int k = (i - 6) % 6;
                String story = (k == 0 || k == 1 || k == 4) ? "header" : "footer";
                Range r = new Range(start, end, doc);
                int n = r.numParagraphs();
                for (int j = 0; j < n; j++) {
                    Paragraph p = r.getParagraph(j);
                    String raw = p.text();
                    String s = Text.clean(raw);
                    if (!s.isEmpty() && seen.add(story + "\u0000" + s)) {
                        StringBuilder sb = Json.obj("para");
                        Json.field(sb, "text", s);
                        Json.field(sb, "story", story);
                        blocks.add(sb.append('}').toString());
                    }
                    // a logo repeated in every section's header is one picture (claimed once by its offset)
                    pictures(p, raw, blocks, story);
                }
            }
        } catch (RuntimeException | StackOverflowError e) {
            warn("headers/footers", e);
            firstSectionHeaders();
        }
    }

    private void firstSectionHeaders() {
        try {
            HeaderStories hs = new HeaderStories(doc);
            String[][] all = {
                {"header", hs.getFirstHeader()}, {"header", hs.getOddHeader()}, {"header", hs.getEvenHeader()},
                {"footer", hs.getFirstFooter()}, {"footer", hs.getOddFooter()}, {"footer", hs.getEvenFooter()}};
            Set<String> seen = new HashSet<>();
            for (String[] e : all) {
                if (e[1] == null) continue;
                for (String line : e[1].split("\r")) {
                    String s = Text.clean(line);
                    if (s.isEmpty() || !seen.add(e[0] + "\u0000" + s)) continue;
                    StringBuilder sb = Json.obj("para");
                    Json.field(sb, "text", s);
                    Json.field(sb, "story", e[0]);
                    blocks.add(sb.append('}').toString());
                }
            }
        } catch (RuntimeException e) {
            warn("headers/footers (first section)", e);
        }
    }
}
