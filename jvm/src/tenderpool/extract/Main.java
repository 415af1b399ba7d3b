package tenderpool.extract;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileNotFoundException;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import org.apache.poi.EmptyFileException;
import org.apache.poi.EncryptedDocumentException;
import org.apache.poi.OldFileFormatException;
import org.apache.poi.hssf.OldExcelFormatException;
import org.apache.poi.hwpf.OldWordFileFormatException;
import org.apache.poi.poifs.filesystem.POIFSFileSystem;
import org.apache.poi.util.IOUtils;

/**
 * tender-extract: legacy .doc/.xls to JSON block lines (the shapes of extract/blocks.py), one process per
 * document or a warm "serve" loop. Every document ends with {"t":"end"}; a failure is one {"t":"error"} line
 * before it. Exit codes: 0 ok, 3 typed extraction error, 4 fatal JVM error in serve mode, 2 usage.
 * stdout carries only JSON: System.out is pointed at stderr so nothing POI prints can corrupt the stream.
 */
public final class Main {
    /** A failure with a contract kind (extract.blocks.Failure.kind). */
    static final class ExtractFailure extends RuntimeException {
        final String kind;

        ExtractFailure(String kind, String message) {
            super(message, null, false, false);
            this.kind = kind;
        }
    }

    private static PrintStream out;

