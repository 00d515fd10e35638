package tierlog.spark.read;

import java.nio.ByteBuffer;
import java.util.Arrays;

/**
 * The bytes one column batch's keys and values lie in: each v2 records section is
 * decompressed (or, uncompressed, copied) onto its end, and a v0/v1 record's key and value
 * copied there, so the key and value columns are only positions into it
 * ({@link ArenaBinaryVector}) and no record's bytes are copied one by one (issue 21). One
 * array, grown when short and reused from column batch to column batch: it is emptied only
 * once Spark has consumed the batch its bytes belong to (the reader's {@code next()}).
 */
final class ByteArena {
    private byte[] bytes = new byte[1 << 16];
    private int length;

    /** The array (replaced when it grows: read it again after any append). */
    byte[] bytes() {
        return bytes;
    }

    /** Where the next appended byte goes. */
    int length() {
        return length;
    }

    /** Make room for {@code count} more bytes after {@link #length}. */
    void reserve(int count) {
        int needed = Math.addExact(length, count);
        if (needed > bytes.length) {
            bytes = Arrays.copyOf(bytes, (int) Math.min(Integer.MAX_VALUE - 8, Math.max(needed, 2L * bytes.length)));
        }
    }

    /** Take {@code count} bytes written into {@link #bytes} after {@link #length} as appended. */
    void commit(int count) {
        length += count;
    }

    /** Append the remaining bytes of {@code source} (its position unchanged); returns where they start. */
    int append(ByteBuffer source) {
        int start = length;
        int count = source.remaining();
        reserve(count);
        source.get(source.position(), bytes, start, count);
        length += count;
        return start;
    }

    /** Keep only the bytes from {@code start} on, moved to the arena's start. */
    void keepFrom(int start) {
        System.arraycopy(bytes, start, bytes, 0, length - start);
        length -= start;
    }
}
