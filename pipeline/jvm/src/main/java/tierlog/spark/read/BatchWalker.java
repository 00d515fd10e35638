package tierlog.spark.read;

import java.io.IOException;
import java.nio.ByteBuffer;
import tierlog.spark.io.SegmentBytes;

/**
 * Whole batches of a segment's byte range {@code [start, end)} (batch boundaries), read in
 * large sequential chunks, as the storage engine's FileRecords.batches walks them: bytes that
 * cannot start a batch are corrupt, a batch cut off by the end of the range (or of the file, a
 * torn tail) ends the walk quietly.
 */
final class BatchWalker {
    static final int CHUNK_BYTES = 8 * 1024 * 1024;

    private final SegmentBytes bytes;
    private final String segment;
    private long end;
    private ByteBuffer chunk = ByteBuffer.allocate(0);
    private long chunkStart;
    private int offset;

    BatchWalker(SegmentBytes bytes, String segment, long start, long end) {
        this.bytes = bytes;
        this.segment = segment;
        this.chunkStart = start;
        this.end = end;
    }

    /** One batch found by {@link #next}: its header and its bytes (valid until the next). */
    record Found(BatchHeader header, ByteBuffer bytes) {}

    /** The next whole batch, or null at the end of the range. */
    Found next() throws IOException {
        while (true) {
            long position = chunkStart + offset;
            if (end - position < BatchHeader.LOG_OVERHEAD) {
                return null;
            }
            int available = chunk.limit() - offset;
            boolean chunkReachesEnd = chunkStart + chunk.limit() >= end;
            if (available < BatchHeader.LOG_OVERHEAD
                    || (available < BatchHeader.HEADER_READ_SIZE && !chunkReachesEnd)) {
                fill(position, CHUNK_BYTES);
                continue;
            }
            BatchHeader header = BatchHeader.parse(chunk, offset, available, position, segment);
            if (header.size() <= available) {
                ByteBuffer batch = chunk.duplicate().position(offset).limit(offset + header.size()).slice();
                offset += header.size();
                return new Found(header, batch);
            }
            if (position + header.size() > end) {
                return null;
            }
            fill(position, Math.max(CHUNK_BYTES, header.size()));
        }
    }

    private void fill(long position, int wanted) throws IOException {
        int length = (int) Math.min(wanted, end - position);
        chunk = bytes.read(position, length);
        chunkStart = position;
        offset = 0;
        if (chunk.limit() < length) {
            end = position + chunk.limit(); // the file ends sooner: a torn tail
        }
        long next = position + chunk.limit();
        if (next < end) {
            bytes.prefetch(next, (int) Math.min(CHUNK_BYTES, end - next));
        }
    }
}
