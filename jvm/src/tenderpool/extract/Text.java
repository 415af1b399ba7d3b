package tenderpool.extract;

/**
 * Word's stored text carries field codes and control marks inline; Markdown wants only what the reader sees.
 */
final class Text {
    private Text() {}

    private static final class Field {
        final StringBuilder instr = new StringBuilder();
        boolean inResult;
        boolean placeholder; // PAGE/NUMPAGES: the stored result is one arbitrary page, so print {PAGE} instead

        String word() {
            String t = instr.toString().strip();
            int sp = 0;
            while (sp < t.length() && !Character.isWhitespace(t.charAt(sp))) sp++;
            return t.substring(0, sp).toUpperCase(java.util.Locale.ROOT);
        }
    }

    private static boolean visible(java.util.ArrayDeque<Field> stack) {
        for (Field f : stack) if (!f.inResult || f.placeholder) return false;
        return true;
    }

    /**
     * Keeps field results and drops field instructions (\u0013 instr \u0014 result \u0015, nested), as Tika's
     * WordExtractor does; page-number fields become {PAGE}/{NUMPAGES}. Then maps or drops control characters.
     */
    static String clean(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        java.util.ArrayDeque<Field> stack = new java.util.ArrayDeque<>();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == 0x13) {
                if (stack.size() < 64) stack.push(new Field());
                continue;
            }
            if (c == 0x14 || c == 0x15) {
                Field f = stack.peek();
                if (f == null) continue;
                if (!f.inResult) {
                    String w = f.word();
                    boolean page = w.equals("PAGE") || w.equals("NUMPAGES") || w.equals("SECTIONPAGES");
                    f.inResult = true;
                    stack.pop();
                    if (page && visible(stack)) sb.append('{').append(w).append('}');
                    stack.push(f);
                    f.placeholder = page;
                }
                if (c == 0x15) stack.pop();
                continue;
            }
            if (!stack.isEmpty()) {
                Field top = stack.peek();
                if (!top.inResult) {
                    if (top.instr.length() < 256) top.instr.append(c);
                    continue;
                }
                if (!visible(stack)) continue;
            }
            switch (c) {
                case '\t': sb.append('\t'); break;
                case 0x0b: case '\n': sb.append('\n'); break; // manual line break
                case 0x1e: sb.append('-'); break;             // non-breaking hyphen
                case 0xa0: case 0x3000: sb.append(c == 0xa0 ? ' ' : c); break;
                default:
                    // \r paragraph end, \u0007 cell mark, \u000c page/section break, \u0001 picture, \u0008 drawing,
                    // \u0002 note reference, \u0005 comment mark, \u001f soft hyphen: none is text.
                    if (c >= 0x20 && c != 0x7f && c != 0xfeff) sb.append(c);
            }
        }
        return sb.toString().strip();
    }

    /** Sheet values keep their own line breaks but no other control characters. */
    static String cleanCell(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\r') continue;
            if (c == '\n' || c == '\t' || c >= 0x20) sb.append(c);
        }
        return sb.toString();
    }
}
