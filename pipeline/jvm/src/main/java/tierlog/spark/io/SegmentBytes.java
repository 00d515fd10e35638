package tierlog.spark.io;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;

/** An opened segment's log bytes, read by position (positions within the log). */
public interface SegmentBytes extends Closeable {
    /**
     * Up to {@code length} bytes at {@code position}: fewer only where the log ends. The buffer
     * (position 0, limit the bytes read) is valid until the next read.
     */
    ByteBuffer read(long position, int length) throws IOException;

    /**
     * A hint that the next read is likely {@code [position, position + length)}, so a
     * store with a long round trip can fetch it while the caller decodes this one.
     */
    default void prefetch(long position, int length) {}
}
