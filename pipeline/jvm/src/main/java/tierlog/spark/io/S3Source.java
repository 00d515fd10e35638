package tierlog.spark.io;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * A segment's log in an {@code s3://} tier: the log part of the segment object {@code key},
 * which starts {@code base} bytes into it, read with one ranged GET per chunk.
 */
public record S3Source(S3Connection connection, String bucket, String key, long base, String name)
        implements SegmentSource {
    private static final long serialVersionUID = 1L;

    @Override
    public SegmentBytes open() {
        return new SegmentBytes() {
            @Override
            public ByteBuffer read(long position, int length) throws IOException {
                return S3Ranges.read(connection, bucket, key, base + position, length);
            }

            @Override
            public void close() {}
        };
    }
}
