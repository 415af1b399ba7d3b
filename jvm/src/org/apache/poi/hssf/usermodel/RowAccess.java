package org.apache.poi.hssf.usermodel;

import org.apache.poi.hssf.record.RowRecord;

/**
 * HSSFRow hides its ROW record (protected); tender-extract needs the record's fUnsynced flag ("bad font
 * height" in POI), which says whether a row's height was set by hand or is fitted to its content.
 * Lives in POI's package only for that access; it is compiled into tender-extract.jar, never into POI's jar.
 */
public final class RowAccess {
    private RowAccess() {}

    public static boolean manualHeight(HSSFRow row) {
        RowRecord r = row.getRowRecord();
        return r == null || r.getBadFontHeight();
    }
}
