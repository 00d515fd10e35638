package tierlog.spark.io;

import static java.lang.System.Logger.Level.WARNING;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Byte ranges of S3 objects, for Spark executors reading tiered segments.
 *
 * <p>One ranged GET per read, retried like tierlog's Python S3 store retries
 * ({@code tierlog.storage.tier.s3_store}): 5xx, throttling, timeouts and dropped
 * connections get another attempt after an exponential backoff with full jitter, so that
 * many executors throttled at once do not come back at once; a refusal (denied, no such
 * key, a range past the end) fails at once. Each retry is logged at WARNING, which is how
 * an executor's log shows a struggling S3.
 *
 * <p>The attempts run on a GET thread of this class while the caller waits on a
 * {@link RangeFetch}, so that interrupting the caller ends its wait at once (see there).
 */
public final class S3Ranges {
    private static final System.Logger LOG = System.getLogger(S3Ranges.class.getName());
    private static final long BACKOFF_BASE_MILLIS = 100; // the first retry waits up to this
    private static final long BACKOFF_MAX_MILLIS = 5_000;
    /** Daemons, so that a GET left behind never holds the JVM up. */
    private static final ExecutorService GETS = Executors.newCachedThreadPool(task -> {
        Thread thread = new Thread(task, "tierlog-s3-get");
        thread.setDaemon(true);
        return thread;
    });

    private S3Ranges() {}

    /**
     * Bytes [offset, offset+length) of s3://bucket/key: one ranged GET, retried on
     * 5xx/throttling/IO errors with jittered exponential backoff up to maxAttempts.
     *
     * @return a buffer of exactly {@code length} bytes, positioned at 0
     * @throws S3ReadException if S3 refused the read (its status and error code in the
     *     message), the object ends before {@code offset + length}, or every attempt failed
     * @throws InterruptedIOException if the thread was interrupted (a killed Spark task)
     */
    public static ByteBuffer read(
            S3Connection connection, String bucket, String key, long offset, int length)
            throws IOException {
        return start(connection, bucket, key, offset, length, null).await();
    }

    /**
     * The same read, under way on a GET thread when this returns: a read ahead. Its bytes
     * go into {@code into} (from index 0) when it is long enough, else into a new array:
     * a reader that reuses its arrays spares the JVM an 8 MiB allocation (zeroed, and
     * humongous to G1) per chunk. The array is the GET's until {@link RangeFetch#await()}
     * returns it; a cancelled fetch's array may still be written to.
     */
    static RangeFetch start(S3Connection connection, String bucket, String key, long offset,
            int length, byte[] into) {
        if (bucket == null || bucket.isEmpty() || key == null || key.isEmpty()) {
            throw new IllegalArgumentException(
                    "an S3 read needs a bucket and a key, got s3://" + bucket + "/" + key);
        }
        if (offset < 0 || length < 0) {
            throw new IllegalArgumentException(
                    "negative S3 range: offset " + offset + ", length " + length);
        }
        String what = "S3 GET s3://" + bucket + "/" + key;
        if (length == 0) {
            return new RangeFetch(what, CompletableFuture.completedFuture(ByteBuffer.allocate(0)));
        }
        byte[] array = into != null && into.length >= length ? into : new byte[length];
        RangeGet get = new RangeGet(connection, bucket, key, offset, length, array);
        return new RangeFetch(get.toString(), GETS.submit(() -> attempts(get, connection)));
    }

    private static ByteBuffer attempts(RangeGet get, S3Connection connection) throws IOException {
        for (int attempt = 1; ; attempt++) {
            try {
                return get.send();
            } catch (RangeGet.Retryable failure) {
                if (attempt >= connection.maxAttempts()) {
                    throw new S3ReadException(
                            get + ": " + failure.getMessage() + "; gave up after " + attempt
                                    + " attempts",
                            failure.statusCode(), failure.errorCode(), failure.getCause());
                }
                long waitMillis = backoffMillis(attempt);
                LOG.log(WARNING, get + ": " + failure.getMessage() + "; attempt " + attempt + " of "
                        + connection.maxAttempts() + " failed, retrying in " + waitMillis + " ms");
                sleep(waitMillis);
            }
        }
    }

    /** Full jitter: uniform in [0, min(max, base * 2^(n-1))] after the n-th failure. */
    private static long backoffMillis(int failedAttempts) {
        long ceiling = BACKOFF_BASE_MILLIS << Math.min(failedAttempts - 1, 20);
        return ThreadLocalRandom.current().nextLong(Math.min(BACKOFF_MAX_MILLIS, ceiling) + 1);
    }

    private static void sleep(long millis) throws InterruptedIOException {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while waiting to retry an S3 read");
        }
    }
}
