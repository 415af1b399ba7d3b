package tenderpool.extract;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

import org.apache.poi.poifs.filesystem.DirectoryEntry;
import org.apache.poi.poifs.filesystem.DirectoryNode;
import org.apache.poi.poifs.filesystem.DocumentEntry;
import org.apache.poi.poifs.filesystem.DocumentInputStream;
import org.apache.poi.poifs.filesystem.Entry;
import org.apache.poi.poifs.filesystem.EntryUtils;
import org.apache.poi.poifs.filesystem.POIFSFileSystem;

/**
 * Decides what a file really is from its bytes: portals serve RTF, OOXML and HTML under .doc/.xls names, and
 * the requested mode is only a hint. Also repairs lower-case OLE stream names, which POI looks up
 * case-sensitively but Word and LibreOffice accept (47950_lower.doc).
 */
final class Sniff {
    private Sniff() {}

    enum Kind { EMPTY, OLE, RAW_BIFF, WORD2, RTF, OOXML, HTML, UNKNOWN }

    static Kind kindOf(File f) throws IOException {
        byte[] head = new byte[512];
        int n;
        try (InputStream in = new FileInputStream(f)) {
            n = in.readNBytes(head, 0, head.length);
        }
        if (n == 0) return Kind.EMPTY;
        if (n >= 8 && (head[0] & 0xff) == 0xd0 && (head[1] & 0xff) == 0xcf && (head[2] & 0xff) == 0x11
                && (head[3] & 0xff) == 0xe0) return Kind.OLE;
        if (n >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4) return Kind.OOXML;
        if (n >= 2 && (head[0] & 0xff) == 0xdb && (head[1] & 0xff) == 0xa5) return Kind.WORD2;
        // A bare BIFF2-5 stream without OLE wrapper starts with a BOF record: 09 00 / 09 02 / 09 04 / 09 08.
        if (n >= 4 && head[0] == 0x09 && (head[1] == 0x00 || head[1] == 0x02 || head[1] == 0x04 || head[1] == 0x08))
            return Kind.RAW_BIFF;
        String text = new String(head, 0, n, StandardCharsets.ISO_8859_1).stripLeading();
        if (text.startsWith("\u00ef\u00bb\u00bf")) text = text.substring(3).stripLeading();
        if (text.startsWith("{\\rtf")) return Kind.RTF;
        String lower = text.toLowerCase(Locale.ROOT);
        if (lower.startsWith("<") || lower.startsWith("mime-version")) return Kind.HTML;
        return Kind.UNKNOWN;
    }

    /** Which stream the OLE root holds: "doc", "xls", "encrypted-ooxml" or null, matched case-insensitively. */
    static String oleFormat(DirectoryNode root) {
        boolean doc = false, xls = false, enc = false;
        for (Entry e : root) {
            String name = e.getName().toLowerCase(Locale.ROOT);
            if (name.equals("worddocument")) doc = true;
            else if (name.equals("workbook") || name.equals("book")) xls = true;
            else if (name.equals("encryptedpackage")) enc = true;
        }
        if (doc) return "doc";
        if (xls) return "xls";
        if (enc) return "encrypted-ooxml";
        return null;
    }

    private static final Map<String, String> CANONICAL = new HashMap<>();
    static {
        for (String s : new String[] {"WordDocument", "1Table", "0Table", "Data", "ObjectPool", "Workbook", "Book",
                "\u0005SummaryInformation", "\u0005DocumentSummaryInformation"}) {
            CANONICAL.put(s.toLowerCase(Locale.ROOT), s);
        }
    }

    /**
     * Returns fs itself when every well-known stream already has its canonical name, else an in-memory copy
     * with the names fixed.
     */
    static POIFSFileSystem canonicalNames(POIFSFileSystem fs) throws IOException {
        boolean needed = false;
        for (Entry e : fs.getRoot()) {
            String c = CANONICAL.get(e.getName().toLowerCase(Locale.ROOT));
            if (c != null && !c.equals(e.getName())) needed = true;
        }
        if (!needed) return fs;
        POIFSFileSystem copy = new POIFSFileSystem();
        for (Entry e : fs.getRoot()) {
            String c = CANONICAL.getOrDefault(e.getName().toLowerCase(Locale.ROOT), e.getName());
            if (e instanceof DocumentEntry) {
                try (DocumentInputStream in = new DocumentInputStream((DocumentEntry) e)) {
                    copy.createDocument(in, c);
                }
            } else if (e instanceof DirectoryEntry) {
                DirectoryEntry target = copy.getRoot().createDirectory(c);
                for (Entry child : (DirectoryEntry) e) EntryUtils.copyNodeRecursively(child, target);
            }
        }
        return copy;
    }
}
