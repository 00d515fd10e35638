package tierlog.spark.io;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.Executors;

/**
 * A segment's log in an {@code s3://} tier: the log part of the segment object {@code key},
 * which starts {@code base} bytes into it, read with one ranged GET per chunk. A split is
 * read chunk after chunk, so the next chunk's GET runs while this one is decoded: the
 * reader waits for S3's round trip once per split, not once per chunk.
 */
public record S3Source(S3Connection connection, String bucket, String key, long base, String name)
        implements SegmentSource {
    private static final long serialVersionUID = 1L;

    /** Prefetching threads, shared by the JVM's readers; daemons, so they never hold it up. */
    private static final Executor PREFETCH =
            Executors.newCachedThreadPool(
                    task -> {
                        Thread thread = new Thread(task, "tierlog-s3-prefetch");
                        thread.setDaemon(true);
                        return thread;
                    });

    @Override
    public SegmentBytes open() {
        return new Ranges();
    }

    /** Ranged reads, one of them fetched ahead when the reader says which comes next. */
    private final class Ranges implements SegmentBytes {
        private CompletableFuture<ByteBuffer> ahead;
        private long aheadPosition = -1;
        private int aheadLength;

        @Override
        public ByteBuffer read(long position, int length) throws IOException {
            CompletableFuture<ByteBuffer> fetched = ahead;
            ahead = null;
            if (fetched == null || position != aheadPosition || length != aheadLength) {
                if (fetched != null) {
                    fetched.cancel(false);
                }
                return S3Ranges.read(connection, bucket, key, base + position, length);
            }
            try {
                return fetched.get();
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
                throw new InterruptedIOException("interrupted while waiting for " + name);
            } catch (ExecutionException failed) {
                Throwable cause = failed.getCause();
                if (cause instanceof UncheckedIOException unchecked) {
                    throw unchecked.getCause();
                }
                throw new IOException("reading " + name + " failed", cause);
            }
        }

        @Override
        public void prefetch(long position, int length) {
            aheadPosition = position;
            aheadLength = length;
            ahead = CompletableFuture.supplyAsync(() -> get(position, length), PREFETCH);
        }

        private ByteBuffer get(long position, int length) {
            try {
                return S3Ranges.read(connection, bucket, key, base + position, length);
            } catch (IOException error) {
                throw new UncheckedIOException(error);
            }
        }

        @Override
        public void close() {
            if (ahead != null) {
                ahead.cancel(false);
            }
        }
    }
}