    public static void main(String[] args) {
        out = new PrintStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false,
                StandardCharsets.UTF_8);
        System.setOut(System.err);
        // Cap any single record allocation; POI's own per-record limits are lower, so this only bounds the
        // generic safelyAllocate paths to a quarter of the heap.
        IOUtils.setByteArrayMaxOverride((int) Math.min(Integer.MAX_VALUE - 16, Runtime.getRuntime().maxMemory() / 4));
        if (args.length == 0) usage();
        switch (args[0]) {
            case "doc":
            case "xls":
                if (args.length != 2) usage();
                int rc = one(args[0], args[1]);
                out.flush();
                System.exit(rc);
                break;
            case "serve":
                serve(args.length >= 3 && args[1].equals("--idle") ? Long.parseLong(args[2]) : 0);
                break;
            case "spin":
                spin();
                break;
            default:
                usage();
        }
    }

    private static void usage() {
        System.err.println("usage: tender-extract doc FILE | xls FILE | serve [--idle SECONDS]");
        System.exit(2);
    }

    /** Test-only: a CPU loop that never returns, standing in for a POI infinite loop. */
    private static void spin() {
        long x = 0;
        while (x >= 0) x = (x + 1) & 0x7fffffffffffffffL;
    }

    private static volatile long lastActivity = System.nanoTime();
    private static long serveReady;
    private static volatile boolean busy;

    /**
     * One request per stdin line: {"mode":"doc"|"xls","path":"..."}; answers are the document's lines then end.
     * Exits 0 on EOF or after idleSeconds without a request (0 = never), 4 after an Error the JVM cannot
     * trust itself to survive.
     */
    private static void serve(long idleSeconds) {
        if (idleSeconds > 0) {
            Thread t = new Thread(() -> {
                while (true) {
                    try {
                        Thread.sleep(Math.min(1000, idleSeconds * 1000));
                    } catch (InterruptedException e) {
                        return;
                    }
                    if (!busy && System.nanoTime() - lastActivity > idleSeconds * 1_000_000_000L) {
                        out.flush();
                        System.exit(0);
                    }
                }
            }, "idle-exit");
            t.setDaemon(true);
            t.start();
        }
        serveReady = System.currentTimeMillis();
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                busy = true;
                if (!line.isBlank()) request(line);
                out.flush();
                giveBackMemory();
                lastActivity = System.nanoTime();
                busy = false;
            }
        } catch (java.io.IOException e) {
            System.exit(0);
        }
        out.flush();
        System.exit(0);
    }

    /** Heap committed beyond which a finished document is followed by a full collection (answer already sent). */
    private static final long GIVE_BACK_ABOVE = 48L << 20;

    /**
     * After a large document the heap stays committed (SerialGC shrinks it only in a full collection, down to
     * MaxHeapFreeRatio), so a warm JVM that once read a big workbook would keep its peak RSS for good. One
     * System.gc() after such a document returns it; small documents never pay for it.
     */
    private static void giveBackMemory() {
        if (Runtime.getRuntime().totalMemory() > GIVE_BACK_ABOVE) System.gc();
    }

    private static void request(String line) {
        Map<String, String> req;
        try {
            req = Json.parseFlat(line);
        } catch (RuntimeException e) {
            out.println(Json.error("unsupported", "bad request: " + shortMessage(e)));
            out.println(Json.END);
            return;
        }
        String mode = req.getOrDefault("mode", "");
        if (mode.equals("spin")) spin();
        if (!mode.equals("doc") && !mode.equals("xls") || !req.containsKey("path")) {
            out.println(Json.error("unsupported", "request needs mode doc|xls and path"));
            out.println(Json.END);
            return;
        }
        one(mode, req.get("path"));
    }

    /** Extracts one file to out; returns the exit code a one-shot run should use. */
    private static int one(String mode, String path) {
        List<String> lines;
        // a serve JVM reports when it became ready, so a caller that spawned it early still gets its start-up
        long started = serveReady > 0 ? serveReady : System.currentTimeMillis();
        try {
            lines = extract(mode, new File(path));
        } catch (Throwable t) {
            String kind = kind(t, new File(path).length());
            if (!(t instanceof ExtractFailure)) {
                System.err.println("tender-extract: " + path + ": " + kind);
                t.printStackTrace(System.err);
            }
            out.println(Json.error(kind, t instanceof ExtractFailure ? t.getMessage() : shortMessage(t)));
            out.println(Json.END);
            if (t instanceof VirtualMachineError && !(t instanceof StackOverflowError)) {
                out.flush();
                System.exit(4);
            }
            return 3;
        }
        boolean stamped = false;
        for (String l : lines) {
            if (!stamped && l.startsWith("{\"t\":\"meta\"") && l.endsWith("}")) {
                // when the JVM began this document: the caller subtracts its spawn time to get the start-up cost
                l = l.substring(0, l.length() - 1) + ",\"started_at_ms\":" + started + "}";
                stamped = true;
            }
            out.println(l);
        }
        out.println(Json.END);
        return 0;
    }

    static List<String> extract(String mode, File f) throws Exception {
        if (!f.isFile()) throw new ExtractFailure("unsupported", "not a readable file: " + f);
        switch (Sniff.kindOf(f)) {
            case EMPTY:
                throw new ExtractFailure("empty", "file is empty (0 bytes)");
            case RTF:
                throw new ExtractFailure("unsupported", "content is RTF, not an OLE2 document");
            case OOXML:
                throw new ExtractFailure("unsupported", "content is OOXML (zip), not an OLE2 document");
            case HTML:
                throw new ExtractFailure("unsupported", "content is HTML/MHT, not an OLE2 document");
            case WORD2:
                throw new ExtractFailure("old-format", "Word 1/2 document: no POI reader for it");
            case RAW_BIFF:
                return OldReaders.xls(null, f);
            case UNKNOWN:
                throw new ExtractFailure("unsupported", "not an OLE2 document");
            default:
                break;
        }
        try (POIFSFileSystem raw = new POIFSFileSystem(f, true)) {
            String fmt = Sniff.oleFormat(raw.getRoot());
            if (fmt == null) throw new ExtractFailure("unsupported", "OLE2 file without a WordDocument or Workbook stream");
            if (fmt.equals("encrypted-ooxml")) throw new ExtractFailure("encrypted", "password-protected OOXML document");
            POIFSFileSystem fs = Sniff.canonicalNames(raw);
            if (fmt.equals("doc")) {
                try {
                    return DocReader.read(fs);
                } catch (OldWordFileFormatException e) {
                    return OldReaders.doc(fs);
                }
            }
            try {
                return XlsReader.read(fs);
            } catch (OldExcelFormatException e) {
                return OldReaders.xls(fs, f);
            }
        }
    }

    /**
     * The contract kind of a failure on a document of {@code length} bytes. Out of heap on a document under 1/16
     * of the heap is "corrupt" (a damaged length field sized the allocation; more heap cannot help), the same
     * rule as extract/jvm.py's heap_error, which applies it when -XX:+ExitOnOutOfMemoryError ended the JVM first.
     */
    static String kind(Throwable t, long length) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof ExtractFailure) return ((ExtractFailure) c).kind;
            if (c instanceof EncryptedDocumentException) return "encrypted";
            if (c instanceof OldFileFormatException) return "old-format";
            if (c instanceof EmptyFileException) return "empty";
            if (c instanceof OutOfMemoryError) {
                return length > 0 && length * 16 < Runtime.getRuntime().maxMemory() ? "corrupt" : "too-large";
            }
            if (c instanceof FileNotFoundException) return "unsupported";
            if (c.getCause() == c) break;
        }
        return "corrupt";
    }

    /** One line, no stack trace: "ExceptionClass: first line of message" cut to 300 chars. */
    static String shortMessage(Throwable t) {
        String m = t.getMessage();
        String s = t.getClass().getSimpleName() + (m == null ? "" : ": " + m.strip().split("\\R", 2)[0]);
        return s.length() > 300 ? s.substring(0, 300) : s;
    }

    static void warnings(StringBuilder meta, List<String> warnings) {
        if (warnings.isEmpty()) return;
        meta.append(",\"warnings\":[");
        for (int i = 0; i < warnings.size(); i++) {
            if (i > 0) meta.append(',');
            Json.str(meta, warnings.get(i));
        }
        meta.append(']');
    }
}
