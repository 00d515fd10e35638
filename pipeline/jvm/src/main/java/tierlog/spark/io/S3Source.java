package tierlog.spark.io;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * A segment's log in an {@code s3://} tier: the log part of the segment object {@code key},
 * which starts {@code base} bytes into it, read with one ranged GET per chunk. A split is
 * read chunk after chunk, so the next chunk's GET runs while this one is decoded: the
 * reader waits for S3's round trip once per split, not once per chunk.
 */
public record S3Source(S3Connection connection, String bucket, String key, long base, String name)
        implements SegmentSource {
    private static final long serialVersionUID = 1L;

    @Override
    public SegmentBytes open() {
        return new Ranges();
    }

    /**
     * Ranged reads, one of them fetched ahead when the reader says which comes next, into
     * two arrays taken in turn: a read's buffer is valid until the next read only, so the
     * array of the one before is free for the read ahead by then.
     */
    private final class Ranges implements SegmentBytes {
        private RangeFetch ahead;
        private long aheadPosition = -1;
        private int aheadLength;
        private byte[] current; // the array of the buffer the last read returned
        private byte[] spare; // an array no read and no GET uses, or null

        @Override
        public ByteBuffer read(long position, int length) throws IOException {
            RangeFetch fetched = ahead;
            ahead = null;
            if (fetched == null || position != aheadPosition || length != aheadLength) {
                if (fetched != null) {
                    fetched.cancel(); // its array stays its GET's: never reused
                }
                fetched = start(position, length);
            }
            ByteBuffer bytes = fetched.await();
            spare = current;
            current = bytes.array();
            return bytes;
        }

        @Override
        public void prefetch(long position, int length) {
            close(); // one read ahead at most
            aheadPosition = position;
            aheadLength = length;
            ahead = start(position, length);
        }

        private RangeFetch start(long position, int length) {
            byte[] into = spare;
            spare = null;
            return S3Ranges.start(connection, bucket, key, base + position, length, into);
        }

        @Override
        public void close() {
            if (ahead != null) {
                ahead.cancel();
                ahead = null;
            }
        }
    }
}
