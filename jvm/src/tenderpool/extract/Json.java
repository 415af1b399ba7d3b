package tenderpool.extract;

import java.util.HashMap;
import java.util.Map;

/**
 * JSON without a library: the CLI's classpath is kept to POI and its three commons jars so the CDS archive
 * stays small and no extra parser sits between an attacker's file and stdout.
 */
final class Json {
    private Json() {}

    static void str(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20 || c == 0x2028 || c == 0x2029) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else if (Character.isSurrogate(c)) {
                        // Lone surrogates would make the UTF-8 encoder emit '?'; only pairs are kept.
                        if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                            sb.append(c).append(s.charAt(++i));
                        } else {
                            sb.append("\\ufffd");
                        }
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }

    /** Starts an object with its tag: {"t":"para" */
    static StringBuilder obj(String tag) {
        StringBuilder sb = new StringBuilder(64);
        sb.append("{\"t\":\"").append(tag).append('"');
        return sb;
    }

    static StringBuilder field(StringBuilder sb, String name, String value) {
        sb.append(",\"").append(name).append("\":");
        str(sb, value);
        return sb;
    }

    static StringBuilder field(StringBuilder sb, String name, long value) {
        sb.append(",\"").append(name).append("\":").append(value);
        return sb;
    }

    static String error(String kind, String message) {
        StringBuilder sb = obj("error");
        field(sb, "kind", kind);
        field(sb, "message", message == null ? "" : message);
        return sb.append('}').toString();
    }

    static final String END = "{\"t\":\"end\"}";

    /** Parses a flat object of string values, enough for serve-mode requests; throws on anything else. */
    static Map<String, String> parseFlat(String line) {
        Map<String, String> out = new HashMap<>();
        int[] pos = {skipWs(line, 0)};
        expect(line, pos, '{');
        pos[0] = skipWs(line, pos[0]);
        if (peek(line, pos) == '}') return out;
        while (true) {
            pos[0] = skipWs(line, pos[0]);
            String key = readString(line, pos);
            pos[0] = skipWs(line, pos[0]);
            expect(line, pos, ':');
            pos[0] = skipWs(line, pos[0]);
            out.put(key, readString(line, pos));
            pos[0] = skipWs(line, pos[0]);
            char c = peek(line, pos);
            pos[0]++;
            if (c == '}') return out;
            if (c != ',') throw new IllegalArgumentException("bad request at " + (pos[0] - 1));
        }
    }

    private static int skipWs(String s, int i) {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
        return i;
    }

    private static char peek(String s, int[] pos) {
        if (pos[0] >= s.length()) throw new IllegalArgumentException("truncated request");
        return s.charAt(pos[0]);
    }

    private static void expect(String s, int[] pos, char c) {
        if (peek(s, pos) != c) throw new IllegalArgumentException("expected '" + c + "' at " + pos[0]);
        pos[0]++;
    }

    private static String readString(String s, int[] pos) {
        expect(s, pos, '"');
        StringBuilder sb = new StringBuilder();
        while (true) {
            char c = peek(s, pos);
            pos[0]++;
            if (c == '"') return sb.toString();
            if (c != '\\') { sb.append(c); continue; }
            char e = peek(s, pos);
            pos[0]++;
            switch (e) {
                case 'n': sb.append('\n'); break;
                case 't': sb.append('\t'); break;
                case 'r': sb.append('\r'); break;
                case 'b': sb.append('\b'); break;
                case 'f': sb.append('\f'); break;
                case 'u':
                    if (pos[0] + 4 > s.length()) throw new IllegalArgumentException("truncated escape");
                    sb.append((char) Integer.parseInt(s.substring(pos[0], pos[0] + 4), 16));
                    pos[0] += 4;
                    break;
                default: sb.append(e);
            }
        }
    }
}
