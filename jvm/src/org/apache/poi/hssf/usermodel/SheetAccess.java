package org.apache.poi.hssf.usermodel;

import org.apache.poi.hssf.record.RecordBase;
import org.apache.poi.hssf.record.UnknownRecord;

/**
 * POI keeps a sheet's STANDARDWIDTH record (the default column width with its padding, 1/256 of a character)
 * as an unknown record inside its package-private InternalSheet; the page estimate needs it (LibreOffice's
 * default column width). Lives in POI's package only for that access, like RowAccess.
 */
public final class SheetAccess {
    private SheetAccess() {}

    /** The STANDARDWIDTH record's width in 1/256 characters, 0 when the sheet has none. */
    public static int standardWidth(HSSFSheet sheet) {
        for (RecordBase r : sheet.getSheet().getRecords()) {
            if (r instanceof UnknownRecord && ((UnknownRecord) r).getSid() == UnknownRecord.STANDARDWIDTH_0099) {
                byte[] b = ((UnknownRecord) r).serialize();  // 4 header bytes, then the 2-byte width
                return b.length >= 6 ? (b[4] & 0xFF) | (b[5] & 0xFF) << 8 : 0;
            }
        }
        return 0;
    }
}
